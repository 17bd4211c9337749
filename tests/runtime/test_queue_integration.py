"""The DelayQueue end to end with the real clock on a real Redis: mixed delays delivered once and
never early, cancelled jobs never delivered, the retry schedule followed, a failing job dead then
requeued, a producer-only process waking an idle worker, and a stop under load that loses nothing.
"""

from __future__ import annotations

import gc
import random
import signal
import statistics
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from _processes import WorkerProcess, deliveries, produce
from _wait import WAIT_S, wait_until

from actors import ConfigError, DelayQueue, Job
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

NAMESPACE = "it"


class Recorder:
    """What a handler saw: per delivery the job id, its attempt and its lateness (ms)."""

    def __init__(self, queue: DelayQueue) -> None:
        self.queue = queue
        self.seen: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()

    def record(self, job: Job) -> None:
        with self.lock:
            self.seen.append((job.id, job.attempt, self.queue.clock.now_ms() - job.due_ms))

    def ids(self) -> list[str]:
        with self.lock:
            return [job_id for job_id, _, _ in self.seen]


@pytest.fixture
def queue(redis_server: RedisProcess, redis_client: redis.Redis) -> Iterator[DelayQueue]:
    q = DelayQueue(redis_server.url, namespace=NAMESPACE, sweep_interval_s=0.2)
    yield q
    q.stop(grace=1)


def test_mixed_delays_are_each_delivered_once_and_never_early(queue: DelayQueue) -> None:
    recorder = Recorder(queue)
    queue.handler("t", concurrency=8)(recorder.record)
    rng = random.Random(7)
    ids = [f"j{n:03}" for n in range(300)]
    queue.start()
    queue.add_many([{"topic": "t", "id": i, "delay": rng.uniform(0, 1.5)} for i in ids])
    wait_until(lambda: len(recorder.ids()) >= len(ids), "every delivery")
    assert sorted(recorder.ids()) == ids  # each once
    lateness = sorted(late for _, _, late in recorder.seen)
    assert lateness[0] >= 0  # never early
    print(
        f"lateness ms: p50={statistics.median(lateness)} "
        f"p99={lateness[int(len(lateness) * 0.99)]} max={lateness[-1]}"
    )
    assert queue.stats()["t"] == {"delayed": 0, "ready": 0, "leased": 0, "dead": 0, "paused": 0}


def test_cancelled_jobs_are_never_delivered(queue: DelayQueue) -> None:
    recorder = Recorder(queue)
    queue.handler("t")(recorder.record)
    queue.start()
    queue.add_many([{"topic": "t", "id": f"j{n:02}", "delay": 0.3 + n / 100} for n in range(40)])
    cancelled = {f"j{n:02}" for n in range(0, 40, 2)}
    assert all(queue.cancel("t", job_id) for job_id in cancelled)
    kept = sorted({f"j{n:02}" for n in range(40)} - cancelled)
    # The last kept job is due after every cancelled one, so once it is delivered any
    # cancelled job that was going to be delivered would have been.
    wait_until(lambda: len(recorder.ids()) >= len(kept), "the kept jobs")
    assert sorted(recorder.ids()) == kept
    assert queue.get("t", "j00") is None
    assert queue.history("t", "j00")[-1].event == "cancelled"


def test_the_retry_schedule_is_followed(queue: DelayQueue) -> None:
    recorder = Recorder(queue)

    @queue.handler("t", retry=[0.2, 0.4])
    def flaky(job: Job) -> None:
        recorder.record(job)
        if job.attempt < 3:
            raise RuntimeError(f"attempt {job.attempt} fails")

    queue.start()
    queue.add("t", "flaky")
    wait_until(lambda: queue.get("t", "flaky") is None, "the third attempt's ack")
    assert [attempt for _, attempt, _ in recorder.seen] == [1, 2, 3]
    assert all(late >= 0 for _, _, late in recorder.seen)
    history = queue.history("t", "flaky")
    failed = [e for e in history if e.event == "failed"]
    # Each failure set the next due time to its own time plus the schedule's step.
    assert [int(e.fields["due"]) - e.at_ms for e in failed] == [200, 400]
    leased = [e for e in history if e.event == "leased"]
    assert [e.at_ms >= int(f.fields["due"]) for e, f in zip(leased[1:], failed, strict=True)] == [
        True,
        True,
    ]
    assert history[-1].event == "acked"


