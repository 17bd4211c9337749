"""ShutdownCoordinator through DelayQueue.stop(): fetching stops at once (a listener waiting for
work answers at once; its backstop look is not waited for), jobs fetched but not started go back
with no attempt counted, running handlers finish within the grace period, jobs still running
after it keep their lease and a sweeper recovers them, and stopping takes at most grace + 1 s
(measured), also when Redis is gone. SIGTERM and SIGINT stop too."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest
from _actor_support import events, ready_ids, stats
from _wait import WAIT_S, wait_until

from actors import DelayQueue, Job
from actors.clock import FakeClock
from actors.runtime.messages import Drain, Run
from actors.runtime.pool import ConsumerPool
from actors.runtime.sweeper import RetrySweeper
from actors.server.embedded import RedisProcess
from actors.storage.store import Store
from actors.values import TopicConfig

BOUND_S = 1.0  # what stop() may take beyond the grace period


def make_queue(url: str, clock: FakeClock, look_interval_s: float = 30.0) -> DelayQueue:
    queue = DelayQueue(url, namespace="test", clock=clock, default_retry=[1, 2])
    # A long backstop look: a stop that waited for it would blow the bound.
    queue.settings = dataclasses.replace(queue.settings, look_interval_s=look_interval_s)
    return queue


def timed_stop(queue: DelayQueue, grace: float) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    report = queue.stop(grace=grace)
    return report, time.monotonic() - started


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Holds handlers until the test lets them go (at the latest when it ends)."""
    event = threading.Event()
    yield event
    event.set()


def test_stop_of_a_listener_waiting_for_work_is_at_once(
    redis_factory: Callable[..., RedisProcess], fake_clock: FakeClock
) -> None:
    server = redis_factory()  # its own server: every connection on it is this test's
    redis_client = server.client()
    queue = make_queue(server.url, fake_clock)
    queue.handler("t")(lambda job: None)
    queue.start()
    wait_until(
        lambda: (queue.actor_stats().get("listener:t") or {}).get("waits", 0) >= 1,
        "the listener waiting for a notice",
    )

    report, took_s = timed_stop(queue, grace=5)
    assert took_s < BOUND_S  # nothing ran: no grace needed, and no 30 s backstop look
    assert report["still_running"] == {} and report["not_stopped"] == []
    # Every connection the queue opened is closed: only the test's own is left.
    wait_until(lambda: len(redis_client.client_list()) == 1, "the queue's connections closed")
    assert pykka.ActorRegistry.get_all() == []


def test_running_handlers_finish_within_grace_and_nothing_more_is_fetched(
    redis_server: RedisProcess, store: Store, fake_clock: FakeClock
) -> None:
    queue = make_queue(redis_server.url, fake_clock)
    running = threading.Semaphore(0)

    @queue.handler("t", concurrency=2)
    def work(job: Job) -> None:
        running.release()
        time.sleep(0.3)  # the handler's own work, which stop() lets finish

    queue.add_many([{"topic": "t", "id": f"j{n}"} for n in range(5)])
    queue.start()
    assert running.acquire(timeout=WAIT_S) and running.acquire(timeout=WAIT_S)

    report, took_s = timed_stop(queue, grace=5)
    assert report["still_running"] == {}
    assert took_s < 0.3 + BOUND_S
    assert store.stats()["t"] == {"delayed": 0, "ready": 3, "leased": 0, "dead": 0}
    assert ready_ids(store) == ["j2", "j3", "j4"]  # untouched, in order, for the next worker
    assert [e["e"] for e in events(store, "j0")][-1] == "acked"


def test_jobs_fetched_but_not_started_go_back_with_no_attempt_counted(
    store: Store, fake_clock: FakeClock, gate: threading.Event
) -> None:
    store.configure_topic("t", TopicConfig(retry_ms=(1_000,), lease_ms=5_000))
    store.add_many([store.new_job("t", f"j{n}") for n in range(4)])
    leases = tuple(store.lease("t", 3, "me"))  # j0..j2; j3 stays ready
    entered = threading.Event()

    def handler(job: Job) -> None:
        entered.set()
        gate.wait()

    pool = ConsumerPool.start(store, fake_clock, "t", handler, concurrency=1, timeout_ms=60_000)
    pool.tell(Run(leases))  # one thread: j0 starts, j1 and j2 wait for it
    assert entered.wait(WAIT_S)

    drain = Drain()
    pool.tell(drain)
    wait_until(lambda: stats(pool)["released"] == 2, "the release")
    assert ready_ids(store) == ["j1", "j2", "j3"]  # at the front, in their order
    for job_id in ("j1", "j2"):
        info = store.get("t", job_id)
        assert info is not None and info.state == "ready" and info.attempts_failed == 0
        assert events(store, job_id)[-1]["e"] == "released"
    with pytest.raises(pykka.Timeout):
        drain.idle.get(timeout=0.05)  # j0 still runs

    gate.set()
    assert drain.idle.get(timeout=WAIT_S) == 0
    assert [e["e"] for e in events(store, "j0")][-1] == "acked"


def test_jobs_still_running_after_grace_keep_their_lease_and_a_sweeper_recovers_them(
    redis_server: RedisProcess, store: Store, fake_clock: FakeClock, gate: threading.Event
) -> None:
    queue = make_queue(redis_server.url, fake_clock)
    started = threading.Event()

    @queue.handler("t", lease=5)
    def stuck(job: Job) -> None:
        started.set()
        gate.wait()

    queue.add("t", "stuck")
    queue.start()
    assert started.wait(WAIT_S)
    token = store.get("t", "stuck").token  # type: ignore[union-attr]

    report, took_s = timed_stop(queue, grace=0.5)
    assert 0.5 <= took_s <= 0.5 + BOUND_S
    assert report["still_running"] == {"pool:t": 1}
    info = store.get("t", "stuck")
    assert info is not None and info.state == "leased" and info.token == token

    # Later, a sweeper (here, or in any other process) recovers it once the lease is over.
    sweeper = RetrySweeper.start(store, fake_clock, interval_ms=1_000)
    wait_until(lambda: stats(sweeper)["sweeps"] == 1, "the first sweep")
    fake_clock.advance(5_000)
    wait_until(lambda: stats(sweeper)["recovered"] == 1, "the recovery")
    info = store.get("t", "stuck")
    # A lost lease, not a failed attempt: it runs again as a suspect, alone.
    assert info is not None and info.state == "delayed" and info.attempts_failed == 0
    assert info.suspect


def test_stop_keeps_its_bound_when_redis_is_gone(
    redis_factory: Callable[..., RedisProcess], fake_clock: FakeClock, gate: threading.Event
) -> None:
    server = redis_factory()
    queue = make_queue(server.url, fake_clock)
    started = threading.Event()

    @queue.handler("t")
    def stuck(job: Job) -> None:
        started.set()
        gate.wait()

    queue.add("t", "j")
    queue.start()
    assert started.wait(WAIT_S)
    server.kill()
    gate.set()  # the ack cannot be sent: the pool retries until the stop gives up on it

    report, took_s = timed_stop(queue, grace=1.0)
    assert took_s <= 1.0 + BOUND_S, report


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_stop_the_queue(
    redis_server: RedisProcess, fake_clock: FakeClock, signum: int
) -> None:
    queue = make_queue(redis_server.url, fake_clock)
    queue.handler("t")(lambda job: None)
    queue.start()
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        queue.install_signal_handlers(grace=1)
        started = time.monotonic()
        os.kill(os.getpid(), signum)
        assert queue.wait(5)
        assert time.monotonic() - started < 1 + BOUND_S
        assert not queue.running
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
