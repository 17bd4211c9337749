"""Crashes with the real clock on a real Redis: a worker process killed with SIGKILL mid-handler
(another worker gets the job once the lease expires), a job that kills its worker every time under
a restart loop (quarantined, and its neighbours not blamed), and redis-server killed and restarted
under a running worker (it resumes by itself and no job is lost)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from _processes import WorkerProcess, deliveries
from _wait import WAIT_S, wait_until

from actors import DelayQueue, Job
from actors.cli.output import dead_reason
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
    assert attempt == 1  # the expired lease was lost: no attempt counted
    assert at_ms >= deadline_ms  # not before the first worker's lease was over
    wait_until(lambda: second_worker.get("t", "job") is None, "the ack")
    events = [e.event for e in second_worker.history("t", "job")]
    assert events[-3:] == ["lost", "leased", "acked"]


def test_a_job_that_kills_its_worker_is_quarantined_and_its_neighbours_are_not_blamed(
    durable_server: RedisProcess,
) -> None:
    """A restart loop, as a supervisor runs one: a worker (concurrency 4, retry [0.2, 0.2, 0.2])
    started again each time it dies; one job's handler kills the process every time, 40 jobs of
    0.3 s beside it. The jobs a dead worker held come back as suspects and run alone; only a
    loss while running alone is held against a job, so the poison is quarantined after its
    worker died once beside the others and lost_max (3) times alone, and no other job dies."""
    client = durable_server.client()
    reader = Store(client, NAMESPACE, FakeClock())  # reads only: any clock will do
    ordinary = [f"j{n:02}" for n in range(40)]
    producer = DelayQueue(durable_server.url, namespace=NAMESPACE, producer_only=True)
    producer.add_many([{"topic": "t", "id": job_id} for job_id in ["poison", *ordinary]])
    producer.close()

    def settled() -> bool:  # nothing left to run: every job acked or dead
        counts = reader.stats().get("t", {})
        return sum(counts.get(state, 0) for state in ("delayed", "ready", "leased")) == 0

    deaths = 0
    while not settled():
        assert deaths < 8, f"not settled after {deaths} worker deaths"
        worker = WorkerProcess(
            durable_server.url, NAMESPACE, "--concurrency", "4", "--retry", "0.2,0.2,0.2",
            "--lease", "1", "--work-ms", "300", "--sweep", "0.2", "--poison", "poison",
        )  # fmt: skip
        try:  # no "started" to wait for: the poison may kill it before it prints that
            wait_until(
                lambda w=worker: w.process.poll() is not None or settled(),  # type: ignore[misc]
                "the worker's death, or the end of the work",
                timeout_s=2 * WAIT_S,
            )
            deaths += worker.process.poll() is not None
        finally:
            worker.kill()
    dead = {info.id: info for info in reader.dead("t")}
    assert sorted(dead) == ["poison"], f"ordinary jobs dead: {sorted(set(dead) - {'poison'})}"
    poison = dead["poison"]
    assert (poison.quarantined, poison.lost, poison.attempts_failed) == (True, 3, 0)
    assert dead_reason(poison) == "quarantined: its worker was lost 3 times while it ran alone"
    runs = [attempt for job_id, attempt, _ in deliveries(client, NAMESPACE) if job_id == "poison"]
    assert len(runs) == deaths == 4  # once beside its neighbours, then three times alone
    acked = {f["i"] for _, f in reader.iter_audit() if f["e"] == "acked"}
    assert acked == set(ordinary)


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
