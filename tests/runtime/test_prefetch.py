"""A handler's prefetch: jobs leased beyond its threads wait in the pool for one. Their timeout
starts when a thread takes them, their leases are extended while they wait, a drain releases them
with no attempt counted, and the listener leases concurrency + prefetch in one round trip.
Driven by the fake clock: timeouts and extensions happen inside advance()."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka
import pytest
from _actor_support import events, stats
from _wait import wait_until

from actors import DelayQueue, ValidationError
from actors.clock import FakeClock
from actors.job import Job
from actors.runtime.listener import TopicListener
from actors.runtime.messages import Drain, Run, SetListener
from actors.runtime.notifier import ShardNotifier
from actors.runtime.pool import ConsumerPool
from actors.server.embedded import RedisProcess
from actors.storage.store import Store
from actors.testing import HandlerRecorder
from actors.values import TopicConfig

LEASE_MS = 1_000
WAIT_S = 10.0


@pytest.fixture
def topic(store: Store) -> Store:
    store.configure_topic("t", TopicConfig(retry_ms=(1_000,), lease_ms=LEASE_MS))
    return store


def start_pool(
    store: Store, clock: FakeClock, handler: Callable[[Job], Any], **kwargs: Any
) -> pykka.ActorRef[ConsumerPool]:
    options: dict[str, Any] = {"timeout_ms": 10_000, "lease_ms": LEASE_MS}
    options.update(kwargs)
    return ConsumerPool.start(store, clock, "t", handler, **options)


def advance_and_settle(clock: FakeClock, pool: pykka.ActorRef[Any], total_ms: int) -> None:
    for _ in range(total_ms // 100):
        clock.advance(100)
        stats(pool)


class Gate:
    """A handler that records which jobs entered and waits until the test opens the gate."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.open = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> None:
        with self._lock:
            self.entered.append(job.id)
        assert self.open.wait(WAIT_S)


def test_the_listener_leases_concurrency_plus_prefetch_in_one_round_trip(
    topic: Store, fake_clock: FakeClock, notifiers: Callable[[Store], ShardNotifier]
) -> None:
    gate = Gate()
    pool = start_pool(topic, fake_clock, gate, concurrency=2, prefetch=3)
    topic.add_many([topic.new_job("t", f"j{n}") for n in range(8)])
    listener = TopicListener.start(topic, fake_clock, "t", pool, 5, notifier=notifiers(topic))
    pool.tell(SetListener(listener))
    wait_until(lambda: stats(listener)["leased"] == 5, "five leased")
    wait_until(lambda: len(gate.entered) == 2, "two handlers running")
    assert stats(listener)["leases"] == 1
    assert stats(pool)["running"] == 2 and stats(pool)["prefetched"] == 3
    assert topic.stats()["t"]["leased"] == 5 and topic.stats()["t"]["ready"] == 3
    gate.open.set()
    wait_until(lambda: stats(pool)["acked"] == 8, "every job acked")
    assert len(gate.entered) == 8


def test_a_prefetched_jobs_timeout_starts_when_a_thread_takes_it(
    topic: Store, fake_clock: FakeClock
) -> None:
    first_may_return = threading.Event()
    started: list[str] = []

    def handler(job: Job) -> None:
        started.append(job.id)
        if job.id == "j0":
            assert first_may_return.wait(WAIT_S)

    pool = start_pool(topic, fake_clock, handler, concurrency=1, prefetch=1, timeout_ms=1_000)
    topic.add_many([topic.new_job("t", f"j{n}") for n in range(2)])
    pool.tell(Run(tuple(topic.lease("t", 2, "me"))))
    wait_until(lambda: started == ["j0"], "j0 running, j1 waiting")
    # j0 overruns its 1 s timeout and keeps the only thread; j1, waiting 1.5 s, is not timed out.
    advance_and_settle(fake_clock, pool, 1_500)
    wait_until(lambda: stats(pool)["failed"] == 1, "j0's timeout stored")
    assert stats(pool)["timeouts"] == 1
    assert stats(pool)["prefetched"] == 1
    first_may_return.set()
    wait_until(lambda: stats(pool)["acked"] == 1, "j1 ran and was acked")
    assert stats(pool)["timeouts"] == 1
    assert started == ["j0", "j1"]
    assert [e["e"] for e in events(topic, "j1")][-1] == "acked"


