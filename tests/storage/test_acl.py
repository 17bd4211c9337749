"""Everything redelay does in normal operation works as the least-privilege Redis user that
docs/operations.md gives (read from there), on every Redis binary the suite has."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from _binaries import redis_binaries
from _wait import wait_until

from actors import DelayQueue, Job
from actors.cli.app import main
from actors.server.embedded import RedisProcess

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
NAMESPACE = "acl"
PASSWORD = "s3cret pw"  # a space: the URL must quote it


def documented_acl_line() -> list[str]:
    """The ``ACL SETUSER`` line of docs/operations.md, as words, with the test's password."""
    (line,) = re.findall(r"^ACL SETUSER .*$", OPERATIONS.read_text(), re.MULTILINE)
    words = line.split()[2:]
    return [">" + PASSWORD if w.startswith(">") else w for w in words]


@pytest.fixture(params=redis_binaries())
def acl_url(request: pytest.FixtureRequest, redis_factory: Callable[..., RedisProcess]) -> str:
    server = redis_factory(binary=request.param)
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", *documented_acl_line())  # type: ignore[no-untyped-call]
    admin.close()
    user = documented_acl_line()[0]
    return f"unix://{user}:{PASSWORD.replace(' ', '%20')}@{server.socket_path}"


@pytest.fixture
def queue(acl_url: str) -> Iterator[DelayQueue]:
    q = DelayQueue(acl_url, namespace=NAMESPACE)
    yield q
    q.stop(grace=1)


def test_the_user_is_really_restricted(acl_url: str) -> None:
    client = redis.Redis.from_url(acl_url)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set("other-app:key", "v")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command("CLIENT", "KILL", "ID", "1")  # type: ignore[no-untyped-call]
    client.close()


def test_producer_worker_and_a_graceful_stop_within_grace(queue: DelayQueue) -> None:
    seen: list[str] = []
    started = []

    def handle(job: Job) -> None:
        seen.append(job.id)

    queue.handler("t", concurrency=4)(handle)
    queue.handler("slow")(lambda job: started.append(job.id))
    queue.start()
    queue.add_many([{"topic": "t", "id": f"j{n}", "delay": 0.05 * (n % 3)} for n in range(50)])
    wait_until(lambda: len(seen) == 50, what="50 jobs delivered as the ACL user")
    assert queue.health()["carrier"]["redis"]["full"] is False
    grace_s = 2.0
    began = time.monotonic()
    report = queue.stop(grace=grace_s)
    took_s = time.monotonic() - began
    assert took_s < grace_s, (took_s, report)
    assert not _errors(report), report
    assert sorted(seen) == sorted(f"j{n}" for n in range(50))


def _errors(report: object) -> list[str]:
    """Every error text in a stop report (nested dicts), for the assertion's message."""
    found: list[str] = []
    if isinstance(report, dict):
        for key, value in report.items():
            if "error" in str(key) and value:
                found.append(f"{key}: {value}")
            found += _errors(value)
    return found


def test_the_cli_commands_work_as_that_user(
    acl_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    producer = DelayQueue(acl_url, namespace=NAMESPACE, producer_only=True)
    producer.add("t", "later", {"n": 1}, delay=3600)
    producer.add("t", "gone", {"n": 2}, delay=3600)
    for job_id in ("d1", "d2"):  # two failed attempts on a one-step schedule: dead
        producer.add("t", job_id, {"n": 3}, retry=[0])
        for _ in range(2):
            (lease,) = producer.store.lease("t", 1)
            producer.store.fail("t", job_id, lease.token, "boom", 0)
    common = ["--redis", acl_url, "--namespace", NAMESPACE, "--json"]

    def cli(*args: str) -> object:
        code = main([*args, *common])
        out, err = capsys.readouterr()
        assert code == 0, (args, code, out, err)
        return json.loads(out)

    stats = cli("stats")
    assert stats["totals"]["dead"] == 2, stats  # type: ignore[index]
    assert cli("get", "t", "later")["state"] == "delayed"  # type: ignore[index]
    assert cli("jobs", "t", "--state", "delayed")
    assert cli("cancel", "t", "gone")
    assert len(cli("dead", "list")) == 2  # type: ignore[arg-type]
    cli("dead", "requeue", "--topic", "t", "--id", "d1")
    cli("dead", "purge", "--topic", "t", "--id", "d2")
    assert cli("history", "t", "d1")
    assert cli("replay", "--at", "-1s") is not None
    verify = cli("verify")
    assert verify["ok"] and verify["live_jobs"] == 2, verify  # type: ignore[index]
    assert cli("metrics")
    producer.stop()


def test_without_info_the_worker_delivers_and_says_once_it_cannot_see_memory(
    redis_factory: Callable[..., RedisProcess], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_factory()
    admin = server.client()
    line = [w for w in documented_acl_line() if w != "+info"]
    admin.execute_command("ACL", "SETUSER", *line)  # type: ignore[no-untyped-call]
    admin.close()
    url = f"unix://{documented_acl_line()[0]}:{PASSWORD.replace(' ', '%20')}@{server.socket_path}"
    queue = DelayQueue(url, namespace=NAMESPACE)
    seen: list[str] = []
    queue.handler("t")(lambda job: seen.append(job.id))
    queue.start()
    try:
        queue.add_many([{"topic": "t", "id": f"j{n}", "delay": 0.05} for n in range(20)])
        wait_until(lambda: len(seen) == 20, what="20 jobs delivered without +info")
        assert queue.health()["carrier"]["redis"]["full"] is None
    finally:
        queue.stop(grace=1)
    lines = [r.getMessage() for r in caplog.records if "cannot read INFO memory" in r.getMessage()]
    assert len(lines) == 1, lines
