"""What a new user of the public API meets (issue 11): bodies JSON cannot hold, a second handler
for a topic, `at` in the past or in the wrong unit, errors in the caller's units, and handler
signatures that mypy checks. Each runs against a real Redis and checks that a refusal wrote
nothing.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from actors import ConfigError, DelayQueue, Job, ValidationError
from actors import _constants as c
from actors.clock import FakeClock
from actors.storage.store import Store

YEAR_S = 365.25 * 86_400


@pytest.fixture
def queue(redis_client: redis.Redis, fake_clock: FakeClock) -> Iterator[DelayQueue]:
    q = DelayQueue(redis_client, "userfacing", clock=fake_clock, producer_only=True)
    yield q
    q.close()


def fingerprint(client: redis.Redis) -> dict[bytes, bytes]:
    return {key: client.dump(key) for key in sorted(client.keys("*"))}  # type: ignore[misc]


def refused(client: redis.Redis, call: Callable[[], object], field: str) -> ValidationError:
    before = fingerprint(client)
    with pytest.raises(ValidationError) as caught:
        call()
    assert caught.value.field == field, caught.value
    assert caught.value.limit, caught.value
    assert fingerprint(client) == before
    return caught.value


# -- 3: NaN and Infinity in a body ----------------------------------------------------------


@dataclasses.dataclass
class Reading:
    sensor: str
    value: float


NON_FINITE_BODIES: list[tuple[object, str]] = [
    ({"x": math.nan}, "body.x"),
    ({"x": math.inf}, "body.x"),
    ({"items": [1.0, 2.0, -math.inf]}, "body.items[2]"),
    ({"a": {"b c": [None, {"d": math.nan}]}}, 'body.a["b c"][1].d'),
    (math.nan, "body"),
    ([0, (1, math.inf)], "body[1][1]"),
    ({"reading": Reading("s1", math.nan)}, "body.reading.value"),
]


@pytest.mark.parametrize(("body", "path"), NON_FINITE_BODIES)
def test_a_body_holding_nan_or_infinity_is_refused_naming_its_path(
    queue: DelayQueue, redis_client: redis.Redis, body: object, path: str
) -> None:
    queue.add("t", "existing", {"x": 1})
    error = refused(redis_client, lambda: queue.add("t", "j", body), path)
    assert "NaN or Infinity" in str(error)
    jobs: list[dict[str, Any]] = [
        {"topic": "t", "id": "ok"},
        {"topic": "t", "id": "j", "body": body},
    ]
    refused(redis_client, lambda: queue.add_many(jobs), f"jobs[1].{path}")


def test_a_body_with_nulls_and_finite_floats_is_stored_as_given(queue: DelayQueue) -> None:
    body = {"x": None, "y": [1.5, None, -0.0], "z": 1e300}
    queue.add("t", "j", body)
    info = queue.get("t", "j")
    assert info is not None
    # JobInfo.body is the stored JSON here; decoded where JobInfo decodes it (issue 11 point 12).
    stored = orjson.loads(info.body) if isinstance(info.body, bytes) else info.body
    assert stored == body


def test_the_store_refuses_a_nan_body_too(store: Store) -> None:
    with pytest.raises(ValidationError) as caught:
        store.new_job("t", "j", {"x": [math.nan]})
    assert caught.value.field == "body.x[0]"


# -- 6: one handler per topic ---------------------------------------------------------------


def test_a_second_handler_for_a_topic_is_refused_and_the_first_one_runs(
    redis_client: redis.Redis,
) -> None:
    q = DelayQueue(redis_client, "handlers")  # the real clock: the job really runs
    ran: list[str] = []
    done = threading.Event()
    try:

        @q.handler("orders.close")
        def first(job: Job) -> None:
            ran.append("first")
            done.set()

        def second(job: Job) -> None:
            ran.append("second")
            done.set()

        with pytest.raises(ConfigError, match=r"'orders\.close'"):
            q.handler("orders.close")(second)
        # Two decorators made before either is applied: the second application is refused.
        one, two = q.handler("t2"), q.handler("t2")
        one(first)
        with pytest.raises(ConfigError, match="'t2'"):
            two(second)
        q.start()
        q.add("orders.close", "o1")
        assert done.wait(timeout=30)
    finally:
        q.stop()
    assert ran == ["first"]


# -- 7: `at` in the past, and in the wrong unit ---------------------------------------------


@pytest.mark.parametrize("at", [1, 0, 1_000_000_000.5, datetime(2001, 1, 1, tzinfo=UTC)])
def test_a_past_at_means_now(queue: DelayQueue, fake_clock: FakeClock, at: Any) -> None:
    queue.add("t", "j", at=at)
    info = queue.get("t", "j")
    assert info is not None and info.state == "ready"
    assert info.due_ms == fake_clock.now_ms()


def test_a_future_at_in_epoch_seconds_is_kept(queue: DelayQueue, fake_clock: FakeClock) -> None:
    at_s = fake_clock.now_ms() / 1000 + 90
    queue.add("t", "j", at=at_s)
    info = queue.get("t", "j")
    assert info is not None and info.state == "delayed"
    assert info.due_ms == fake_clock.now_ms() + 90_000


def test_an_at_in_milliseconds_is_refused_with_a_hint(
    queue: DelayQueue, redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    error = refused(redis_client, lambda: queue.add("t", "j", at=fake_clock.now_ms()), "at")
    assert "milliseconds" in str(error) and "seconds" in str(error)
    assert f"{fake_clock.now_ms() // 1000}" in str(error)  # the value it should have been


@pytest.mark.parametrize(
    ("at", "words"),
    [
        (-1, "before the epoch"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        ("tomorrow", "epoch seconds"),
        (True, "epoch seconds"),
        (1_700_000_000 + 11 * YEAR_S, "more than the limit of 10 years"),
    ],
)
def test_a_bad_at_is_still_refused(
    queue: DelayQueue, redis_client: redis.Redis, at: Any, words: str
) -> None:
    error = refused(redis_client, lambda: queue.add("t", "j", at=at), "at")
    assert words in str(error)


# -- 8: errors in the caller's units --------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"delay": 100 * YEAR_S}, "delay", "is 100 years, more than the limit of 10 years"),
        ({"delay": timedelta(days=-2)}, "delay", "is -2 days, which is negative"),
        ({"lease": 2 * 86_400}, "lease", "is 2 days, more than the limit of 1 day"),
        ({"lease": 0.05}, "lease", "is 50 ms, less than the minimum of 100 ms"),
        ({"retry": [15, 20 * YEAR_S]}, "retry[1]", "is 20 years, more than the limit of 10"),
    ],
)
def test_duration_errors_speak_seconds_readably(
    queue: DelayQueue, redis_client: redis.Redis, kwargs: Any, field: str, words: str
) -> None:
    error = refused(redis_client, lambda: queue.add("t", "j", **kwargs), field)
    assert words in str(error), error
    assert "e+" not in str(error) and " ms (" not in error.limit, error
    assert error.limit.endswith("s") or "s (" in error.limit  # the limit is in seconds too


def test_handler_and_retry_errors_speak_seconds(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    from actors import Retry

    q = DelayQueue(redis_client, "units", clock=fake_clock)
    try:
        with pytest.raises(ValidationError, match="timeout: is 3 days, more than the limit"):
            q.handler("t", timeout=3 * 86_400)
        with pytest.raises(ValidationError, match="after: is 200 years, more than the limit"):
            raise Retry(after=200 * YEAR_S)
    finally:
        q.close()
    with pytest.raises(ValidationError, match="default_lease: is 1 ms, less than the minimum"):
        DelayQueue(redis_client, "units", clock=fake_clock, default_lease=0.001)


def test_store_errors_keep_milliseconds_but_never_scientific_notation(store: Store) -> None:
    with pytest.raises(ValidationError) as caught:
        store.new_job("t", "j", delay_ms=3.15576e12)
    text = str(caught.value)
    assert "3155760000000 ms (100 years)" in text and "e+" not in text
    assert caught.value.limit == f"0 to {c.DELAY_MAX_MS} ms (ten years)"


# -- 13: handler signatures are type-checked ------------------------------------------------

SNIPPET = """
from actors import DelayQueue, Job

