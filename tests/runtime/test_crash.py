"""Crashes with the real clock on a real Redis: a worker process killed with SIGKILL mid-handler
(another worker gets the job once the lease expires), and redis-server killed and restarted
under a running worker (it resumes by itself and no job is lost)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from _processes import WorkerProcess, deliveries
from _wait import WAIT_S, wait_until

from actors import DelayQueue, Job
from actors.clock import FakeClock
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

NAMESPACE = "crash"


@pytest.fixture
def durable_server(redis_factory: Callable[..., RedisProcess]) -> RedisProcess:
    """Every write is on disk before it is acknowledged, so a killed server loses none."""
    return redis_factory(appendonly=True, appendfsync="always")


@pytest.fixture
def second_worker(durable_server: RedisProcess) -> Iterator[DelayQueue]:
    queue = DelayQueue(durable_server.url, namespace=NAMESPACE, sweep_interval_s=0.2)
    yield queue
    queue.stop(grace=1)


def test_a_worker_killed_mid_handler_loses_its_job_to_another_after_the_lease(
    durable_server: RedisProcess, second_worker: DelayQueue
) -> None:
    client = durable_server.client()
    second_worker.add("t", "job", {"n": 1})
    first = WorkerProcess(
        durable_server.url, NAMESPACE, "--block", "--lease", "1", "--retry", "0", "--sweep", "0.2"
    )
    try:
        first.expect("started")
        wait_until(lambda: deliveries(client, NAMESPACE) == [("job", 1, first.pid)], "attempt 1")
        first.kill()  # SIGKILL: no release, no ack; only the lease remains
    finally:
        first.kill()
    leased = [e for e in second_worker.history("t", "job") if e.event == "leased"][-1]
    deadline_ms = int(leased.fields["dl"])

    got: list[tuple[int, int]] = []
    done = threading.Event()

    @second_worker.handler("t", retry=[0])
    def take_over(job: Job) -> None:
        got.append((job.attempt, second_worker.clock.now_ms()))
        done.set()

    second_worker.start()
    assert done.wait(WAIT_S), "the second worker never got the job"
    ((attempt, at_ms),) = got
    assert attempt == 2  # the expired lease counted as the failed first attempt
    assert at_ms >= deadline_ms  # not before the first worker's lease was over
    wait_until(lambda: second_worker.get("t", "job") is None, "the ack")
    events = [e.event for e in second_worker.history("t", "job")]
    assert events[-3:] == ["expired", "leased", "acked"]


@pytest.mark.slow
def test_redis_killed_and_restarted_under_a_running_worker(durable_server: RedisProcess) -> None:
    client = durable_server.client()
    producer = DelayQueue(durable_server.url, namespace=NAMESPACE, producer_only=True)
    ids = [f"j{n:03}" for n in range(120)]
    producer.add_many(
        [{"topic": "t", "id": i, "delay": n * 2.0 / len(ids)} for n, i in enumerate(ids)]
    )
    producer.close()
    worker = WorkerProcess(
        durable_server.url, NAMESPACE, "--concurrency", "4", "--retry", ",".join(["0.2"] * 20)
    )
    try:
        worker.expect("started")
        wait_until(lambda: len(deliveries(client, NAMESPACE)) >= 30, "a third of the work")
        durable_server.kill()
        time.sleep(0.5)  # the outage itself: the worker sees Redis gone for this long
        durable_server.start()
        client = durable_server.client()

        reader = Store(client, NAMESPACE, FakeClock())  # reads only: any clock will do

        def all_acked() -> bool:
            left = sum(sum(states.values()) for states in reader.stats().values())
            acked = {f["i"] for _, f in reader.iter_audit() if f["e"] == "acked"}
            return left == 0 and acked == set(ids)

        wait_until(all_acked, "every job acked after the restart", timeout_s=2 * WAIT_S)
        assert worker.process.poll() is None  # the same process, never restarted
        delivered = {job_id for job_id, _, _ in deliveries(client, NAMESPACE)}
        assert delivered == set(ids)
    finally:
        worker.kill()
