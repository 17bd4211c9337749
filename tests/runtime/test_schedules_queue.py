"""Schedules and re-arming through the DelayQueue, with the real clock and running workers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
import redis
from _wait import wait_until

from actors import DelayQueue, Job, schedules
from actors.server.embedded import RedisProcess


@pytest.fixture
def queue(redis_server: RedisProcess, redis_client: redis.Redis) -> Iterator[DelayQueue]:
    q = DelayQueue(redis_server.url, namespace="sched", sweep_interval_s=0.2)
    yield q
    q.stop(grace=1)


def test_a_schedule_runs_again_and_again(queue: DelayQueue) -> None:
    seen: list[str] = []
    lock = threading.Lock()

    @queue.handler("tick")
    def handle(job: Job) -> None:
        with lock:
            seen.append(job.id)

    assert queue.schedule("every-second", "tick", every=1, body={"k": 1}) == "created"
    assert queue.schedule("every-second", "tick", every=1, body={"k": 1}) == "unchanged"
    queue.start()
    wait_until(lambda: len(seen) >= 3, what="three occurrences")
    with lock:
        assert len(set(seen)) == len(seen)  # never one slot twice
        assert all(schedules.schedule_of(i) == "every-second" for i in seen)
    (info,) = queue.schedules()
    assert info.spec.every_ms == 1_000 and info.next_ms is not None
    assert queue.unschedule("every-second")
    assert queue.schedules() == []


def test_a_handler_that_re_arms_its_job_runs_again_without_a_warning(
    queue: DelayQueue, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []

    @queue.handler("poll")
    def handle(job: Job) -> None:
        runs.append(job.attempt)
        if len(runs) < 3:
            queue.add("poll", job.id, {"n": len(runs)}, delay=0.05, replace=True)

    with caplog.at_level(logging.WARNING, logger="actors"):
        queue.add("poll", "p1")
        queue.start()
        wait_until(lambda: len(runs) >= 3, what="three runs of the re-armed job")
        wait_until(lambda: queue.get("poll", "p1") is None, what="the last run acked")
    assert runs == [1, 1, 1]  # each run is a fresh first attempt, not a retry
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refused == []
    stats = queue.actor_stats()
    assert stats["pool:poll"]["rearmed"] == 2
    assert stats["pool:poll"]["lost_leases"] == 0
