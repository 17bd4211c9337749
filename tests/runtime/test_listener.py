"""TopicListener: leases at most the pool's free slots in one round trip, waits for a ready notice
when there is no work (no polling: Redis's own command counts prove it) while still answering its
mailbox, loses no wake-up, and backs off while Redis is away. Driven by the fake clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pykka
import redis
from _actor_support import command_calls, ready_ids, stats
from _wait import wait_until

from actors.clock import FakeClock
from actors.job import Job
from actors.runtime.listener import TopicListener
from actors.runtime.messages import ReadyNotice, SetListener, StopFetching
from actors.runtime.notifier import ShardNotifier
from actors.runtime.pool import ConsumerPool
from actors.server.embedded import RedisProcess
from actors.storage.store import Store


class Unit:
    """A listener and its pool, wired like the ActorSystem wires them."""

    def __init__(
        self,
        store: Store,
        clock: FakeClock,
        handler: Callable[[Job], Any],
        concurrency: int,
        notifier: ShardNotifier,
        look_interval_s: float = 30.0,
    ) -> None:
        self.store = store
        self.pool = ConsumerPool.start(
            store, clock, "t", handler, concurrency=concurrency, timeout_ms=60_000
        )
        self.listener = TopicListener.start(
            store,
            clock,
            "t",
            self.pool,
            concurrency,
            look_interval_s=look_interval_s,
            notifier=notifier,
        )
        self.pool.tell(SetListener(self.listener))

    def listener_stats(self) -> dict[str, Any]:
        return stats(self.listener)

    def stop(self) -> None:
        self.listener.stop(timeout=5)
        self.pool.stop(timeout=5)


StartNotifier = Callable[[Store], ShardNotifier]


def add_ready(store: Store, count: int) -> None:
    store.add_many([store.new_job("t", f"j{n:02}", {"n": n}) for n in range(count)])


def test_leases_at_most_the_free_slots_in_one_round_trip(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    add_ready(store, 10)
    gate = threading.Event()
    running: list[str] = []

    def handler(job: Job) -> None:
        running.append(job.id)
        gate.wait()

    unit = Unit(store, fake_clock, handler, 3, notifiers(store))
    try:
        wait_until(lambda: len(running) == 3, "three handlers running")
        assert stats(unit.listener) == {
            "leased": 3,
            "leases": 1,  # one round trip for the three
            "waits": 0,  # no free slot left, so it does not wait on Redis either
            "paused_waits": 0,
            "gated_waits": 0,
            "free_slots": 0,
            "failures": 0,
        }
        assert ready_ids(store) == [f"j{n:02}" for n in range(3, 10)]
        assert sorted(running) == ["j00", "j01", "j02"]
    finally:
        gate.set()
        unit.stop()


def test_finished_jobs_free_slots_and_the_next_lease_takes_that_many(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    add_ready(store, 10)
    gates = {f"j{n:02}": threading.Event() for n in range(10)}
    active: set[str] = set()
    most = [0]
    lock = threading.Lock()

    def handler(job: Job) -> None:
        with lock:
            active.add(job.id)
            most[0] = max(most[0], len(active))
        gates[job.id].wait()
        with lock:
            active.discard(job.id)

    unit = Unit(store, fake_clock, handler, 3, notifiers(store))
    try:
        wait_until(lambda: len(active) == 3, "three running")
        gates["j00"].set()
        gates["j01"].set()
        wait_until(lambda: {"j03", "j04"} <= active, "two more leased")
        assert len(active) == 3
        assert ready_ids(store) == [f"j{n:02}" for n in range(5, 10)]
        for gate in gates.values():
            gate.set()
        wait_until(lambda: store.stats()["t"]["leased"] == 0 and not ready_ids(store), "all done")
        assert most[0] == 3
        assert stats(unit.pool)["acked"] == 10
        # Never one round trip per job: each lease took what was free.
        assert unit.listener_stats()["leases"] < 10
    finally:
        unit.stop()


def test_while_leases_come_back_full_the_pool_leases_with_its_acks_then_hands_back(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    add_ready(store, 10)
    handled: list[str] = []
    unit = Unit(store, fake_clock, lambda job: handled.append(job.id), 2, notifiers(store))
    try:
        wait_until(lambda: stats(unit.pool)["acked"] == 10, "every job acked")
        pool = stats(unit.pool)
        # The listener leased the first two; later ones came with the acks' round trips.
        assert pool["refills"] >= 1 and pool["refilled"] >= 2
        assert unit.listener_stats()["leased"] + pool["refilled"] == 10
        assert sorted(handled) == [f"j{n:02}" for n in range(10)]  # each once
        # The list ran short: the slots went back to the listener, which now waits for a notice.
        wait_until(lambda: unit.listener_stats()["free_slots"] == 2, "the slots handed back")
        wait_until(lambda: unit.listener_stats()["waits"] >= 1, "the listener waiting")
        store.add(store.new_job("t", "later"))
        wait_until(lambda: "later" in handled, "the job added after")
    finally:
        unit.stop()


def busy_unit(
    store: Store, clock: FakeClock, notifier: ShardNotifier, jobs: int
) -> tuple[Unit, list[str]]:
    """``jobs`` ready jobs and a unit of 200 slots that records the ids it handles: enough slots
    for several ack-and-lease pipelines (actors/runtime/_pipelines.py)."""
    store.add_many([store.new_job("t", f"j{n:04}") for n in range(jobs)])
    handled: list[str] = []
    return Unit(store, clock, lambda job: handled.append(job.id), 200, notifier), handled


def test_a_busy_pool_keeps_several_ack_and_lease_pipelines_on_their_way_and_loses_none(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    jobs = 3_000
    unit, handled = busy_unit(store, fake_clock, notifiers(store), jobs)
    try:
        wait_until(lambda: stats(unit.pool)["acked"] == jobs, "every job acked")
        pool = stats(unit.pool)
        # 200 slots: pipelines of at most 50 acks, up to four on their way at once.
        assert pool["most_in_flight"] >= 2
        assert unit.listener_stats()["leased"] + pool["refilled"] == jobs
        assert sorted(handled) == [f"j{n:04}" for n in range(jobs)]  # each once
        assert store.stats()["t"]["leased"] == 0
    finally:
        unit.stop()


def test_a_pool_stopped_while_leases_are_on_their_way_gives_their_jobs_back(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    jobs = 3_000
    unit, handled = busy_unit(store, fake_clock, notifiers(store), jobs)
    try:
        wait_until(lambda: len(handled) >= 500, "jobs under way")
    finally:
        unit.stop()
    # Whatever was leased at the stop is acked, or back in the ready list, not left to expire.
    counts = store.stats()["t"]
    assert counts["leased"] == 0
    assert counts["ready"] + len(set(handled)) == jobs


def test_told_to_stop_fetching_the_listener_stops_the_pools_refills(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    add_ready(store, 10)
    gate = threading.Event()
    unit = Unit(store, fake_clock, lambda job: gate.wait(), 2, notifiers(store))
    try:
        wait_until(lambda: stats(unit.pool)["running"] == 2, "two running")
        assert unit.listener.ask(StopFetching(), timeout=5) == 0
        gate.set()
        wait_until(lambda: stats(unit.pool)["acked"] == 2, "the two acked")
        assert stats(unit.pool)["refilled"] == 0
        assert len(ready_ids(store)) == 8
    finally:
        gate.set()
        unit.stop()


def test_waits_for_a_notice_without_polling_and_answers_meanwhile(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    done = threading.Event()
    unit = Unit(store, fake_clock, lambda job: done.set(), 2, notifiers(store))
    try:
        wait_until(lambda: unit.listener_stats()["waits"] == 1, "the listener waiting for a notice")
        before = command_calls(store.client, "evalsha")
        # Watch a quiet half second: a poller, even a slow one, would show up in the counts.
        time.sleep(0.5)
        assert command_calls(store.client, "evalsha") == before
        # It waits in its mailbox, not on Redis: it answers at once.
        assert stats_or_none(unit.listener) == {
            "leased": 0,
            "leases": 1,
            "waits": 1,
            "paused_waits": 0,
            "gated_waits": 0,
            "free_slots": 2,
            "failures": 0,
        }

        store.add(store.new_job("t", "wake", None))
        assert done.wait(5), "the waiting listener did not notice the job"
        wait_until(lambda: store.stats()["t"]["leased"] == 0, "the ack")
        # The first wait, then one after the lease that took the job (one of two slots asked
        # for: the list is empty). The job's slot coming back leases nothing. More would be
        # polling.
        assert unit.listener_stats()["waits"] == 2
    finally:
        unit.stop()


def stats_or_none(ref: pykka.ActorRef[Any]) -> Any:
    try:
        return ref.ask(_stats_message(), timeout=0.2)
    except pykka.Timeout:
        return None


def _stats_message() -> Any:
    from actors.runtime.messages import Stats

    return Stats()


def test_no_wake_up_is_lost(store: Store, fake_clock: FakeClock, notifiers: StartNotifier) -> None:
    """Each job is added the moment the previous one is handled, which is when the listener
    goes from its empty lease to waiting for a notice. With a 30 s backstop look, a lost wake-up
    would stall the loop for 30 s; every job must come within the 5 s wait instead."""
    delivered = threading.Semaphore(0)
    unit = Unit(store, fake_clock, lambda job: delivered.release(), 1, notifiers(store))
    try:
        for n in range(60):
            store.add(store.new_job("t", f"w{n}", None))
            assert delivered.acquire(timeout=5), f"job w{n} was not picked up"
        wait_until(lambda: stats(unit.pool)["acked"] == 60, "every ack")
    finally:
        unit.stop()


def test_a_lease_short_of_its_limit_waits_for_the_next_notice_and_freed_slots_lease_nothing(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    """Jobs one at a time, each added once the last is acked: a lease that got fewer jobs than
    it asked for emptied the list (it pops up to its limit), so leasing again at once, or when
    the job's slot comes back, would find nothing. One lease per job, and the first, empty."""
    delivered = threading.Semaphore(0)
    unit = Unit(store, fake_clock, lambda job: delivered.release(), 4, notifiers(store))
    try:
        wait_until(lambda: unit.listener_stats()["waits"] == 1, "the listener waiting")
        for n in range(20):
            store.add(store.new_job("t", f"one{n}", None))
            assert delivered.acquire(timeout=5), f"job one{n} was not picked up"
            wait_until(lambda: unit.listener_stats()["free_slots"] == 4, "its slot back")
        listener = unit.listener_stats()
        assert (listener["leased"], listener["leases"], listener["waits"]) == (20, 21, 21)
        assert stats(unit.pool)["acked"] == 20
    finally:
        unit.stop()


