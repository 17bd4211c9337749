"""Checkers: from what the ledger saw and what Redis holds at the end, decide what went wrong.

Pure functions over :class:`Evidence` (no Redis, no clock, no threads), shared by both simulators
and testable with hand-made evidence. They run in this order, safety first, then at-least-once,
then liveness; the exit code is the first failure's (see :data:`EXIT_CODES`, docs/simulations.md):

1. ``early``: a job was leased, or its handler started, before its due time (a lease by the
   audit stream's time, a run by its worker's clock).
1b. ``early_by_redis``: a handler started before its due time by Redis's own clock (the chaos
   workers read TIME as a run starts): what a worker whose clock stepped cannot explain away.
2. ``cancelled_delivered``: a job was delivered after a cancel that removed it (or after a cancel
   request on a leased job: that run may finish, no later one may start).
3. ``after_ack``: a job changed state after it was acked (e.g. it came back and ran again).
4. ``paused_leased``: a job was leased from a topic between its pause and its resume (read per
   shard stream order: a lease after the last ``paused`` entry of a pause and before the first
   ``resumed`` entry that ends it).
5. ``audit_drift``: the audit stream has an illegal transition, reuses a lease token, or does not
   replay to the live state (``actors.replay.fold`` + ``compare``).
6. ``schedule``: a recurring schedule made one slot's occurrence twice, had two occurrences
   pending at once, or ended without its next occurrence.
7. ``lost``: a job the producer added is gone from Redis without a successful run, a death or a
   cancel to show for it.
8. ``unexplained_duplicate``: a job ran again after a run that did not fail, and the audit stream
   shows no expired lease, release or handler timeout that ended the earlier run, nor a new add
   after its ack.
9. ``stuck``: at the end a job is still delayed, ready or leased (nothing finished it in time).
10. ``late``: with a bound set, lateness in calm periods went over it.
6b. ``innocent_dead``: a job died of lost leases (quarantined) though it never crashed its worker,
   and a loss held against it was not one a fault of the driver's (a kill, a partition) caused
   either: it paid for a neighbour's crash.
6c. ``quarantine``: a job whose handler crashed its worker every time (a culprit) did not end
   quarantined, or took more workers down than the topic's lost_max allows (one loss before it
   runs alone, then lost_max).
11. ``user_check``: the user's own checker (``--check``) raised: one of their invariants broke
   (simulations.crash.user_check runs it; it is not a function of the evidence alone).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise

from actors.lifecycle import TOPIC_EVENTS, State
from actors.replay import compare, fold
from actors.schedules import schedule_of
from actors.values import Snapshot

from .ledger import FaultRow, Key, LedgerData, RunRow

Entry = tuple[str, dict[str, str]]
LeaseId = tuple[Key, str]  # (the job, its lease token)

EXIT_OK = 0
EXIT_INTERNAL = 1  # the simulator itself failed (a traceback says where)
EXIT_USAGE = 2
EXIT_NO_REDIS = 3  # no redis-server binary to run


class Failure(StrEnum):
    EARLY = "early"
    EARLY_BY_REDIS = "early_by_redis"
    CANCELLED_DELIVERED = "cancelled_delivered"
    AFTER_ACK = "after_ack"
    PAUSED_LEASED = "paused_leased"
    AUDIT_DRIFT = "audit_drift"
    SCHEDULE = "schedule"
    INNOCENT_DEAD = "innocent_dead"
    QUARANTINE = "quarantine"
    LOST = "lost"
    UNEXPLAINED_DUPLICATE = "unexplained_duplicate"
    STUCK = "stuck"
    LATE = "late"
    USER_CHECK = "user_check"


# In check order: the first failure found decides the exit code.
EXIT_CODES: dict[Failure, int] = {
    Failure.EARLY: 10,
    Failure.EARLY_BY_REDIS: 21,  # checked second, numbered after the others
    Failure.CANCELLED_DELIVERED: 11,
    Failure.AFTER_ACK: 12,
    Failure.PAUSED_LEASED: 19,  # numbered after the others it joined
    Failure.AUDIT_DRIFT: 13,
    Failure.SCHEDULE: 20,  # added after the others: their codes stay as they were
    Failure.INNOCENT_DEAD: 22,
    Failure.QUARANTINE: 23,
    Failure.LOST: 14,
    Failure.UNEXPLAINED_DUPLICATE: 15,
    Failure.STUCK: 16,
    Failure.LATE: 17,
    Failure.USER_CHECK: 18,
}


def exit_codes_text(no_redis: str = "no redis-server") -> str:
    """Every exit code of a simulator, for its --help: ``0 ok``, the failures in number order
    (``10 early, ...``), then the simulator's own (``no_redis`` says what code 3 means)."""
    ordered = sorted(EXIT_CODES.items(), key=lambda item: item[1])
    failures = ", ".join(f"{code} {failure.value}" for failure, code in ordered)
    return (
        f"{EXIT_OK} ok, {failures}, {EXIT_INTERNAL} simulator error, {EXIT_USAGE} usage, "
        f"{EXIT_NO_REDIS} {no_redis}"
    )


