"""Watchdog: an actor killed by an exception is restarted, the restart is logged and shows in
health(); a unit that keeps dying is restarted after growing delays; every interval it forces a
carry, which finds a job whose wake message was lost."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import pykka
import pytest
from _actor_support import ready_ids, stats
from _wait import wait_until

from actors import DelayQueue, testing
from actors.clock import FakeClock
from actors.runtime._actor import RedelayActor
from actors.runtime.carrier import Carrier
from actors.runtime.listener import TopicListener
from actors.runtime.messages import Health, Run, Supervise, Wake
from actors.runtime.notifier import ShardNotifier, notifier_for
from actors.runtime.pool import ConsumerPool
from actors.runtime.watchdog import Watchdog
from actors.server.embedded import RedisProcess
from actors.storage.keys import ShardKeys
from actors.storage.store import Store


@pytest.fixture
def notifier(store: Store) -> Iterator[ShardNotifier]:
    started = notifier_for(store).start()
    yield started
    started.stop()


Refs = dict[str, pykka.ActorRef[Any]]


def health(watchdog: pykka.ActorRef[Any]) -> dict[str, Any]:
    report: dict[str, Any] = watchdog.ask(Health(), block=True, timeout=5)
    return report


def supervise_carrier(
    watchdog: pykka.ActorRef[Any], store: Store, clock: FakeClock, notifier: ShardNotifier
) -> Refs:
    def factory(supervisor: pykka.ActorRef[Any]) -> Refs:
        return {"carrier": Carrier.start(store, clock, supervisor, notifier=notifier)}

    refs: Refs = watchdog.ask(Supervise("carrier", factory), block=True, timeout=5)
    return refs


def test_an_actor_killed_by_an_exception_is_restarted_logged_and_reported(
    store: Store, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture, notifier: ShardNotifier
) -> None:
    caplog.set_level(logging.WARNING, logger="actors.watchdog")
    watchdog = Watchdog.start(fake_clock)
    first = supervise_carrier(watchdog, store, fake_clock, notifier)["carrier"]
    assert health(watchdog)["carrier"] == {
        "alive": True,
        "restarts": 0,
        "last_error": "",
        "last_restart_ms": None,
    }

    first.tell(Wake("not a time"))  # type: ignore[arg-type]  # a bug: the tell raises TypeError
    wait_until(lambda: health(watchdog)["carrier"]["restarts"] == 1, "the restart")
    report = health(watchdog)["carrier"]
    assert report["alive"] and "TypeError" in report["last_error"]
    assert report["last_restart_ms"] == fake_clock.now_ms()
    assert not first.is_alive()
    assert any("restarting carrier (restart #1)" in r.getMessage() for r in caplog.records)

    # The new carrier does the work. It watches the notifier before its first carry, so the add's
    # wake reaches it, or that carry finds the job.
    store.add(store.new_job("t", "j", delay_ms=100))
    fake_clock.advance(100)
    wait_until(lambda: ready_ids(store) == ["j"], "a carry by the new carrier")


def test_a_topic_unit_is_replaced_whole_when_its_pool_dies(
    store: Store, fake_clock: FakeClock, notifier: ShardNotifier
) -> None:
    watchdog = Watchdog.start(fake_clock)

    def factory(supervisor: pykka.ActorRef[Any]) -> Refs:
        pool = ConsumerPool.start(
            store, fake_clock, "t", lambda job: None, concurrency=1, timeout_ms=1_000,
            supervisor=supervisor,
        )  # fmt: skip
        listener = TopicListener.start(
            store, fake_clock, "t", pool, 1, supervisor=supervisor, notifier=notifier
        )
        return {"pool:t": pool, "listener:t": listener}

    old: Refs = watchdog.ask(Supervise("topic:t", factory), block=True, timeout=5)
    old["pool:t"].tell(Run(None))  # type: ignore[arg-type]  # a bug: iterating None
    wait_until(lambda: health(watchdog)["topic:t"]["restarts"] == 1, "the restart")
    wait_until(lambda: not old["listener:t"].is_alive(), "the old listener stopped too")
    assert health(watchdog)["topic:t"]["alive"]


class Fragile(RedelayActor):
    """Dies in its start every time: a bug that a restart does not cure."""

    def started(self) -> None:
        raise RuntimeError("broken at start")


def test_a_unit_that_keeps_dying_is_restarted_after_growing_delays(
    fake_clock: FakeClock,
) -> None:
    watchdog = Watchdog.start(fake_clock)
    built: list[int] = []

    def factory(supervisor: pykka.ActorRef[Any]) -> Refs:
        built.append(fake_clock.now_ms())
        return {"fragile": Fragile.start("fragile", fake_clock, supervisor)}

    watchdog.ask(Supervise("fragile", factory), timeout=5)
    wait_until(lambda: len(built) == 2, "the first restart, at once")
    assert health(watchdog)["fragile"]["last_error"].startswith("fragile: RuntimeError")
    for _ in range(40):  # the next restarts wait on the clock: 100 ms, then about 200, 400...
        if len(built) >= 5:
            break
        fake_clock.advance(50)
        stats(watchdog)
    assert len(built) >= 5
    gaps = [b - a for a, b in itertools.pairwise(built[1:])]
    assert gaps == sorted(gaps) and gaps[0] >= 50, gaps
    assert watchdog.is_alive()


class MutedKeys(ShardKeys):
    """Keys whose wake channel nobody listens to: an add whose wake message is lost."""

    @property
    def wake_channel(self) -> str:
        return "nobody-listens"


def test_the_periodic_carry_finds_a_job_whose_wake_was_lost(
    store: Store, fake_clock: FakeClock, notifier: ShardNotifier
) -> None:
    watchdog = Watchdog.start(fake_clock, interval_ms=60_000)
    carrier = supervise_carrier(watchdog, store, fake_clock, notifier)["carrier"]
    wait_until(lambda: stats(carrier)["carries"] == 1, "the carry at start")

    muted = Store(store.client, "test", fake_clock)
    muted.shard_keys = [MutedKeys("test")]  # its adds publish where no carrier listens
    muted.add(muted.new_job("t", "lost-wake", delay_ms=1_000))
    fake_clock.advance(59_999)
    assert stats(carrier)["next_ms"] is None and ready_ids(store) == []  # it never heard
    fake_clock.advance(1)
    wait_until(lambda: ready_ids(store) == ["lost-wake"], "the watchdog's carry")
    assert stats(carrier)["reasons"] == {"start": 1, "watchdog": 1}
    assert stats(watchdog)["ticks"] == 1
    fake_clock.advance(60_000)
    wait_until(lambda: stats(watchdog)["ticks"] == 2, "the next tick")


def test_the_facade_reports_a_restart_in_health(
    redis_server: RedisProcess, fake_clock: FakeClock
) -> None:
    queue = DelayQueue(redis_server.url, namespace="test", clock=fake_clock)
    queue.handler("t")(lambda job: None)
    assert queue.health() == {}
    queue.start()
    try:
        report = queue.health()
        assert set(report) == {"watchdog", "carrier", "sweeper", "topic:t"}
        assert all(unit["alive"] and unit["restarts"] == 0 for unit in report.values())
        refs = testing.actor_refs(queue)
        refs["carrier"].tell(Wake("not a time"))  # type: ignore[arg-type]  # a bug: TypeError
        wait_until(lambda: queue.health()["carrier"]["restarts"] == 1, "the restart in health()")
        assert queue.health()["carrier"]["alive"]
        assert "TypeError" in queue.health()["carrier"]["last_error"]
    finally:
        queue.stop(grace=1)
    assert queue.health() == {}
