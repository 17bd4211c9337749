"""A topic's limits (rate, max_in_flight), enforced by the lease script with the server's clock for
every process: a job held back stays ready with no attempt counted, and the lease reply says how
long to wait. Accuracy over time is measured by simulations/bench/probes/limit_accuracy.py, not
here."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from _actor_support import command_calls
from _wait import wait_until

from actors import DelayQueue, Job, ValidationError
from actors import _constants as c
from actors.clock import FakeClock
from actors.server.embedded import RedisProcess
from actors.storage.store import Store
from actors.values import TopicLimits


def add_ready(store: Store, count: int, topic: str = "t") -> None:
    store.add_many([store.new_job(topic, f"j{n:02}") for n in range(count)])


def test_a_rate_lets_its_burst_through_then_says_how_long_to_wait(store: Store) -> None:
    add_ready(store, 5)
    # One job per 10 s (a burst of a tenth of 1, so one): slow enough that no test machine
    # reaches the next one between two calls.
    store.set_limits("t", TopicLimits(rate=(1, 10)))
    first = store.lease_batch("t", 5, "w")
    assert len(first.leases) == 1
    assert 9_000 <= first.wait_ms <= 10_000  # type: ignore[operator]
    second = store.lease_batch("t", 5, "w")
    assert second.leases == [] and 8_000 <= second.wait_ms <= 10_000  # type: ignore[operator]
    # Held back, not failed: still ready, no attempt counted, no event written for them.
    assert store.stats()["t"] == {"delayed": 0, "ready": 4, "leased": 1, "dead": 0}
    held = store.get("t", "j01")
    assert held is not None and held.state == "ready" and held.attempts_failed == 0
    assert [f["e"] for _, f in store.audit_entries()].count("leased") == 1


def test_a_burst_is_a_tenth_of_the_rate(store: Store) -> None:
    add_ready(store, 50)
    store.set_limits("t", TopicLimits(rate=(100, 1000)))  # one per 10 s, bursts of 10
    batch = store.lease_batch("t", 50, "w")
    assert len(batch.leases) == 10 and batch.wait_ms is not None and batch.wait_ms > 0


def test_max_in_flight_counts_every_consumer_s_leases(store: Store) -> None:
    add_ready(store, 5)
    store.set_limits("t", TopicLimits(max_in_flight=2))
    one = store.lease_batch("t", 5, "a")
    assert len(one.leases) == 2 and one.wait_ms == c.GATE_FLIGHT_POLL_MS
    other = store.lease_batch("t", 5, "b")  # another process: the same limit
    assert other.leases == [] and other.wait_ms == c.GATE_FLIGHT_POLL_MS
    store.ack("t", one.leases[0].id, one.leases[0].token)
    (freed,) = store.lease_batch("t", 5, "b").leases
    assert freed.attempt == 1
    store.set_limits("t", TopicLimits())  # lifted
    assert len(store.lease("t", 5)) == 2


def test_a_topic_without_limits_and_an_unlimited_lease_say_no_wait(store: Store) -> None:
    add_ready(store, 3)
    store.set_limits("t", TopicLimits(max_in_flight=10))
    batch = store.lease_batch("t", 5, "w")
    assert len(batch.leases) == 3 and batch.wait_ms == 0  # the list ran out, not the limit


def test_shards_split_max_in_flight_and_never_exceed_it(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    sharded = Store(redis_client, "limited", fake_clock, shards=3)
    add_ready(sharded, 60)
    sharded.set_limits("t", TopicLimits(max_in_flight=4))  # shares 2, 1, 1
    leased = []
    for _ in range(6):
        leased += sharded.lease("t", 60)
    assert len(leased) == 4
    assert sharded.limits("t") == TopicLimits(max_in_flight=4)


def test_limits_are_stored_for_every_process_and_checked(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    one = DelayQueue(redis_client, "lim", clock=fake_clock, producer_only=True)
    other = DelayQueue(redis_client, "lim", clock=fake_clock, producer_only=True)
    try:
        one.limit("t", rate=(100, 1), max_in_flight=5)
        assert other.limits("t") == TopicLimits(rate=(100, 1.0), max_in_flight=5)
        before = dict(redis_client.hgetall(one.store.keys.gates))
        for kwargs, field in [
            ({"rate": (0, 1)}, "rate"),
            ({"rate": (10, 0)}, "rate"),
            ({"rate": 10}, "rate"),
            ({"rate": (10, 1, 2)}, "rate"),
            ({"max_in_flight": 0}, "max_in_flight"),
            ({"max_in_flight": 1.5}, "max_in_flight"),
        ]:
            with pytest.raises(ValidationError) as caught:
                one.limit("t", **kwargs)  # type: ignore[arg-type]
            assert caught.value.field == field
        assert dict(redis_client.hgetall(one.store.keys.gates)) == before
        one.limit("t")
        assert other.limits("t") == TopicLimits()
    finally:
        one.close()
        other.close()


@pytest.fixture
def worker(redis_server: RedisProcess) -> Iterator[tuple[DelayQueue, list[str]]]:
    queue = DelayQueue(redis_server.url, namespace="limited", sweep_interval_s=0.2)
    handled: list[str] = []
    lock = threading.Lock()

    @queue.handler("t", concurrency=8)
    def handle(job: Job) -> None:
        with lock:
            handled.append(job.id)

    yield queue, handled
    queue.stop(grace=1)


def test_a_rate_limited_worker_waits_without_spinning(
    worker: tuple[DelayQueue, list[str]],
) -> None:
    queue, handled = worker
    queue.limit("t", rate=(1, 3600))  # one an hour: the second job waits for the whole test
    queue.add_many([{"topic": "t", "id": f"j{n}"} for n in range(3)])
    queue.start()

    def listener() -> dict[str, int]:
        return queue.actor_stats().get("listener:t") or {}

    wait_until(lambda: listener().get("gated_waits", 0) >= 1, what="the listener held back")
    wait_until(lambda: len(handled) == 1, what="the one job the rate let through")
    leases = listener()["leases"]
    before = command_calls(queue.store.client, "evalsha")
    # A quiet half second: a spinning listener would lease (and call a script) again and again.
    threading.Event().wait(0.5)
    assert listener()["leases"] == leases
    assert command_calls(queue.store.client, "evalsha") - before < 10  # the sweepers' rounds only
    assert queue.stats()["t"]["ready"] == 2