MEANINGS: dict[Failure, str] = {
    Failure.EARLY: "a job was delivered before its due time",
    Failure.EARLY_BY_REDIS: "a handler started before its due time by Redis's clock",
    Failure.CANCELLED_DELIVERED: "a cancelled job was delivered",
    Failure.AFTER_ACK: "a job changed state after it was acked",
    Failure.PAUSED_LEASED: "a job was leased from a paused topic",
    Failure.AUDIT_DRIFT: "the audit stream does not replay to the live state",
    Failure.SCHEDULE: "a schedule made a slot twice, had two pending, or lost its next one",
    Failure.INNOCENT_DEAD: "a job died for a crash it did not cause",
    Failure.QUARANTINE: "a crash-looping job was not quarantined after lost_max losses",
    Failure.LOST: "a job the producer added was lost",
    Failure.UNEXPLAINED_DUPLICATE: "a duplicate delivery has no expired lease, release or timeout",
    Failure.STUCK: "a job was still pending when the run ended",
    Failure.LATE: "lateness in calm periods went over the bound",
    Failure.USER_CHECK: "your --check function found a broken invariant",
}

# Events after which a job is gone; only a new add may follow (and refused calls, which change
# nothing).
_RESTARTS = frozenset({"added", "replaced"})
_HARMLESS_AFTER_END = frozenset({"added", "replaced", "rejected"})
# Events that carry the job's (new) due time.
_DUE_EVENTS = frozenset({"added", "replaced", "failed", "expired", "lost", "requeued", "ready"})
# Events that end a lease without an ack, so a later lease of the same job is legitimate.
_LEASE_ENDS = ("expired", "lost", "quarantined", "released", "failed", "dead", "cancelled")


@dataclass(frozen=True, slots=True)
class Violation:
    failure: Failure
    key: Key | None
    message: str

    def __str__(self) -> str:
        where = "" if self.key is None else f"{self.key[0]}/{self.key[1]}: "
        return f"[{self.failure}] {where}{self.message}"


@dataclass(frozen=True)
class Evidence:
    ledger: LedgerData
    audit: list[Entry]
    live: Snapshot
    # Clocks of different processes agree only to within this (0 with one fake clock).
    early_tolerance_ms: int = 0
    # A delivery is "after a fault" when a fault fired between its due time and its start, or
    # at most this long before its due time (recovery takes a lease or a sweep to finish).
    fault_window_ms: int = 60_000
    calm_p99_bound_ms: int | None = None
    # When an audit event happened: "caller" reads its ms field (the time the caller passed;
    # exact under one fake clock), "server" its stream id (the server's clock when the script
    # ran). With real processes the caller's time can be older than the script by the request's
    # latency, or by redis-py's retries of the call.
    audit_time: str = "caller"
    # Recurring schedules the run kept until the end: each must still have its next occurrence.
    schedules: tuple[str, ...] = ()
    # Some worker's wall clock was stepped: a run's start read on its worker's clock says
    # nothing, so only runs with the server's time (RunRow.server_ms) are judged.
    worker_clocks_stepped: bool = False
    # The topic's lost_max (losses held against a job before it is quarantined) when the run has
    # jobs that crash their worker: innocent_dead and quarantine are checked. None: not checked.
    lost_max: int | None = None
    # The deterministic simulator's clock (the scripts' time) stepped back: (the audit stream's
    # time at the step, ms back) each. ``early`` then judges by true time: a time the clock read
    # plus every step back before it, placed by the entry that carries it.
    clock_steps: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Percentiles:
    count: int
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None

    @classmethod
    def of(cls, values: Sequence[int]) -> Percentiles:
        if not values:
            return cls(0, None, None, None)
        ordered = sorted(values)
        return cls(len(ordered), _rank(ordered, 50), _rank(ordered, 99), ordered[-1])


def _rank(ordered: Sequence[int], percent: float) -> int:
    """Nearest-rank percentile: the smallest value with ``percent`` % of values at or below."""
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class LatenessPoint:
    due_ms: int
    lateness_ms: int
    after_fault: bool


@dataclass(frozen=True)
class Lateness:
    calm: Percentiles
    after_fault: Percentiles
    points: list[LatenessPoint]


@dataclass(frozen=True)
class Duplicates:
    count: int  # runs that started again after a run that did not fail
    by_cause: dict[str, int]  # explanation -> count ("expired lease after worker_kill", ...)
    ran_ok_twice: int  # jobs whose handler returned ok more than once


