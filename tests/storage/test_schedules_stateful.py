"""Recurring schedules under two processes that carry, work, crash and reschedule at random.

A Hypothesis RuleBasedStateMachine drives two Stores (two "processes", each with its own
connection) on one namespace of a real Redis and one FakeClock. Rules: schedule or update a
schedule from either process (the same spec again, or another interval or misfire), unschedule,
advance the clock (sometimes far: downtime), carry (Store.carry), a carry whose process dies
before it refills (the script alone), work (lease, then ack or fail), sweep expired leases, and the
watchdog's tend_schedules. After every step: no slot's occurrence was made twice, a live schedule
has exactly one pending occurrence (an `every` schedule whose stored times all passed takes the
next slot on its grid), an unscheduled one has none, every job sits in one structure, and the
audit stream replays to the live state. Smaller than the lifecycle machine's runs: a few minutes
of a loaded 2-core machine at most.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from _audit import structure_problems
from _binaries import binary_label, redis_binaries
from _profiles import HYPOTHESIS_PROFILE, STATEFUL_TIMEOUT_S
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from actors import schedules
from actors.clock import FakeClock
from actors.replay import compare, fold
from actors.schedules import ScheduleInfo
from actors.server.embedded import RedisProcess
from actors.storage import calls
from actors.storage.store import Store

NAMES = ("a", "b")
TOPIC = "t"
PROCESSES = st.sampled_from((0, 1))


def spec(name: str, every_s: int, misfire: str) -> schedules.ScheduleSpec:
    return schedules.spec(
        name,
        TOPIC,
        cron=None,
        every=every_s,
        tz="UTC",
        body={"n": name},
        start_at_ms=None,
        misfire_policy=misfire,
    )


class ScheduleMachine(RuleBasedStateMachine):
    server: ClassVar[RedisProcess]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        admin = self.server.client()
        admin.flushall()
        admin.close()
        self.stores = [Store(self.server.client(), "st", self.clock) for _ in range(2)]
        self.live: set[str] = set()
        self.made: set[str] = set()  # occurrence ids made and not dropped since
        self.audit_seen = "-"

    def teardown(self) -> None:
        for store in self.stores:
            store.client.close()

    @initialize()
    def start(self) -> None:
        self.stores[0].configure_topic(TOPIC, self.stores[0].default_topic_config)

    @rule(
        p=PROCESSES,
        name=st.sampled_from(NAMES),
        every_s=st.sampled_from((1, 5, 60)),
        misfire=st.sampled_from(("run_once", "skip")),
    )
    def schedule(self, p: int, name: str, every_s: int, misfire: str) -> None:
        outcome, pending = self.stores[p].schedule(spec(name, every_s, misfire))
        assert outcome == ("updated" if name in self.live else "created") or (
            outcome == "unchanged" and name in self.live
        )
        assert pending is not None
        self.live.add(name)

    @rule(p=PROCESSES, name=st.sampled_from(NAMES))
    def unschedule(self, p: int, name: str) -> None:
        assert self.stores[p].unschedule(name) is (name in self.live)
        self.live.discard(name)

    @rule(ms=st.sampled_from((1, 500, 1_000, 5_000, 60_000, 10 * 60_000)))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(p=PROCESSES)
    def carry(self, p: int) -> None:
        self.stores[p].carry()

    @rule(p=PROCESSES)
    def carry_then_die(self, p: int) -> None:
        """The carry script ran; the process died before it could refill."""
        store = self.stores[p]
        store._batch.run([calls.carry(store.keys, store._now(), 100)])

    @rule(p=PROCESSES, ack=st.booleans())
    def work(self, p: int, ack: bool) -> None:
        store = self.stores[p]
        for lease in store.lease(TOPIC, 3, f"p{p}"):
            if ack:
                store.ack(TOPIC, lease.id, lease.token)
            else:
                store.fail(TOPIC, lease.id, lease.token, "boom")

    @rule(p=PROCESSES)
    def sweep(self, p: int) -> None:
        self.stores[p].expire()

    @rule(p=PROCESSES)
    def watchdog(self, p: int) -> None:
        self.stores[p].tend_schedules()
        for info in self.infos().values():
            assert info.pending_id is not None, info

    # -- invariants -----------------------------------------------------------------------

    def infos(self) -> dict[str, ScheduleInfo]:
        return {info.spec.name: info for info in self.stores[0].schedules()}

    @invariant()
    def one_pending_occurrence_per_live_schedule(self) -> None:
        infos = self.infos()
        assert set(infos) == self.live
        delayed: dict[str, list[str]] = {name: [] for name in NAMES}
        for (_, job_id), job in self.stores[0].snapshot().jobs.items():
            name = schedules.schedule_of(job_id)
            # A failed occurrence waiting for its retry is not the schedule's next one.
            if name is not None and job.state == "delayed" and job.attempts_failed == 0:
                delayed[name].append(job_id)
        for name in NAMES:
            if name not in self.live:
                assert delayed[name] == [], name
                continue
            info = infos[name]
            # Never without one: an `every` schedule whose stored times all passed (downtime, or
            # refills lost with their processes) takes the next slot on its grid.
            assert info.pending_id is not None, info
            assert delayed[name] == [info.pending_id], (name, delayed[name], info)

    @invariant()
    def no_slot_twice_and_never_two_pending(self) -> None:
        store = self.stores[0]
        start = "-" if self.audit_seen == "-" else "(" + self.audit_seen
        entries = store.audit_entries(start, "+")
        if entries:
            self.audit_seen = entries[-1][0]
        for _, fields in entries:
            job_id = fields["i"]
            if schedules.schedule_of(job_id) is None:
                continue
            if fields["e"] == "added":
                assert job_id not in self.made, f"{job_id} made twice"
                self.made.add(job_id)
            elif fields["e"] == "cancelled":
                self.made.discard(job_id)

    @invariant()
    def structures_and_audit_agree(self) -> None:
        store = self.stores[0]
        assert structure_problems(store) == []
        replay = fold(store.iter_audit())
        assert compare(replay, store.snapshot()) == []


# On the main binary only; the lifecycle and delayed-set machines run once per binary.
@pytest.mark.slow
@pytest.mark.timeout(STATEFUL_TIMEOUT_S)
@pytest.mark.parametrize("binary_server", redis_binaries()[:1], ids=binary_label, indirect=True)
def test_schedules_hold_under_two_processes(binary_server: RedisProcess) -> None:
    class Machine(ScheduleMachine):
        server = binary_server

    profile = settings()  # the conftest profile ("ci" or "slow"), smaller under "ci"
    if HYPOTHESIS_PROFILE == "ci":
        profile = settings(profile, max_examples=60, stateful_step_count=40)
    Machine.TestCase.settings = profile

    run_state_machine_as_test(Machine)
