"""actors.testing: the example in docs/testing.md runs as written, and the simulators use only it
(no private name of the package, no private attribute of a queue)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors import DelayQueue, testing
from actors.server.embedded import RedisProcess

ROOT = Path(__file__).resolve().parents[2]
SIMULATIONS = ROOT / "simulations"

# An underscore name imported from the package, the package's private modules, or a queue's
# private actor system.
PRIVATE = re.compile(
    r"from\s+actors[\w.]*\s+import\s+(?:\(\s*)?(?:[\w\s,]*,\s*)?_\w"
    r"|\bactors\._"
    r"|\._system\b"
)


def guide_example() -> str:
    text = (ROOT / "docs" / "testing.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return str(block)


def test_the_guide_example_runs(
    redis_server: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    namespace: dict[str, Any] = {"__name__": "testing_example"}
    exec(compile(guide_example(), "docs/testing.md", "exec"), namespace)
    tests: dict[str, Callable[[], None]] = {
        name: fn for name, fn in namespace.items() if name.startswith("test_")
    }
    assert len(tests) == 2
    for test in tests.values():
        test()


def test_the_simulators_use_no_private_name_of_the_package() -> None:
    found = []
    for path in sorted(SIMULATIONS.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "from actors import _constants as c",
        "from actors.queue import _schedule_ms, _seconds",
        "from actors.queue import DelayQueue, _seconds",
        "import actors._validation",
        "    return queue._system",
    ],
)
def test_the_private_name_check_can_fail(line: str) -> None:
    assert PRIVATE.search(line)


def test_a_killed_worker_beats_no_more_and_its_heartbeat_is_left_to_expire(
    redis_server: RedisProcess,
) -> None:
    queue = DelayQueue(redis_server.url, namespace="killed-heartbeat")
    queue.handler("mail")(lambda job: None)
    queue.start()
    system = testing.actor_system(queue)
    assert system is not None
    beating = system.heartbeat._thread  # this queue's own: other tests' queues have one too
    assert beating is not None and beating.is_alive()
    name = next(iter(queue.workers()))
    testing.kill_worker(queue)
    assert not beating.is_alive()  # a killed process's threads are gone, this one too
    # Not forgotten: like a SIGKILLed worker's, the heartbeat expires by its TTL.
    survivor = DelayQueue(redis_server.url, namespace="killed-heartbeat", producer_only=True)
    assert name in survivor.workers()
    survivor.close()
    queue.close()
