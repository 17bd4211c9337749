"""Failures are visible (issue 12 point 1): a failed attempt is logged with its traceback and
keeps that traceback with the job (record and audit event, shown by the CLI); the facade's
on_failure and on_dead hooks; handlers that overrun their timeout and the slots they hold."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
import redis
from _actor_support import events, stats
from _wait import WAIT_S, wait_until

from actors import DelayQueue, Job
from actors import _constants as c
from actors.clock import FakeClock, SystemClock
from actors.runtime.messages import Run
from actors.runtime.pool import ConsumerPool
from actors.server.embedded import RedisProcess
from actors.storage.store import Store
from actors.values import TopicConfig

NAMESPACE = "visible"


def failing_lookup(job: Job) -> None:
    prices: dict[str, int] = {}
    prices[job.body["sku"]] += 1  # KeyError: the bug a new user meets first


# -- the traceback kept with the attempt --------------------------------------------------------


def test_a_failed_attempt_keeps_the_end_of_its_traceback(store: Store) -> None:
    store.add(store.new_job("t", "j", {"sku": "a"}, retry_ms=[0]))
    (lease,) = store.lease("t", 1)
    long_trace = "Traceback (most recent call last):\n" + "  é frame\n" * 1000 + "KeyError: 'a'\n"
    store.fail("t", "j", lease.token, "KeyError: 'a'", traceback=long_trace)

    info = store.get("t", "j")
    assert info is not None and info.traceback is not None
    assert info.traceback.endswith("KeyError: 'a'\n")
    assert len(info.traceback.encode()) <= c.TRACEBACK_MAX_BYTES
    assert len(info.traceback.encode()) > c.TRACEBACK_MAX_BYTES - 4  # cut, not dropped
    failed = events(store, "j")[-1]
    assert failed["e"] == "failed" and failed["tb"] == info.traceback

    (lease,) = store.lease("t", 1)
    store.fail("t", "j", lease.token, "chose to give up")  # no traceback this time
    info = store.get("t", "j")
    assert info is not None and info.state == "dead"
    assert info.traceback is None  # it was the earlier attempt's, not this one's
    dead = events(store, "j")[-1]
    assert dead["e"] == "dead" and "tb" not in dead


# -- logged, and handed to the hooks ----------------------------------------------------------


@pytest.fixture
def queue(redis_server: RedisProcess, redis_client: redis.Redis) -> Iterator[DelayQueue]:
    q = DelayQueue(redis_server.url, namespace=NAMESPACE, sweep_interval_s=0.2)
    yield q
    q.stop(grace=1)


def test_a_failed_attempt_is_logged_with_its_traceback_and_error_when_dead(
    queue: DelayQueue, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="actors")
    queue.handler("orders", retry=[0.01])(failing_lookup)
    queue.start()
    queue.add("orders", "o-1", {"sku": "lamp"})
    wait_until(lambda: getattr(queue.get("orders", "o-1"), "state", None) == "dead", "dead")

    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "actors.pool" and "failed" in r.message]

    wait_until(lambda: len(failures()) == 2, "two lines")
    first, last = failures()
    assert first.levelno == logging.WARNING
    assert "pool orders: job o-1 attempt 1 failed (KeyError: 'lamp'); retried" in first.message
    assert last.levelno == logging.ERROR
    assert "job o-1 attempt 2 failed (KeyError: 'lamp'); the job is dead" in last.message
    for record in (first, last):
        assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
    text = logging.Formatter().format(last)
    assert "Traceback (most recent call last)" in text and "in failing_lookup" in text

    info = queue.get("orders", "o-1")
    assert info is not None and info.traceback is not None
    assert "in failing_lookup" in info.traceback and info.traceback.endswith("KeyError: 'lamp'\n")


def test_hooks_see_every_failure_and_the_death_and_a_raising_hook_harms_nothing(
    queue: DelayQueue, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="actors")
    seen: list[tuple[str, str, int, type[BaseException]]] = []
    lock = threading.Lock()
    acked = threading.Event()

    @queue.on_failure
    def record_failure(job: Job, exc: BaseException) -> None:
        with lock:
            seen.append(("failure", job.id, job.attempt, type(exc)))

    @queue.on_dead
    def record_death(job: Job, exc: BaseException) -> None:
        with lock:
            seen.append(("dead", job.id, job.attempt, type(exc)))

    @queue.on_failure
    def broken_hook(job: Job, exc: BaseException) -> None:
        raise ValueError("the hook itself is broken")

    @queue.handler("orders", retry=[0.01])
    def handle(job: Job) -> None:
        if job.id == "fine":
            acked.set()
            return
        failing_lookup(job)

    assert record_failure.__name__ == "record_failure"  # the decorators return the function
    queue.start()
    queue.add("orders", "o-1", {"sku": "lamp"})
    wait_until(lambda: len(seen) == 3, "two failures and a death")
    with lock:
        assert seen == [
            ("failure", "o-1", 1, KeyError),
            ("failure", "o-1", 2, KeyError),
            ("dead", "o-1", 2, KeyError),
        ]
    broken = [r for r in caplog.records if r.name == "actors.hooks"]
    assert len(broken) == 2 and all(r.levelno == logging.ERROR for r in broken)
    assert "hook " in broken[0].message and "broken_hook raised for orders/o-1" in broken[0].message

    queue.add("orders", "fine", {})  # the pool still works
    assert acked.wait(10)
    wait_until(lambda: queue.get("orders", "fine") is None, "the ack")
    assert queue.health()["topic:orders"]["restarts"] == 0


# -- the CLI shows it ---------------------------------------------------------------------------


def redelay(server: RedisProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args, "--redis", server.url, "--namespace", "cli"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_get_dead_list_and_history_show_the_traceback(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    store = Store(redis_client, "cli", SystemClock())
    store.add(store.new_job("t", "j", {}, retry_ms=[0]))
    trace = "Traceback (most recent call last):\n  File \"h.py\", line 3\nKeyError: 'sku'\n"
    for _ in range(2):
        (lease,) = store.lease("t", 1)
        store.fail("t", "j", lease.token, "KeyError: 'sku'", traceback=trace)

    got = redelay(redis_server, "get", "t", "j")
    assert got.returncode == 0, got.stderr
    (line,) = [line for line in got.stdout.splitlines() if line.startswith("traceback ")]
    assert line.split() == ["traceback", "of", "the", "last", "failed", "attempt"]
    assert "of the last failed attempt\n    Traceback (most recent call last):\n" in got.stdout
    assert "\n    KeyError: 'sku'\n" in got.stdout
    listed = redelay(redis_server, "dead", "list")
    assert listed.returncode == 0, listed.stderr
    header, _, row = listed.stdout.splitlines()[:3]
    assert header.split()[-1] == "why" and row.endswith("KeyError: 'sku'")
    history = redelay(redis_server, "history", "t", "j")
    assert history.returncode == 0, history.stderr
    assert "traceback of attempt 1 (failed):\n    Traceback" in history.stdout
    assert "traceback of attempt 2 (dead):\n    Traceback" in history.stdout

    def as_json(*args: str) -> Any:
        result = redelay(redis_server, *args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    assert as_json("get", "t", "j")["traceback"] == trace
    assert as_json("dead", "list")[0]["traceback"] == trace
    traces = {e["event"]: e["fields"].get("tb") for e in as_json("history", "t", "j")}
    assert traces["failed"] == traces["dead"] == trace and traces["leased"] is None


# -- handlers that overrun their timeout ----------------------------------------------------------


class CountedGate(threading.Event):
    """An Event that counts its waiters in, so a test knows its handlers are running."""

    def __init__(self) -> None:
        super().__init__()
        self.waiters = threading.Semaphore(0)

    def wait(self, timeout: float | None = None) -> bool:
        self.waiters.release()
        return super().wait(timeout)


def test_a_timeout_is_logged_and_slots_held_by_it_are_reported_until_it_returns(
    store: Store, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="actors.pool")
    store.configure_topic("t", TopicConfig(retry_ms=(1_000,), lease_ms=1_000))
    gate = CountedGate()
    pool: pykka.ActorRef[Any] = ConsumerPool.start(
        store,
        fake_clock,
        "t",
        lambda job: gate.wait(),
        concurrency=4,
        timeout_ms=500,
        lease_ms=1_000,
        stuck_report_ms=2_000,
    )
    store.add_many([store.new_job("t", f"j{n}") for n in range(2)])
    pool.tell(Run(tuple(store.lease("t", 2))))
    stats(pool)
    # On a loaded machine a thread can take its job after the fake clock ran past the timeout:
    # the stack kept with the attempt is the running handler's, so both must be running.
    assert gate.waiters.acquire(timeout=WAIT_S) and gate.waiters.acquire(timeout=WAIT_S)

    def lines(text: str) -> list[str]:
        return [r.message for r in caplog.records if text in r.message]

    def advance(total_ms: int) -> None:
        for _ in range(total_ms // 100):
            fake_clock.advance(100)
            stats(pool)

    advance(400)
    assert lines("timeout") == [] and stats(pool)["timed_out_running"] == 0
    advance(100)
    overran = wait_until(lambda: lines("ran over its timeout"), "the timeout logged")
    assert any(
        "pool t: job j0 attempt 1: the handler ran over its timeout of 0.5s; its thread keeps "
        "its slot until it returns" in line
        for line in overran
    )
    held = lines("held by timed-out handlers")
    assert held == [f"2 of 4 slots of topic t held by timed-out handlers since {_iso(fake_clock)}"]
    assert stats(pool)["timed_out_running"] == 2
    assert stats(pool)["timed_out_since_ms"] == fake_clock.now_ms()
    # The attempt keeps where the hung handler was: its stack names what it waits for.
    wait_until(lambda: stats(pool)["failed"] == 2, "both timeouts stored")
    info = store.get("t", "j0")
    assert info is not None and info.traceback is not None
    assert info.traceback.startswith("Stack of the handler when it timed out")
    assert "in <lambda>" in info.traceback and "gate.wait()" in info.traceback
    assert info.traceback.endswith("TimeoutError: the handler ran over its timeout of 0.5s\n")
    assert events(store, "j0")[-1]["tb"] == info.traceback
    (failed_line,) = lines("j0 attempt 1 failed (timeout after 0.5s); retried (delayed)")
    assert "gate.wait()" in failed_line

    advance(1_900)
    assert len(lines("held by timed-out handlers")) == 1  # every stuck_report_ms, not each check
    advance(100)
    assert len(lines("held by timed-out handlers")) == 2

    gate.set()
    wait_until(lambda: stats(pool)["timed_out_running"] == 0, "the slots freed")
    wait_until(lambda: len(lines("returned")) == 2, "two lines")
    returned = lines("returned")
    assert "the handler that timed out returned 2s late; its slot is free again" in returned[0]
    advance(3_000)
    assert len(lines("held by timed-out handlers")) == 2


def _iso(clock: FakeClock) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(clock.now_ms() / 1000, tz=UTC).isoformat(timespec="seconds")


def test_health_reports_slots_held_by_timed_out_handlers(queue: DelayQueue) -> None:
    gate = threading.Event()
    queue.handler("slow", concurrency=2, timeout=0.2)(lambda job: gate.wait())
    queue.start()
    try:
        assert queue.health()["topic:slow"]["timed_out_slots"] == 0
        queue.add("slow", "s-1", {})
        unit = wait_until(
            lambda: (u := queue.health()["topic:slow"])["timed_out_slots"] == 1 and u,
            "the slot reported",
        )
        assert unit["timed_out_since_ms"] <= queue.clock.now_ms()
    finally:
        gate.set()
    wait_until(lambda: queue.health()["topic:slow"]["timed_out_slots"] == 0, "the slot freed")


# -- a Redis outage -------------------------------------------------------------------------------


def test_an_outage_logs_one_line_when_lost_and_one_when_back(
    redis_factory: Callable[..., RedisProcess], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="actors")
    server = redis_factory()
    handled = threading.Semaphore(0)
    queue = DelayQueue(server.url, namespace=NAMESPACE, sweep_interval_s=0.1)
    queue.handler("t")(lambda job: handled.release())
    queue.start()
    try:
        queue.add("t", "before", {})
        assert handled.acquire(timeout=10)
        wait_until(lambda: queue.get("t", "before") is None, "its ack")  # none pending at the kill
        start = len(caplog.records)

        def loud() -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records[start:]
                if r.levelno >= logging.WARNING and r.name.startswith("actors")
            ]

        def retries() -> int:
            return sum("still unreachable" in r.getMessage() for r in caplog.records[start:])

        server.kill()
        wait_until(lambda: retries() >= 5, "the actors retrying")
        server.start()
        wait_until(lambda: any("reconnected" in line for line in loud()), "the reconnect line")
        queue.add("t", "after", {})
        assert handled.acquire(timeout=10)

        lost, back = loud()
        assert lost.startswith("lost Redis (") and "retries are logged at DEBUG" in lost
        assert back.startswith("reconnected to Redis after ") and " s (" in back
        seconds = float(back.removeprefix("reconnected to Redis after ").split(" s", 1)[0])
        assert 0 < seconds < 60
    finally:
        queue.stop(grace=1)


WORKER_MODULE = """
from actors import DelayQueue

queue = DelayQueue({url!r}, {ns!r})

@queue.handler("orders", retry=[0.01])
def handle(job):
    prices = {{}}
    prices[job.body["sku"]] += 1
"""


def test_the_worker_command_shows_the_failure_on_stderr(
    redis_server: RedisProcess, redis_client: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "shop.py").write_text(WORKER_MODULE.format(url=redis_server.url, ns=NAMESPACE))
    worker = subprocess.Popen(
        [sys.executable, "-m", "actors.cli", "worker", "shop:queue"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        store = Store(redis_client, NAMESPACE, SystemClock())
        store.add(store.new_job("orders", "o-9", {"sku": "lamp"}))
        wait_until(lambda: getattr(store.get("orders", "o-9"), "state", None) == "dead", "dead")
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert "WARNING actors.pool: pool orders: job o-9 attempt 1 failed (KeyError: 'lamp')" in err
    dead = err.split("ERROR actors.pool: pool orders: job o-9 attempt 2 failed", 1)[1]
    assert dead.startswith(" (KeyError: 'lamp'); the job is dead\nTraceback")
    assert 'shop.py", line 9, in handle' in dead