def test_waits_move_one_backstop_timer_which_looks_once_the_interval_has_passed(
    store: Store, fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    """A timer set and cancelled at every wait was garbage for the collector at thousands of
    waits a second (docs/scaling.md); a wait now only moves when the one backstop looks."""
    unit = Unit(store, fake_clock, lambda job: None, 2, notifiers(store), look_interval_s=2.0)
    try:
        wait_until(lambda: unit.listener_stats()["waits"] == 1, "the first wait")
        held = fake_clock.held()
        for n in range(2, 302):
            unit.listener.tell(ReadyNotice())  # nothing is ready: a lease, then a wait
            wait_until(lambda n=n: unit.listener_stats()["waits"] == n, f"wait {n}")  # type: ignore[misc]
        assert fake_clock.held() == held  # the same timer; 300 set and cancelled ones before

        fake_clock.advance(1_000)
        unit.listener.tell(ReadyNotice())  # a wait at +1 s: the look moves to +3 s
        wait_until(lambda: unit.listener_stats()["waits"] == 302, "the wait at +1 s")
        leases = unit.listener_stats()["leases"]
        fake_clock.advance(1_000)  # +2 s: the timer fires, and is set again for +3 s
        assert unit.listener_stats()["leases"] == leases
        fake_clock.advance(1_000)  # +3 s: the backstop looks
        wait_until(lambda: unit.listener_stats()["leases"] == leases + 1, "the backstop look")
    finally:
        unit.stop()


def test_backs_off_while_redis_is_away_and_resumes(
    redis_factory: Callable[..., RedisProcess], fake_clock: FakeClock, notifiers: StartNotifier
) -> None:
    server = redis_factory(appendonly=True, appendfsync="always")
    store = Store(redis.Redis.from_url(server.url), "test", fake_clock)
    got: list[str] = []
    unit = Unit(
        store, fake_clock, lambda job: got.append(job.id), 2, notifiers(store), look_interval_s=2.0
    )
    wait_until(lambda: unit.listener_stats()["waits"] == 1, "the listener waiting for a notice")
    urn = unit.listener.actor_urn

    server.kill()
    fake_clock.advance(2_000)  # its backstop look finds Redis gone
    wait_until(lambda: (stats_or_none(unit.listener) or {}).get("failures") == 1, "a failure")
    for failures in range(2, 4):  # each retry waits on the (fake) clock
        fake_clock.advance(5_000)
        wait_until(
            lambda f=failures: (stats_or_none(unit.listener) or {}).get("failures") == f,  # type: ignore[misc]
            f"failure {failures}",
        )
    server.start()
    fake_clock.advance(5_000)
    store.add(store.new_job("t", "after", None))
    wait_until(lambda: got == ["after"], "a job after the outage")
    assert unit.listener_stats()["failures"] == 0
    assert unit.listener.actor_urn == urn and unit.listener.is_alive()
    unit.stop()