def test_a_handler_that_always_fails_ends_dead_and_can_be_requeued(queue: DelayQueue) -> None:
    recorder = Recorder(queue)
    healed = threading.Event()

    @queue.handler("t", retry=[0.1, 0.1])
    def broken(job: Job) -> None:
        recorder.record(job)
        if not healed.is_set():
            raise RuntimeError("still broken")

    queue.start()
    queue.add("t", "doomed")
    wait_until(lambda: queue.stats()["t"]["dead"] == 1, "the job dead")
    assert [attempt for _, attempt, _ in recorder.seen] == [1, 2, 3]  # the schedule, then dead
    (dead,) = queue.dead("t")
    assert dead.id == "doomed" and dead.attempts_failed == 3
    assert queue.history("t", "doomed")[-1].event == "dead"

    healed.set()
    assert queue.requeue_dead("t") == 1
    wait_until(lambda: queue.get("t", "doomed") is None, "the requeued job acked")
    assert [attempt for _, attempt, _ in recorder.seen][-1] == 1  # a fresh start


def test_a_producer_only_process_wakes_an_idle_worker(
    queue: DelayQueue, redis_server: RedisProcess
) -> None:
    recorder = Recorder(queue)
    queue.handler("t")(recorder.record)
    queue.start()
    # Idle: nothing delayed, so the carrier has no timer at all; the watchdog ticks once a
    # minute. Only the wake message can bring the job in on time.
    wait_until(lambda: queue.actor_stats()["carrier"]["next_ms"] is None, "an idle carrier")

    printed = produce(redis_server.url, NAMESPACE, "from-web", delay_s=0.5)
    assert printed == {"actors": 0}  # the producer started no actor
    wait_until(lambda: recorder.ids() == ["from-web"], "the producer's job")
    (_, _, lateness_ms) = recorder.seen[0]
    assert 0 <= lateness_ms < 500, lateness_ms
    assert queue.actor_stats()["carrier"]["reasons"].get("watchdog", 0) == 0


def test_stopping_under_load_loses_nothing(
    redis_server: RedisProcess, redis_client: redis.Redis, queue: DelayQueue
) -> None:
    ids = [f"j{n:03}" for n in range(200)]
    queue.add_many([{"topic": "t", "id": i} for i in ids])
    first = WorkerProcess(
        redis_server.url, NAMESPACE, "--concurrency", "4", "--work-ms", "20", "--grace", "5"
    )
    try:
        first.expect("started")
        wait_until(lambda: len(deliveries(redis_client, NAMESPACE)) >= 40, "some work done")
        first.signal(signal.SIGTERM)
        first.expect("stopped", timeout_s=5 + 1)
        assert first.wait(5) == 0
    finally:
        first.kill()
    counts = queue.stats()["t"]
    assert counts["leased"] == 0 and counts["dead"] == 0  # everything acked or back in ready
    assert 0 < counts["ready"] < len(ids)

    recorder = Recorder(queue)  # a second worker finishes the rest
    queue.handler("t", concurrency=8)(recorder.record)
    queue.start()
    wait_until(lambda: queue.stats()["t"]["ready"] + queue.stats()["t"]["leased"] == 0, "the rest")
    by_first = [job_id for job_id, _, _ in deliveries(redis_client, NAMESPACE)]
    by_both = Counter(by_first + recorder.ids())
    assert sorted(by_both) == ids and set(by_both.values()) == {1}  # each once, none lost
    assert all(attempt == 1 for _, attempt, _ in recorder.seen)  # no attempt was counted
    acked = Counter(e["i"] for e in audit(queue.store) if e["e"] == "acked")
    assert sorted(acked) == ids and set(acked.values()) == {1}


