"""A real shifted clock in a child process: nothing runs early, no live lease expires early, by
Redis's own time, whatever one process's wall clock does (issue 51, section 3).

Each child is tests/workers/stepped_clock.py: a worker or producer whose ``time.time`` the test
steps while it runs, as an NTP step or ``date -s`` would. Due times are judged by the audit
entries' ids, which are the server's milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from _processes import WorkerProcess, deliveries
from _wait import wait_until

from actors import DelayQueue
from actors.lifecycle import State
from actors.server.embedded import RedisProcess

STEPPED = "tests.workers.stepped_clock"
JOBS = 50


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def entry_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


@pytest.fixture
def producer(redis_server: RedisProcess, redis_client: redis.Redis) -> Iterator[DelayQueue]:
    queue = DelayQueue(redis_server.url, namespace="stepped", producer_only=True)
    yield queue
    queue.close()


def test_a_worker_whose_clock_steps_forward_delivers_no_job_early(
    redis_server: RedisProcess, redis_client: redis.Redis, producer: DelayQueue
) -> None:
    worker = WorkerProcess(
        redis_server.url, "stepped", "--concurrency", "8", "--sweep", "0.2", module=STEPPED
    )
    try:
        worker.expect("started")
        delays_ms = {f"j{n}": 3_000 + n * 100 for n in range(JOBS)}  # 3.0 s to 7.9 s
        added_ms = server_ms(redis_client)  # due no earlier than this plus the delay
        producer.add_many(
            {"topic": "t", "id": job_id, "delay": delay / 1000}
            for job_id, delay in delays_ms.items()
        )
        worker.send("step 60")  # the worker's wall clock jumps a minute ahead
        worker.expect("stepped")
        wait_until(
            lambda: len(deliveries(redis_client, "stepped")) >= JOBS, what="every job delivered"
        )
    finally:
        worker.kill()
    early_ms = []
    for job_id, delay in delays_ms.items():
        leased = [e for e in producer.history("t", job_id) if e.event == "leased"]
        ahead = added_ms + delay - entry_ms(leased[0].id)
        if ahead > 0:
            early_ms.append(ahead)
    assert early_ms == [], (
        f"{len(early_ms)} of {JOBS} jobs leased early, by up to {max(early_ms)} ms"
    )


def test_a_worker_whose_clock_jumps_ahead_does_not_expire_a_live_lease(
    redis_server: RedisProcess, redis_client: redis.Redis, producer: DelayQueue
) -> None:
    holder = WorkerProcess(
        redis_server.url, "stepped", "--work-ms", "6000", "--lease", "10", "--retry", "0",
        "--sweep", "0.2",
    )  # fmt: skip
    ahead = None
    try:
        holder.expect("started")
        producer.add("t", "long")
        wait_until(
            lambda: deliveries(redis_client, "stepped") == [("long", 1, holder.pid)],
            what="the holder leases the job",
        )
        ahead = WorkerProcess(
            redis_server.url, "stepped", "--retry", "0", "--sweep", "0.2", module=STEPPED
        )
        ahead.expect("started")
        ahead.send("step 60")  # its sweeper now reads every lease as a minute older
        ahead.expect("stepped")
        wait_until(lambda: producer.get("t", "long") is None, what="the holder's ack")
    finally:
        holder.kill()
        if ahead is not None:
            ahead.kill()
    events = [e.event for e in producer.history("t", "long")]
    assert not {"expired", "lost", "quarantined"} & set(events), events
    assert deliveries(redis_client, "stepped") == [("long", 1, holder.pid)]


@pytest.mark.parametrize("step_s", [-60, 60], ids=["back", "forward"])
def test_a_producer_whose_clock_stepped_makes_a_delay_count_from_redis_now(
    redis_server: RedisProcess, redis_client: redis.Redis, producer: DelayQueue, step_s: int
) -> None:
    stepped = WorkerProcess(redis_server.url, "stepped", "--producer-only", module=STEPPED)
    try:
        stepped.expect("started")
        stepped.send(f"step {step_s}")
        stepped.expect("stepped")
        before_ms = server_ms(redis_client)
        stepped.send("add t p 20 2")
        stepped.expect("added")
        after_ms = server_ms(redis_client)
    finally:
        stepped.kill()
    for n in range(20):
        info = producer.get("t", f"p{n}")
        assert info is not None and info.state == State.DELAYED, info
        assert before_ms + 2_000 <= info.due_ms <= after_ms + 2_000, (before_ms, info.due_ms)