@dataclass
class Verdict:
    violations: list[Violation]
    outcomes: dict[str, int]
    duplicates: Duplicates
    lateness: Lateness
    checked: list[str] = field(default_factory=list)
    # What became of the schedules' occurrences (not the ledger's jobs: ``outcomes`` leaves
    # them out): made, and ended acked, dead or cancelled.
    occurrences: dict[str, int] = field(default_factory=dict)

    @property
    def failures(self) -> list[Failure]:
        found = {v.failure for v in self.violations}
        return [f for f in EXIT_CODES if f in found]

    @property
    def exit_code(self) -> int:
        failures = self.failures
        return EXIT_CODES[failures[0]] if failures else EXIT_OK


class AuditIndex:
    """The stream, grouped per job, with each lease's position.

    A lease is named by its job and its token: a token is ``<now_ms>-<seq>`` with the shard's
    own counter, so two shards leasing in the same millisecond hand out the same token to
    different jobs. Only a token reused for the same job is an error."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.by_key: dict[Key, list[tuple[int, dict[str, str]]]] = defaultdict(list)
        self.lease_pos: dict[LeaseId, int] = {}
        self.lease_ms: dict[LeaseId, int] = {}
        self.lease_by: dict[LeaseId, str] = {}
        self.reused_tokens: list[tuple[Key, str]] = []
        self.ids: list[str] = []
        # A topic's pause and resume entries and its leases' positions (check_paused).
        self.topic_events: dict[str, list[tuple[int, str]]] = defaultdict(list)
        self.topic_leases: dict[str, list[tuple[int, Key]]] = defaultdict(list)
        self.fields_at: dict[int, dict[str, str]] = {}
        for pos, (entry_id, fields) in enumerate(entries):
            self.ids.append(entry_id)
            key = (fields.get("t", ""), fields.get("i", ""))
            if fields.get("e") in TOPIC_EVENTS:
                self.topic_events[key[0]].append((pos, fields["e"]))
                continue
            if fields.get("e") == "leased":
                self.topic_leases[key[0]].append((pos, key))
            self.by_key[key].append((pos, fields))
            self.fields_at[pos] = fields
            if fields.get("e") == "leased":
                token = fields.get("tok", "")
                lease = (key, token)
                if lease in self.lease_pos:
                    self.reused_tokens.append(lease)
                self.lease_pos[lease] = pos
                self.lease_ms[lease] = int(fields.get("ms", 0))
                self.lease_by[lease] = fields.get("by", "")

    def entry(self, pos: int) -> dict[str, str]:
        """The fields of the job entry at a position (empty for a topic's pause or resume)."""
        return self.fields_at.get(pos, {})

    def server_ms(self, pos: int) -> int:
        """The server's time when the entry was written (the ms part of its stream id)."""
        return int(self.ids[pos].split("-", 1)[0])

    def first(self, key: Key, events: Iterable[str]) -> int | None:
        wanted = set(events)
        for pos, fields in self.by_key.get(key, []):
            if fields.get("e") in wanted:
                return pos
        return None

    def between(self, key: Key, after: int, before: int) -> list[dict[str, str]]:
        return [f for pos, f in self.by_key.get(key, []) if after < pos < before]


def _runs_by_key(runs: Iterable[RunRow]) -> dict[Key, list[RunRow]]:
    grouped: dict[Key, list[RunRow]] = defaultdict(list)
    for run in runs:
        grouped[run.key].append(run)
    return grouped


# -- 1. early ---------------------------------------------------------------------------------


def check_early(ev: Evidence, index: AuditIndex) -> list[Violation]:
    found: list[Violation] = []
    tolerance = ev.early_tolerance_ms
    # What the clock read at an entry lags true time by (0 unless the clock stepped back).
    behind = _steps_behind(ev, index)
    # Each lease's job due time, in true time (for its runs).
    due_of_lease: dict[LeaseId, int] = {}
    for key, events in index.by_key.items():
        due: int | None = None
        for pos, fields in events:
            event = fields.get("e")
            if event in _DUE_EVENTS and "due" in fields:
                due = int(fields["due"]) + behind(pos)
            elif event == "leased" and due is not None:
                due_of_lease[(key, fields.get("tok", ""))] = due
                at = index.server_ms(pos) if ev.audit_time == "server" else int(fields["ms"])
                at += behind(pos)
                if at + tolerance < due:
                    found.append(
                        Violation(
                            Failure.EARLY,
                            key,
                            f"leased {due - at} ms before its due time {due} (audit entry {pos}"
                            f", {ev.audit_time} time)",
                        )
                    )
    for run in ev.ledger.runs:
        if run.server_ms is not None or ev.worker_clocks_stepped:
            continue  # judged by check_early_by_redis, or by no clock worth reading
        due, started = _run_due(ev, run), run.started_ms
        if ev.clock_steps:
            # No step falls between a lease and its run's start (steps wait for idle actors).
            lease = (run.key, run.token)
            if lease not in due_of_lease:
                continue  # no lease in the stream to place it by: its lease was judged
            due = due_of_lease[lease]
            started += behind(index.lease_pos[lease])
        if started + tolerance < due:
            found.append(
                Violation(
                    Failure.EARLY,
                    run.key,
                    f"handler started {due - started} ms before the due time {due} "
                    f"(attempt {run.attempt}, token {run.token}, worker {run.worker})",
                )
            )
    return found


def _steps_behind(ev: Evidence, index: AuditIndex) -> Callable[[int], int]:
    """How far the clock was behind true time when the entry at a position was written."""
    if not ev.clock_steps:
        return lambda pos: 0
    return lambda pos: sum(back for at, back in ev.clock_steps if at < index.server_ms(pos))


def _run_due(ev: Evidence, run: RunRow) -> int:
    job = ev.ledger.jobs.get(run.key)
    return max(run.due_ms, job.due_ms) if job is not None else run.due_ms


# A due time given as seconds (``at``) can come back a millisecond short of the ledger's.
SERVER_ROUNDING_MS = 2


def check_early_by_redis(ev: Evidence) -> list[Violation]:
    """Each run whose worker read Redis's TIME as it started: no start before the due time by
    that clock, whatever the worker's own clock said (a step, a drift). The TIME call comes after
    the lease, so an early run cannot hide behind it; only rounding is allowed for."""
    found: list[Violation] = []
    for run in ev.ledger.runs:
        if run.server_ms is None:
            continue
        due = _run_due(ev, run)
        if run.server_ms + SERVER_ROUNDING_MS < due:
            found.append(
                Violation(
                    Failure.EARLY_BY_REDIS,
                    run.key,
                    f"handler started {due - run.server_ms} ms before the due time {due} by "
                    f"Redis's TIME (attempt {run.attempt}, token {run.token}, worker "
                    f"{run.worker}, whose own clock said {run.started_ms - due:+d} ms)",
                )
            )
    return found


# -- paused_leased ----------------------------------------------------------------------------


def paused_windows(events: Sequence[tuple[int, str]], end: int) -> list[tuple[int, int]]:
    """Stream positions (after, before) between which a topic was paused in every shard.

    A pause writes one ``paused`` entry per shard and the merged stream keeps each shard's own
    order, so a lease after the last ``paused`` entry of a pause (and before the first ``resumed``
    entry) came after its own shard's pause and before its resume."""
    windows: list[tuple[int, int]] = []
    start: int | None = None
    for pos, event in events:
        if event == "paused":
            start = pos  # the latest paused entry of this pause
        elif start is not None:
            windows.append((start, pos))
            start = None
    if start is not None:
        windows.append((start, end))  # never resumed: to the stream's end
    return windows


def check_paused(index: AuditIndex) -> list[Violation]:
    found: list[Violation] = []
    for topic, events in index.topic_events.items():
        windows = paused_windows(events, len(index.ids))
        for pos, key in index.topic_leases.get(topic, []):
            for after, before in windows:
                if after < pos < before:
                    found.append(
                        Violation(
                            Failure.PAUSED_LEASED,
                            key,
                            f"leased (audit entry {pos}) while {topic} was paused (from entry "
                            f"{after})",
                        )
                    )
    return found


# -- 2. cancelled ------------------------------------------------------------------------------


def check_cancelled(ev: Evidence, index: AuditIndex) -> list[Violation]:
    found: list[Violation] = []
    for key, events in index.by_key.items():
        blocked: tuple[int, str] | None = None
        for pos, fields in events:
            event = fields.get("e", "")
            if event in _RESTARTS:
                blocked = None
            elif event in ("cancelled", "cancel_requested") and blocked is None:
                blocked = (pos, event)
            elif event == "leased" and blocked is not None:
                found.append(
                    Violation(
                        Failure.CANCELLED_DELIVERED,
                        key,
                        f"leased (audit entry {pos}, token {fields.get('tok')}) after "
                        f"{blocked[1]} (audit entry {blocked[0]})",
                    )
                )
    runs = _runs_by_key(ev.ledger.runs)
    for cancel in ev.ledger.cancels:
        if cancel.result not in ("removed", "requested"):
            continue
        marker = "cancelled" if cancel.result == "removed" else "cancel_requested"
        marker_pos = index.first(cancel.key, [marker])
        for run in runs.get(cancel.key, []):
            if run.seq < cancel.seq:
                continue
            lease_pos = index.lease_pos.get((run.key, run.token))
            if marker_pos is None or lease_pos is None or lease_pos > marker_pos:
                found.append(
                    Violation(
                        Failure.CANCELLED_DELIVERED,
                        cancel.key,
                        f"cancel answered {cancel.result!r}, then the handler ran "
                        f"(token {run.token}, worker {run.worker})",
                    )
                )
    return found


# -- 3. after ack ------------------------------------------------------------------------------


def check_after_ack(index: AuditIndex) -> list[Violation]:
    found: list[Violation] = []
    for key, events in index.by_key.items():
        acked_at: int | None = None
        for pos, fields in events:
            event = fields.get("e", "")
            if event in _RESTARTS:
                acked_at = None
            elif acked_at is not None and event not in _HARMLESS_AFTER_END:
                found.append(
                    Violation(
                        Failure.AFTER_ACK,
                        key,
                        f"{event} (audit entry {pos}) after it was acked (audit entry {acked_at})",
                    )
                )
                acked_at = None  # one report per ack
            elif event == "acked":
                acked_at = pos
    return found


# -- 4. audit replay ---------------------------------------------------------------------------


def check_audit(ev: Evidence, index: AuditIndex) -> list[Violation]:
    found: list[Violation] = []
    replay = fold(ev.audit)
    for anomaly, key in zip(replay.anomalies, replay.anomaly_keys, strict=True):
        # The job's own entries go with it: a CI run's evidence is gone with its temporary
        # directory, and an illegal transition is only understood from the history around it.
        found.append(
            Violation(
                Failure.AUDIT_DRIFT,
                key,
                f"illegal transition: {anomaly}; its entries: {job_entries_text(index, key)}",
            )
        )
    for drift in compare(replay, ev.live):
        found.append(
            Violation(
                Failure.AUDIT_DRIFT,
                (drift.topic, drift.id),
                f"{drift.field}: replayed {drift.replayed!r}, live {drift.live!r}",
            )
        )
    for key, token in index.reused_tokens:
        found.append(Violation(Failure.AUDIT_DRIFT, key, f"lease token {token} handed out twice"))
    return found


# A job's entries shown with an illegal transition: its newest ones, which hold the transition.
ENTRIES_SHOWN = 16
# The fields that tell a job's entries apart; the rest (topic, id, time, traceback) are noise.
_SHOWN_FIELDS = ("a", "to", "from", "due", "tok", "by", "why")


def job_entries_text(index: AuditIndex, key: Key) -> str:
    """A job's audit entries on one line: "<entry id> <event> a=1 to=ready ...", newest last,
    at most ENTRIES_SHOWN of them."""
    entries = index.by_key.get(key, [])
    shown = [
        " ".join(
            [index.ids[pos], fields.get("e", "?")]
            + [f"{name}={fields[name]}" for name in _SHOWN_FIELDS if name in fields]
        )
        for pos, fields in entries[-ENTRIES_SHOWN:]
    ]
    earlier = len(entries) - len(shown)
    return (f"({earlier} earlier) " if earlier else "") + " | ".join(shown)


# -- 5 and 7. lost and stuck -------------------------------------------------------------------


def check_outcomes(ev: Evidence, index: AuditIndex) -> tuple[list[Violation], dict[str, int]]:
    found: list[Violation] = []
    outcomes: Counter[str] = Counter()
    succeeded = {run.key for run in ev.ledger.runs if run.outcome == "ok"}
    # Any cancel call counts: a call whose reply was lost with a killed connection is sent again
    # by redis-py and then answers "missing" for the job it did remove.
    cancel_asked = {c.key for c in ev.ledger.cancels}
    for key in sorted(ev.ledger.jobs):
        live = ev.live.jobs.get(key)
        if live is not None:
            if live.state is State.DEAD:
                outcomes["dead"] += 1
                continue
            outcomes["stuck"] += 1
            found.append(
                Violation(
                    Failure.STUCK,
                    key,
                    f"still {live.state} at the end (due {live.due_ms}, attempt {live.attempt}, "
                    f"lease deadline {live.lease_deadline_ms})",
                )
            )
            continue
        ending = _last_end(index, key)
        if ending == "acked" and key in succeeded:
            outcomes["acked"] += 1
        elif ending in ("acked", "cancelled") and key in cancel_asked:
            outcomes["cancelled"] += 1
        elif ending == "acked":
            outcomes["lost"] += 1
            found.append(
                Violation(Failure.LOST, key, "acked, but no run of its handler ever returned ok")
            )
        elif ending == "cancelled":
            outcomes["lost"] += 1
            found.append(Violation(Failure.LOST, key, "cancelled, but nobody asked to cancel it"))
        else:
            outcomes["lost"] += 1
            runs = sum(1 for r in ev.ledger.runs if r.key == key)
            found.append(
                Violation(
                    Failure.LOST,
                    key,
                    f"gone from Redis with no acked, dead or cancelled event "
                    f"({len(index.by_key.get(key, []))} audit events, {runs} runs)",
                )
            )
    outcomes["jobs"] = len(ev.ledger.jobs)
    return found, dict(outcomes)


def _last_end(index: AuditIndex, key: Key) -> str | None:
    ending: str | None = None
    for _, fields in index.by_key.get(key, []):
        event = fields.get("e", "")
        if event in _RESTARTS:
            ending = None
        elif event in ("acked", "cancelled", "purged"):
            ending = event
    return ending


# -- 6. duplicates -----------------------------------------------------------------------------


def check_duplicates(ev: Evidence, index: AuditIndex) -> tuple[list[Violation], Duplicates]:
    """A run is a duplicate when the run before it did not fail by itself (it returned ok, or
    never returned: its worker crashed or it hung). Each must follow an end of the earlier lease
    in the audit stream: expired, released, or failed by the pool (a timeout)."""
    found: list[Violation] = []
    causes: Counter[str] = Counter()
    count = 0
    ran_ok_twice = 0
    faults = sorted(ev.ledger.faults, key=lambda f: f.at_ms)
    for key, runs in _runs_by_key(ev.ledger.runs).items():
        if sum(1 for r in runs if r.outcome == "ok") > 1:
            ran_ok_twice += 1
        for previous, run in pairwise(runs):
            if previous.outcome == "error":
                continue  # a retry the handler asked for, not a duplicate
            count += 1
            cause = _explain(index, key, previous, run, faults)
            if cause is None:
                found.append(
                    Violation(
                        Failure.UNEXPLAINED_DUPLICATE,
                        key,
                        f"ran again (token {run.token}) after token {previous.token} "
                        f"({previous.outcome or 'never returned'}) with no expired lease, "
                        "release or timeout in between",
                    )
                )
                causes["unexplained"] += 1
            else:
                causes[cause] += 1
    return found, Duplicates(count, dict(sorted(causes.items())), ran_ok_twice)


def _explain(
    index: AuditIndex, key: Key, previous: RunRow, run: RunRow, faults: Sequence[FaultRow]
) -> str | None:
    if previous.token == run.token:
        return None  # the same lease delivered twice: nothing can explain it
    start = index.lease_pos.get((key, previous.token))
    end = index.lease_pos.get((key, run.token))
    if start is None or end is None or end < start:
        return None
    acked = False
    for fields in index.between(key, start, end):
        event = fields.get("e", "")
        acked = acked or event == "acked"
        if acked and event in _RESTARTS:
            # The producer added the job again after the run was acked: a retried add whose
            # first try went in (an add spanning shards is all or nothing per shard only), so
            # the queue ran what it was given twice.
            return "added again after its ack"
        if event not in _LEASE_ENDS:
            continue
        if event == "failed" or (event == "dead" and fields.get("via") == "failed"):
            return "handler timeout"
        if event == "released":
            return "released at shutdown"
        return "expired lease after " + _expiry_cause(index, previous, fields, faults)
    return None


def _expiry_cause(
    index: AuditIndex, previous: RunRow, expired: dict[str, str], faults: Sequence[FaultRow]
) -> str:
    """The fault that most likely cost the lease: the last one that hit the consumer holding
    it while it was held (a fault's detail starts with the consumer it hit), else the last
    fault that hits every consumer, else none."""
    held_from = index.lease_ms[(previous.key, previous.token)] - 1
    held_to = int(expired.get("ms", 0))
    holder = index.lease_by.get((previous.key, previous.token), "")
    during = [f for f in faults if held_from <= f.at_ms <= held_to]
    mine = [f for f in during if holder and f.detail.split(" ", 1)[0] == holder]
    if mine:
        return mine[-1].kind
    shared = [f for f in during if f.kind in GLOBAL_FAULTS]
    if shared:
        return shared[-1].kind
    return "no fault"


# Faults that hit every consumer at once (the others name the consumer they hit first thing in
# their detail).
GLOBAL_FAULTS = frozenset(
    {
        "connection_drop",
        "connection_kill",
        "clock_jump",
        "clock_step_back",
        "redis_restart",
        "master_kill",
        "slot_migration",
    }
)


# -- lateness ----------------------------------------------------------------------------------


# Faults that touch only the job they happen to (and the slot it holds): they do not make the
# deliveries around them "after a fault".
_LOCAL_FAULTS = frozenset({"handler_hang", "handler_error"})


def lateness(ev: Evidence) -> Lateness:
    fault_times = sorted(f.at_ms for f in ev.ledger.faults if f.kind not in _LOCAL_FAULTS)
    points: list[LatenessPoint] = []
    for run in ev.ledger.runs:
        late_ms = run.start_ms - run.due_ms
        after = any(run.due_ms - ev.fault_window_ms <= at <= run.start_ms for at in fault_times)
        points.append(LatenessPoint(run.due_ms, late_ms, after))
    calm = [p.lateness_ms for p in points if not p.after_fault]
    hit = [p.lateness_ms for p in points if p.after_fault]
    return Lateness(Percentiles.of(calm), Percentiles.of(hit), points)


def check_late(ev: Evidence, late: Lateness) -> list[Violation]:
    bound = ev.calm_p99_bound_ms
    if bound is None or late.calm.p99_ms is None or late.calm.p99_ms <= bound:
        return []
    return [
        Violation(
            Failure.LATE,
            None,
            f"calm-period lateness p99 {late.calm.p99_ms} ms is over the bound {bound} ms",
        )
    ]


# -- 6b and 6c. deaths of lost leases -----------------------------------------------------------

CRASH_FAULT = "handler_crash"  # a fault whose detail is "<consumer> <topic>/<id> #<attempt>"
# A death of lost leases: quarantined, or (before lost leases were counted apart) an expired
# lease that ran out the retry schedule.
_LOSS_EVENTS = frozenset({"lost", "quarantined", "expired"})


def culprits(ev: Evidence) -> dict[Key, int]:
    """The jobs whose handler crashed its worker, with how many times it did."""
    found: Counter[Key] = Counter()
    for fault in ev.ledger.faults:
        if fault.kind == CRASH_FAULT:
            topic, _, job_id = fault.detail.split(" ")[1].partition("/")
            found[(topic, job_id)] += 1
    return dict(found)


def _died_of_losses(index: AuditIndex, key: Key) -> int | None:
    """The position of the job's last death when it died of lost leases, else None."""
    death: int | None = None
    for pos, fields in index.by_key.get(key, []):
        event = fields.get("e", "")
        if event in _RESTARTS or event == "requeued":
            death = None
        elif event == "quarantined" or (event == "dead" and fields.get("via") == "expired"):
            death = pos
        elif event == "dead":
            death = None  # its own handler failed it: no one else's fault
    return death


def _held_losses(index: AuditIndex, key: Key, until: int) -> list[tuple[int, int]]:
    """(lease position, loss position) of each loss held against the job up to ``until``."""
    held: list[tuple[int, int]] = []
    lease: int | None = None
    for pos, fields in index.by_key.get(key, []):
        if pos > until:
            break
        event = fields.get("e", "")
        if event == "leased":
            lease = pos
        elif event in ("requeued", *_RESTARTS):
            held = []
        elif lease is not None and event in (*_LOSS_EVENTS, "dead", "failed", "acked", "released"):
            if _held(fields):
                held.append((lease, pos))
            lease = None
    return held


def _held(fields: dict[str, str]) -> bool:
    """Whether the entry ending a lease holds a loss against the job: a loss while it ran alone
    (``counted``), its quarantine, or, before losses were counted apart, an expired lease (an
    attempt the job was charged with)."""
    event = fields.get("e")
    if event == "lost":
        return fields.get("counted") == "1"
    if event == "dead":
        return fields.get("via") == "expired"
    return event in ("quarantined", "expired")


def _loss_explained(
    ev: Evidence, index: AuditIndex, lease: int, loss: int, faults: Sequence[FaultRow]
) -> bool:
    """A fault of the driver's hit the lease's consumer (or every consumer) while it held it."""
    holder = index.entry(lease).get("by", "")
    start, end = _entry_ms(ev, index, lease) - 1, _entry_ms(ev, index, loss)
    for fault in faults:
        if not start <= fault.at_ms <= end or fault.kind in _LOCAL_FAULTS:
            continue
        if fault.kind == CRASH_FAULT:
            continue  # a crash of this job's own is not the driver's, a neighbour's is no excuse
        if fault.kind in GLOBAL_FAULTS or fault.detail.split(" ", 1)[0] == holder:
            return True
    return False


def _entry_ms(ev: Evidence, index: AuditIndex, pos: int) -> int:
    if ev.audit_time == "server":
        return index.server_ms(pos)
    return int(index.entry(pos).get("ms", 0))


def check_lost_deaths(ev: Evidence, index: AuditIndex) -> list[Violation]:
    """``innocent_dead`` and ``quarantine``, when the run has a ``lost_max``."""
    if ev.lost_max is None:
        return []
    found: list[Violation] = []
    crashed = culprits(ev)
    faults = sorted(ev.ledger.faults, key=lambda f: f.at_ms)
    for key in sorted(ev.ledger.jobs):
        death = _died_of_losses(index, key)
        if key in crashed:
            live = ev.live.jobs.get(key)
            quarantined = death is not None and index.entry(death).get("e") == "quarantined"
            if not quarantined or live is None or live.state is not State.DEAD:
                end = "still " + str(live.state) if live is not None else "gone"
                if death is not None:
                    end = f"{index.entry(death).get('e')} (audit entry {death})"
                found.append(
                    Violation(
                        Failure.QUARANTINE,
                        key,
                        f"crashed its worker {crashed[key]} times and ended {end}, not quarantined",
                    )
                )
            elif crashed[key] > ev.lost_max + 1:
                found.append(
                    Violation(
                        Failure.QUARANTINE,
                        key,
                        f"crashed its worker {crashed[key]} times before it was quarantined "
                        f"(lost_max {ev.lost_max}: at most {ev.lost_max + 1})",
                    )
                )
            continue
        if death is None:
            continue
        unexplained = [
            (lease, loss)
            for lease, loss in _held_losses(index, key, death)
            if not _loss_explained(ev, index, lease, loss, faults)
        ]
        if unexplained:
            lease, loss = unexplained[0]
            holder = index.entry(lease).get("by", "")
            found.append(
                Violation(
                    Failure.INNOCENT_DEAD,
                    key,
                    f"died of lost leases (audit entry {death}) though it never crashed its "
                    f"worker: {len(unexplained)} of the losses held against it had no fault of "
                    f"the run's to explain them, first the lease of entry {lease} on {holder} "
                    f"lost at entry {loss}; its entries: {job_entries_text(index, key)}",
                )
            )
    return found


# -- 4b. schedules -----------------------------------------------------------------------------


def check_schedules(ev: Evidence) -> list[Violation]:
    """From the stream: an occurrence id (one slot) made twice without a cancel between, or a
    schedule with two occurrences pending (delayed) at once; from the live state: a schedule kept
    to the end without exactly one pending occurrence."""
    found: list[Violation] = []
    pending: dict[str, set[Key]] = defaultdict(set)  # schedule -> its delayed occurrences
    made: set[Key] = set()
    for _, fields in ev.audit:
        key = (fields.get("t", ""), fields.get("i", ""))
        name = schedule_of(key[1])
        if name is None:
            continue
        event = fields.get("e")
        if event == "added":
            if key in made:
                found.append(Violation(Failure.SCHEDULE, key, "the same slot was made twice"))
            made.add(key)
            if fields.get("to") == "delayed":
                if pending[name]:
                    others = sorted(i for _, i in pending[name])
                    found.append(
                        Violation(Failure.SCHEDULE, key, f"made while {others} was pending")
                    )
                pending[name].add(key)
        elif event == "ready":
            pending[name].discard(key)
        elif event == "cancelled":
            pending[name].discard(key)
            made.discard(key)  # dropped before it ran: an update may make that slot again
    for name in ev.schedules:
        live = [
            key
            for key, info in ev.live.jobs.items()
            # A failed occurrence waiting for its retry is not the schedule's next one.
            if schedule_of(key[1]) == name
            and info.state is State.DELAYED
            and info.attempts_failed == 0
        ]
        if len(live) != 1:
            found.append(
                Violation(
                    Failure.SCHEDULE,
                    None,
                    f"schedule {name} ended with {len(live)} pending occurrences (want 1)",
                )
            )
    return found


OCCURRENCE_ENDS = ("acked", "dead", "cancelled")


def occurrence_outcomes(ev: Evidence) -> dict[str, int]:
    """The schedules' occurrences, from the stream: how many were made, and how many ends of
    each kind they had (a requeued dead occurrence that ends again counts twice)."""
    counts: Counter[str] = Counter()
    for _, fields in ev.audit:
        if schedule_of(fields.get("i", "")) is None:
            continue
        event = fields.get("e", "")
        if event == "added":
            counts["made"] += 1
        elif event in OCCURRENCE_ENDS:
            counts[event] += 1
    return {kind: counts[kind] for kind in ("made", *OCCURRENCE_ENDS)}


# -- all together ------------------------------------------------------------------------------


def check_all(ev: Evidence) -> Verdict:
    index = AuditIndex(ev.audit)
    violations: list[Violation] = []
    violations += check_early(ev, index)
    violations += check_early_by_redis(ev)
    violations += check_cancelled(ev, index)
    violations += check_after_ack(index)
    violations += check_paused(index)
    violations += check_audit(ev, index)
    violations += check_schedules(ev)
    violations += check_lost_deaths(ev, index)
    outcome_violations, outcomes = check_outcomes(ev, index)
    duplicate_violations, duplicates = check_duplicates(ev, index)
    late = lateness(ev)
    violations += [v for v in outcome_violations if v.failure is Failure.LOST]
    violations += duplicate_violations
    violations += [v for v in outcome_violations if v.failure is Failure.STUCK]
    violations += check_late(ev, late)
    checked = [f.value for f in Failure if f is not Failure.USER_CHECK]  # run by the driver
    return Verdict(
        violations,
        outcomes,
        duplicates,
        late,
        checked=checked,
        occurrences=occurrence_outcomes(ev),
    )


__all__ = [
    "EXIT_CODES",
    "MEANINGS",
    "AuditIndex",
    "Duplicates",
    "Evidence",
    "Failure",
    "Lateness",
    "Percentiles",
    "Verdict",
    "Violation",
    "check_all",
    "check_schedules",
]