def test_a_job_waiting_for_a_thread_keeps_its_lease(topic: Store, fake_clock: FakeClock) -> None:
    gate = Gate()
    pool = start_pool(topic, fake_clock, gate, concurrency=1, prefetch=1, timeout_ms=60_000)
    topic.add_many([topic.new_job("t", f"j{n}") for n in range(2)])
    leases = tuple(topic.lease("t", 2, "me"))
    pool.tell(Run(leases))
    wait_until(lambda: gate.entered == ["j0"], "j0 running, j1 waiting")
    advance_and_settle(fake_clock, pool, 5 * LEASE_MS)  # five times the lease
    waiting = topic.get("t", "j1")
    assert waiting is not None and waiting.state == "leased" and waiting.token == leases[1].token
    assert waiting.lease_deadline_ms is not None
    assert waiting.lease_deadline_ms > fake_clock.now_ms()
    assert topic.expire()[0] == 0  # a sweeper finds nothing expired
    gate.open.set()
    wait_until(lambda: stats(pool)["acked"] == 2, "both acked")
    assert gate.entered == ["j0", "j1"]


def test_a_drain_releases_the_prefetched_jobs_with_no_attempt_counted(
    topic: Store, fake_clock: FakeClock
) -> None:
    gate = Gate()
    pool = start_pool(topic, fake_clock, gate, concurrency=1, prefetch=3)
    topic.add_many([topic.new_job("t", f"j{n}") for n in range(4)])
    pool.tell(Run(tuple(topic.lease("t", 4, "me"))))
    wait_until(lambda: gate.entered == ["j0"], "j0 running, three waiting")
    drain = Drain()
    pool.tell(drain)
    wait_until(lambda: stats(pool)["released"] == 3, "the release")
    for job_id in ("j1", "j2", "j3"):
        info = topic.get("t", job_id)
        assert info is not None and info.state == "ready" and info.attempts_failed == 0
    gate.open.set()
    assert drain.idle.get(timeout=WAIT_S) == 0
    assert gate.entered == ["j0"]


@pytest.mark.parametrize("value", [-1, 10_001, True, 1.5])
def test_a_bad_prefetch_is_refused_naming_the_field(value: object) -> None:
    recorder = HandlerRecorder()
    with pytest.raises(ValidationError, match="prefetch"):
        recorder.handler("t", prefetch=value)(lambda job: None)  # type: ignore[arg-type]
    assert recorder.specs == []


def test_prefetch_is_refused_for_an_async_handler(redis_server: RedisProcess) -> None:
    queue = DelayQueue(redis_server.url, namespace="prefetch-async")

    async def handler(job: Job) -> None:
        return None

    with pytest.raises(ValidationError, match="prefetch: is for sync handlers"):
        queue.handler("t", prefetch=10)(handler)
    queue.close()


def test_a_queue_with_prefetch_delivers_every_job_once(redis_server: RedisProcess) -> None:
    queue = DelayQueue(redis_server.url, namespace="prefetch-e2e")
    seen: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    @queue.handler("t", concurrency=2, prefetch=20)
    def handler(job: Job) -> None:
        with lock:
            seen.append(job.id)
            if len(seen) == 200:
                done.set()

    queue.add_many([{"topic": "t", "id": f"j{n}"} for n in range(200)])
    queue.start()
    try:
        assert done.wait(WAIT_S)
        wait_until(lambda: queue.stats()["t"]["leased"] == 0, "every ack stored")
    finally:
        queue.stop()
    assert sorted(seen) == sorted(f"j{n}" for n in range(200))
