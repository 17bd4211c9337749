"""RetrySweeper: recovers expired leases whoever held them, at the earliest deadline it knows of
and at least every interval, in bounded batches, and backs off while Redis is away."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from _actor_support import events, stats
from _wait import wait_until
from prometheus_client import CollectorRegistry

from actors.clock import FakeClock
from actors.metrics import PrometheusRecorder
from actors.runtime.messages import Sweep
from actors.runtime.sweeper import RetrySweeper
from actors.server.embedded import RedisProcess
from actors.storage.store import Store
from actors.values import TopicConfig


@pytest.fixture
def topic(store: Store) -> Store:
    store.configure_topic("t", TopicConfig(retry_ms=(0, 5_000), lease_ms=2_000))
    return store


def lease_jobs(store: Store, count: int, consumer: str = "crashed-worker") -> None:
    store.add_many([store.new_job("t", f"j{n:03}") for n in range(count)])
    assert len(store.lease("t", count, consumer)) == count


def test_recovers_a_lease_another_process_let_expire_at_its_deadline(
    topic: Store, fake_clock: FakeClock
) -> None:
    lease_jobs(topic, 1)
    deadline = fake_clock.now_ms() + 2_000
    sweeper = RetrySweeper.start(topic, fake_clock, interval_ms=60_000)
    # The first sweep saw the lease, so the next one is due at its deadline, not in a minute.
    wait_until(lambda: stats(sweeper)["next_ms"] == deadline, "a sweep set for the deadline")
    fake_clock.advance(1_999)
    assert stats(sweeper)["recovered"] == 0
    fake_clock.advance(1)
    wait_until(lambda: stats(sweeper)["recovered"] == 1, "the expired lease recovered")
    info = topic.get("t", "j000")
    # Lost, not failed: no attempt counted, and it runs again as a suspect.
    assert info is not None and info.state == "ready" and info.attempts_failed == 0
    assert (info.suspect, info.lost) == (True, 0)
    assert events(topic, "j000")[-1]["e"] == "lost"


def test_counts_lost_and_quarantined_jobs_in_the_metrics(
    topic: Store, fake_clock: FakeClock
) -> None:
    topic.configure_topic("t", TopicConfig(retry_ms=(0, 5_000), lease_ms=2_000, lost_max=1))
    recorder = PrometheusRecorder(CollectorRegistry())
    lease_jobs(topic, 2)
    sweeper = RetrySweeper.start(topic, fake_clock, interval_ms=60_000, recorder=recorder)
    deadline = fake_clock.now_ms() + 2_000
    wait_until(lambda: stats(sweeper)["next_ms"] == deadline, "a sweep set for the deadline")
    fake_clock.advance(2_000)
    wait_until(lambda: stats(sweeper)["lost"] == 2, "both leases lost")
    # Leased again, one of them as a suspect (alone), and lost again: quarantined.
    fake_clock.advance(100)  # the first due at once, the second 100 ms later
    assert [lease.id for lease in topic.lease("t", 2, "next-worker")] == ["j000"]
    fake_clock.advance(2_000)
    sweeper.tell(Sweep())  # its timer is a minute away: no lease was left at its last sweep
    wait_until(lambda: stats(sweeper)["quarantined"] == 1, "the suspect quarantined")
    samples = {
        s.labels["event"]: s.value
        for family in recorder.collect()
        if family.name == "redelay_job_events"
        for s in family.samples
        if s.labels["topic"] == "t"
    }
    assert (samples["lost"], samples["quarantined"]) == (2, 1)
    info = topic.get("t", "j000")
    assert info is not None and (info.state, info.quarantined, info.lost) == ("dead", True, 1)


def test_a_lease_taken_after_a_sweep_is_found_within_the_interval(
    topic: Store, fake_clock: FakeClock
) -> None:
    sweeper = RetrySweeper.start(topic, fake_clock, interval_ms=1_000)
    wait_until(lambda: stats(sweeper)["sweeps"] == 1, "the first sweep")
    lease_jobs(topic, 1)  # after that sweep: the sweeper learns of it at its next interval
    fake_clock.advance(1_000)
    wait_until(lambda: stats(sweeper)["sweeps"] == 2, "the interval sweep")
    wait_until(lambda: stats(sweeper)["next_ms"] == fake_clock.now_ms() + 1_000, "the next one")
    fake_clock.advance(1_000)
    wait_until(lambda: stats(sweeper)["recovered"] == 1, "the recovery")


def test_sweeps_a_backlog_in_bounded_batches(topic: Store, fake_clock: FakeClock) -> None:
    lease_jobs(topic, 250)
    fake_clock.advance(2_000)
    sweeper = RetrySweeper.start(topic, fake_clock, batch=10)
    wait_until(lambda: stats(sweeper)["recovered"] == 250, "every lease recovered")
    assert stats(sweeper)["sweeps"] >= 25  # 10 per call, 20 calls per message, then yields
    counts = topic.stats()["t"]
    assert counts["ready"] + counts["delayed"] == 250  # due 100 ms apart: not leased together


def test_backs_off_while_redis_is_away_and_resumes(
    redis_factory: Callable[..., RedisProcess], fake_clock: FakeClock
) -> None:
    server = redis_factory(appendonly=True, appendfsync="always")
    store = Store(redis.Redis.from_url(server.url), "test", fake_clock)
    store.configure_topic("t", TopicConfig(retry_ms=(0,), lease_ms=2_000))
    lease_jobs(store, 1)
    sweeper = RetrySweeper.start(store, fake_clock, interval_ms=1_000)
    wait_until(lambda: stats(sweeper)["sweeps"] == 1, "the first sweep")

    server.kill()
    fake_clock.advance(1_000)
    wait_until(lambda: stats(sweeper)["failures"] == 1, "a failure")
    first_wait = stats(sweeper)["next_ms"] - fake_clock.now_ms()
    fake_clock.advance(first_wait)
    wait_until(lambda: stats(sweeper)["failures"] == 2, "a second failure")
    assert stats(sweeper)["next_ms"] - fake_clock.now_ms() > first_wait

    server.start()
    fake_clock.advance(5_000)
    wait_until(lambda: stats(sweeper)["recovered"] == 1, "the recovery after the outage")
    assert stats(sweeper)["failures"] == 0 and sweeper.is_alive()
