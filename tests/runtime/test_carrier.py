"""Carrier: sleeps until the earliest due time, wakes early when an earlier job is added (also by
another process, through the wake channel), carries in bounded batches, backs off while Redis is
away. Driven by the fake clock: its timers fire inside advance()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka
import pytest
import redis
from _actor_support import ready_ids, stats
from _wait import wait_until

from actors import DelayQueue
from actors.clock import Clock, FakeClock, SteppedClock
from actors.runtime.carrier import Carrier
from actors.runtime.messages import Carry
from actors.runtime.notifier import ShardNotifier
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

StartNotifier = Callable[[Store], ShardNotifier]


@pytest.fixture
def start_carrier(
    notifiers: StartNotifier,
) -> Callable[..., pykka.ActorRef[Carrier]]:
    """Starts a carrier with its process's notifier, and waits for its carry at start."""

    def start(store: Store, clock: Clock, **kwargs: Any) -> pykka.ActorRef[Carrier]:
        ref = Carrier.start(store, clock, notifier=notifiers(store), **kwargs)
        wait_until(lambda: stats(ref)["carries"] >= 1, "the carry at start")
        return ref

    return start


StartCarrier = Callable[..., pykka.ActorRef[Carrier]]


def test_sleeps_until_the_earliest_due_time(
    store: Store, fake_clock: FakeClock, start_carrier: StartCarrier
) -> None:
    start = fake_clock.now_ms()
    store.add(store.new_job("t", "later", delay_ms=5_000))
    store.add(store.new_job("t", "first", delay_ms=1_000))
    carrier = start_carrier(store, fake_clock)
    assert stats(carrier)["next_ms"] == start + 1_000

    fake_clock.advance(999)
    assert ready_ids(store) == []
    assert stats(carrier)["carries"] == 1  # no timer fired, nothing polled

    fake_clock.advance(1)
    wait_until(lambda: ready_ids(store) == ["first"], "the first job carried at its due time")
    wait_until(lambda: stats(carrier)["next_ms"] == start + 5_000, "the next sleep")
    assert stats(carrier)["reasons"] == {"start": 1, "timer": 1}


def test_an_earlier_add_shortens_the_sleep_and_a_later_one_does_not(
    store: Store, fake_clock: FakeClock, start_carrier: StartCarrier
) -> None:
    start = fake_clock.now_ms()
    store.add(store.new_job("t", "far", delay_ms=60_000))
    carrier = start_carrier(store, fake_clock)
    assert stats(carrier)["next_ms"] == start + 60_000

    store.add(store.new_job("t", "near", delay_ms=500))
    wait_until(lambda: stats(carrier)["next_ms"] == start + 500, "the wake for the earlier job")
    store.add(store.new_job("t", "between", delay_ms=700))  # not the earliest: no wake
    fake_clock.advance(500)
    wait_until(lambda: ready_ids(store) == ["near"], "the earlier job carried on time")
    wait_until(lambda: stats(carrier)["next_ms"] == start + 700, "the sleep until the next one")


@pytest.mark.parametrize("offset_ms", [30_000, -30_000], ids=["ahead", "behind"])
def test_a_carrier_whose_clock_is_off_carries_by_the_scripts_clock(
    store: Store, fake_clock: FakeClock, start_carrier: StartCarrier, offset_ms: int
) -> None:
    # The store's scripts follow the shared clock (Redis's TIME, in production); the carrier's
    # own clock is 30 s off it. Its sleeps, by timer and by wake, still end at the due times.
    start = fake_clock.now_ms()
    store.add(store.new_job("t", "first", delay_ms=1_000))
    own = SteppedClock(fake_clock, offset_ms)
    carrier = start_carrier(store, own)
    assert stats(carrier)["next_ms"] == start + offset_ms + 1_000  # on its own clock
    store.add(store.new_job("t", "woken", delay_ms=500))  # earlier: through the wake channel
    wait_until(
        lambda: stats(carrier)["next_ms"] == start + offset_ms + 500, "the wake, on its clock"
    )
    fake_clock.advance(499)
    assert ready_ids(store) == []
    fake_clock.advance(1)
    wait_until(lambda: ready_ids(store) == ["woken"], "the woken job carried at its due time")
    wait_until(lambda: stats(carrier)["next_ms"] == start + offset_ms + 1_000, "the next sleep")
    fake_clock.advance(499)
    assert ready_ids(store) == ["woken"]
    fake_clock.advance(1)
    wait_until(lambda: ready_ids(store) == ["woken", "first"], "the first job at its due time")


def test_a_producer_only_process_wakes_the_carrier_through_the_wake_channel(
    store: Store, fake_clock: FakeClock, redis_server: RedisProcess, start_carrier: StartCarrier
) -> None:
    start = fake_clock.now_ms()
    carrier = start_carrier(store, fake_clock)
    assert stats(carrier)["next_ms"] is None  # nothing delayed: no timer at all

    # Its own connection and Store, no actors: what a web app adding jobs looks like.
    producer = DelayQueue(redis_server.url, namespace="test", clock=fake_clock, producer_only=True)
    try:
        producer.add("t", "from-web", delay=2.5)
    finally:
        producer.close()
    wait_until(lambda: stats(carrier)["next_ms"] == start + 2_500, "the wake from the producer")
    fake_clock.advance(2_500)
    wait_until(lambda: ready_ids(store) == ["from-web"], "the producer's job carried on time")
    assert stats(carrier)["reasons"]["timer"] == 1