def audit(store: Store) -> list[dict[str, Any]]:
    return [fields for _, fields in store.iter_audit()]


def test_a_producer_only_queue_refuses_to_start(redis_server: RedisProcess) -> None:
    producer = DelayQueue(redis_server.url, namespace=NAMESPACE, producer_only=True)
    try:
        producer.add("t", "j", delay=60)
        with pytest.raises(ConfigError, match="producer_only"):
            producer.start()
        assert producer.get("t", "j") is not None and not producer.running
    finally:
        producer.close()


def test_closing_a_started_queue_stops_it_first(redis_server: RedisProcess) -> None:
    """close() on a worker is its stop(): before, it closed the clock and the client under the
    running actors, whose notifier then subscribed again on its own and whose heartbeat kept
    the worker listed."""
    worker = DelayQueue(redis_server.url, namespace=NAMESPACE)
    handled = threading.Event()
    worker.handler("closing")(lambda job: handled.set())
    worker.start()
    worker.add("closing", "j")
    assert handled.wait(WAIT_S)
    assert len(worker.workers()) == 1
    worker.close()
    assert not worker.running
    producer = DelayQueue(redis_server.url, namespace=NAMESPACE, producer_only=True)
    try:
        assert producer.workers() == []  # its heartbeat went with the stop
        assert producer.get("closing", "j") is None  # acked: the handler finished before the stop
    finally:
        producer.close()


def test_start_can_freeze_the_heap_it_runs_with(redis_server: RedisProcess) -> None:
    worker = DelayQueue(redis_server.url, namespace=NAMESPACE)
    worker.handler("frozen")(lambda job: None)
    before = gc.get_freeze_count()
    try:
        worker.start(gc_freeze=True)
        # Only a freeze adds to the count, but a frozen object that dies leaves it (the actors'
        # threads free some right after the freeze), so the count now is at most what was frozen.
        assert worker.gc_frozen is not None
        assert before < gc.get_freeze_count() <= worker.gc_frozen
        assert worker.running
    finally:
        worker.stop(grace=1)
        gc.unfreeze()  # the rest of the test session collects as usual


@pytest.mark.parametrize("concurrency", [16, 128])
def test_a_worker_opens_a_bounded_number_of_connections(
    redis_factory: Callable[..., RedisProcess], concurrency: int
) -> None:
    """docs/concepts.md counts them: per process 1 subscriber (the notifier, for every topic),
    no blocking connection, and a shared pool of at most 5 + 2 per topic (one per actor that
    talks to Redis, plus the heartbeat, the clock and the caller's own calls). A pool of 64
    slots or more keeps one more per ack-and-lease pipeline on its way beyond the first (one
    per 32 slots, at most four): 128 slots, three more per topic."""
    server = redis_factory()
    probe = server.client()
    queue = DelayQueue(server.url, namespace=NAMESPACE)
    done = threading.Semaphore(0)
    topics = ["a", "b"]
    for topic in topics:
        queue.handler(topic, concurrency=concurrency)(lambda job: done.release())
    queue.start()
    jobs = 20 * concurrency  # enough ready jobs per topic to keep every pipeline busy
    try:
        for first in range(0, jobs, 1000):
            last = min(jobs, first + 1000)
            queue.add_many([{"topic": topics[n % 2], "id": f"j{n}"} for n in range(first, last)])
        for _ in range(jobs):
            assert done.acquire(timeout=10)
        clients = [c for c in probe.client_list() if c["cmd"] != "client|list"]
        blocking = [c for c in clients if "b" in c["flags"]]
        subscribers = [c for c in clients if int(c["sub"]) > 0]
        assert len(blocking) == 0 and len(subscribers) == 1
        more_pipelines = min(4, concurrency // 32) - 1 if concurrency >= 64 else 0
        bound = 1 + 5 + (2 + more_pipelines) * len(topics)
        assert len(clients) <= bound, clients
    finally:
        queue.stop(grace=1)
    wait_until(lambda: len(probe.client_list()) == 1, "every connection closed by stop()")