queue = DelayQueue("redis://localhost:1/0", producer_only=True)


@queue.handler("good.sync")
def good_sync(job: Job) -> None: ...


@queue.handler("good.returns_note")
def good_note(job: Job) -> str:
    return "done"


@queue.handler("good.async")
async def good_async(job: Job) -> None: ...


@queue.handler("bad.no_arguments")
def bad_no_arguments() -> None: ...


@queue.handler("bad.wrong_type")
def bad_wrong_type(job: int) -> None: ...


@queue.handler("bad.async_two")
async def bad_async_two(job: Job, other: str) -> None: ...


reveal_type(good_async)
"""


def test_mypy_flags_a_handler_that_does_not_take_a_job(tmp_path: Path) -> None:
    snippet = tmp_path / "handlers_snippet.py"
    snippet.write_text(textwrap.dedent(SNIPPET))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    lines = result.stdout.splitlines()
    errors = [line for line in lines if ": error:" in line]
    source = snippet.read_text().splitlines()
    flagged = {source[int(line.split(":")[1]) - 1] for line in errors}
    assert flagged == {
        '@queue.handler("bad.no_arguments")',
        '@queue.handler("bad.wrong_type")',
        '@queue.handler("bad.async_two")',
    }, result.stdout
    # The decorator keeps the function's own type (an async handler stays a coroutine function).
    assert any("Coroutine[Any, Any, None]" in line for line in lines if "note:" in line), lines


def test_handled_topics_lists_each_registered_topic_once(queue: DelayQueue) -> None:
    assert queue.handled_topics == []

    @queue.handler("orders.close")
    def close(job: Job) -> None: ...

    @queue.handler("refunds.check")
    async def check(job: Job) -> None: ...

    assert queue.handled_topics == ["orders.close", "refunds.check"]