def test_a_wake_for_a_job_already_due_carries_at_once(
    store: Store, fake_clock: FakeClock, start_carrier: StartCarrier
) -> None:
    carrier = start_carrier(store, fake_clock)
    # A producer whose clock runs a second behind: to it the job is still delayed (so it is put
    # in the delayed set and announced), to the carrier it is already due, so the wake carries
    # it without waiting for a timer.
    behind = FakeClock(fake_clock.now_ms() - 1_000)
    producer = Store(store.client, "test", behind)
    producer.add(producer.new_job("t", "j", delay_ms=500))
    wait_until(lambda: ready_ids(store) == ["j"], "the job carried by the wake")
    assert stats(carrier)["reasons"] == {"start": 1, "wake": 1}


def test_carries_in_bounded_batches(
    store: Store, fake_clock: FakeClock, start_carrier: StartCarrier
) -> None:
    store.add_many([store.new_job("t", f"j{n:04}", delay_ms=10) for n in range(2_500)])
    carrier = start_carrier(store, fake_clock, batch=1_000)
    fake_clock.advance(10)
    wait_until(lambda: stats(carrier)["carried"] == 2_500, "every job carried")
    # 1,000 + 1,000 + 500: no call moves more than the batch.
    assert stats(carrier)["carries"] == 1 + 3
    assert len(ready_ids(store)) == 2_500


def test_a_big_backlog_yields_the_mailbox_between_rounds(
    store: Store, fake_clock: FakeClock, start_carrier: StartCarrier
) -> None:
    store.add_many([store.new_job("t", f"j{n:03}", delay_ms=10) for n in range(250)])
    carrier = start_carrier(store, fake_clock, batch=10)
    fake_clock.advance(10)
    wait_until(lambda: stats(carrier)["carried"] == 250, "every job carried")
    # 20 rounds per message, then it sends itself Carry("more") so other messages get a turn.
    assert stats(carrier)["reasons"]["more"] >= 1
    assert stats(carrier)["carries"] >= 1 + 25


@pytest.fixture
def outage_server(redis_factory: Callable[..., RedisProcess]) -> RedisProcess:
    """A server with an append-only file, so a restart keeps the jobs."""
    return redis_factory(appendonly=True, appendfsync="always")


def test_backs_off_while_redis_is_away_and_resumes_when_it_returns(
    outage_server: RedisProcess, fake_clock: FakeClock, start_carrier: StartCarrier
) -> None:
    # A client without redis-py's own retries: the carrier's backoff is what is tested.
    client = redis.Redis.from_url(outage_server.url)
    store = Store(client, "test", fake_clock)
    start = fake_clock.now_ms()
    store.add(store.new_job("t", "j", delay_ms=1_000))
    carrier = start_carrier(store, fake_clock)

    outage_server.kill()
    fake_clock.advance(1_000)
    waits = []
    for failures in range(1, 5):
        wait_until(lambda f=failures: stats(carrier)["failures"] == f, f"failure {failures}")  # type: ignore[misc]
        waits.append(stats(carrier)["next_ms"] - fake_clock.now_ms())
        fake_clock.advance(waits[-1])
    assert waits == sorted(waits) and waits[0] <= 50 and waits[-1] >= 2 * waits[0], waits
    assert carrier.is_alive()

    outage_server.start()

    def carried() -> bool:
        fake_clock.advance(10)  # the retry waits on the fake clock
        return ready_ids(store) == ["j"]

    wait_until(carried, "the carry after the outage")
    wait_until(lambda: stats(carrier)["failures"] == 0, "the backoff reset")

    # The wake channel is back too: an earlier job from another connection shortens the sleep.
    now = fake_clock.now_ms()
    producer = Store(redis.Redis.from_url(outage_server.url), "test", fake_clock)
    producer.add(producer.new_job("t", "late", delay_ms=90_000))
    producer.add(producer.new_job("t", "soon", delay_ms=300))
    wait_until(lambda: stats(carrier)["next_ms"] == now + 300, "a wake after the outage")
    assert carrier.is_alive() and stats(carrier)["carried"] == 1
    assert start < now


def test_a_resubscription_asks_for_a_carry(
    store: Store, fake_clock: FakeClock, start_carrier: StartCarrier
) -> None:
    carrier = start_carrier(store, fake_clock)
    # Drop the notifier's connection: redis-py (or the notifier) subscribes again, and a wake
    # published meanwhile would be lost, so the carrier carries once more.
    wait_until(lambda: _kill_pubsub_clients(store.client) == 1, "the subscriber's connection")
    wait_until(lambda: stats(carrier)["reasons"].get("resubscribed") == 1, "a carry")
    carrier.tell(Carry("test"))
    assert stats(carrier)["reasons"]["test"] == 1


def _kill_pubsub_clients(client: redis.Redis) -> int:
    return int(client.client_kill_filter(_type="pubsub"))
