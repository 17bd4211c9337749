"""Folds the audit stream back into job states.

The same stream answers three questions: what happened to one job (:func:`history`), what state
every job was in at a moment (:func:`fold` with ``until_ms``), and whether the live state agrees
with the log (:func:`compare`). Each event is checked against the lifecycle table in
:mod:`actors.model`; an event that is not legal from the replayed state is reported, not applied.

Replay is exact only when the stream still holds every event since the oldest live job was added;
retention trims approximately, so a job whose first events were trimmed shows as ``partial``, and
a live job created before the oldest event left is not reported as drift by :func:`compare`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from actors.model import Event, IllegalTransition, State, check
from actors.values import Snapshot

Key = tuple[str, str]
Entry = tuple[str, dict[str, str]]


@dataclass
class ReplayedJob:
    topic: str
    id: str
    state: State
    due_ms: int
    attempts_failed: int = 0
    token: str | None = None
    deadline_ms: int | None = None
    cancel_requested: bool = False
    partial: bool = False  # its first events were trimmed from the stream


@dataclass
class Replay:
    jobs: dict[Key, ReplayedJob] = field(default_factory=dict)
    ended: dict[Key, State] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)
    events: int = 0
    last_ms: int = 0
    first_ms: int | None = None  # time of the oldest event replayed

    def apply(self, entry_id: str, fields: dict[str, str]) -> None:
        self.events += 1
        event = Event(fields["e"])
        key = (fields["t"], fields["i"])
        now = int(fields["ms"])
        self.last_ms = max(self.last_ms, now)
        if self.first_ms is None:
            self.first_ms = now
        if event is Event.REJECTED:
            return
        job = self.jobs.get(key)
        before = job.state if job is not None else State.NEW
        ended = self.ended.get(key)
        if job is None and ended is not None and event not in (Event.ADDED, Event.REPLACED):
            # The job's end is in the stream, so this is not trimmed history: nothing may follow
            # an ack or a cancel except a new add of the same (topic, id).
            self.anomalies.append(f"{entry_id}: {event} after the job was {ended}")
            return
        if job is None and event is Event.REPLACED:
            before = State(fields["was"])  # its earlier events were trimmed; replace resets all
        elif job is None and event is not Event.ADDED:
            # Its earlier events were trimmed: start it from what this event implies.
            job = ReplayedJob(
                key[0],
                key[1],
                State.NEW,
                int(fields.get("due", 0)),
                attempts_failed=_attempts_failed_before(event, int(fields["a"])),
                partial=True,
            )
            before = State(fields["from"]) if "from" in fields else _implied_before(event)
        after = _target(event, fields)
        try:
            check(event, before, after, key)
        except IllegalTransition as exc:
            self.anomalies.append(f"{entry_id}: {exc}")
            return
        if after in (State.ACKED, State.CANCELLED):
            self.jobs.pop(key, None)
            self.ended[key] = after
            return
        assert job is not None or event in (Event.ADDED, Event.REPLACED)
        if event in (Event.ADDED, Event.REPLACED):
            job = ReplayedJob(key[0], key[1], after, int(fields["due"]))
            self.ended.pop(key, None)
        assert job is not None
        job.state = after
        if "due" in fields:
            job.due_ms = int(fields["due"])
        if event is Event.LEASED:
            job.token, job.deadline_ms = fields["tok"], int(fields["dl"])
        elif event is Event.EXTENDED:
            # The token too: it is the first thing a partial job's replay learns of its lease.
            job.token, job.deadline_ms = fields["tok"], int(fields["dl"])
        elif event in (Event.FAILED, Event.EXPIRED, Event.DEAD):
            job.attempts_failed = int(fields["a"])
            job.token = job.deadline_ms = None
        elif event is Event.RELEASED:
            job.token = job.deadline_ms = None
        elif event is Event.REQUEUED:
            job.attempts_failed = 0
        elif event is Event.CANCEL_REQUESTED:
            job.cancel_requested = True
        self.jobs[key] = job


def _target(event: Event, fields: dict[str, str]) -> State:
    if "to" in fields:
        return State(fields["to"])
    return {
        Event.READY: State.READY,
        Event.LEASED: State.LEASED,
        Event.ACKED: State.ACKED,
        Event.DEAD: State.DEAD,
        Event.EXTENDED: State.LEASED,
        Event.RELEASED: State.READY,
        Event.CANCEL_REQUESTED: State.LEASED,
        Event.CANCELLED: State.CANCELLED,
        Event.REQUEUED: State.READY,
        Event.PURGED: State.CANCELLED,
    }[event]


def _attempts_failed_before(event: Event, attempt: int) -> int:
    """Failed attempts before ``event``, from the attempt number every event carries."""
    if event in (Event.FAILED, Event.EXPIRED, Event.DEAD):
        return attempt - 1  # the attempt that just failed
    if event is Event.PURGED:
        return attempt  # a dead job's count of failed attempts
    return max(0, attempt - 1)  # the attempt that is next or running


def _implied_before(event: Event) -> State:
    return {
        Event.READY: State.DELAYED,
        Event.LEASED: State.READY,
        Event.REQUEUED: State.DEAD,
        Event.PURGED: State.DEAD,
    }.get(event, State.LEASED)


def fold(entries: Iterable[Entry], until_ms: int | None = None) -> Replay:
    """Replays events in stream order; with ``until_ms``, only those at or before that time."""
    replay = Replay()
    for entry_id, fields in entries:
        if until_ms is not None and int(fields["ms"]) > until_ms:
            break
        replay.apply(entry_id, fields)
    return replay


def history(entries: Iterable[Entry], topic: str, job_id: str) -> list[Entry]:
    """One job's events, oldest first."""
    return [(i, f) for i, f in entries if f.get("t") == topic and f.get("i") == job_id]


@dataclass(frozen=True)
class Drift:
    topic: str
    id: str
    field: str
    replayed: object
    live: object

    def __str__(self) -> str:
        return f"{self.topic}/{self.id}: {self.field} replayed={self.replayed!r} live={self.live!r}"


def compare(replay: Replay, live: Snapshot) -> list[Drift]:
    """Every difference between the replayed and the live state (empty when they agree)."""
    drift: list[Drift] = []
    for key, problems in sorted(live.problems.items()):
        drift.append(Drift(key[0], key[1], "structure", None, "; ".join(problems)))
    for key in sorted(set(replay.jobs) | set(live.jobs)):
        mine, theirs = replay.jobs.get(key), live.jobs.get(key)
        if mine is None and theirs is not None and _history_trimmed(replay, theirs.created_ms):
            continue
        if mine is None or theirs is None:
            drift.append(
                Drift(
                    key[0],
                    key[1],
                    "exists",
                    None if mine is None else mine.state.value,
                    None if theirs is None else theirs.state,
                )
            )
            continue
        pairs: list[tuple[str, object, object]] = [
            ("state", mine.state.value, theirs.state),
            ("due_ms", mine.due_ms, theirs.due_ms),
            ("attempts_failed", mine.attempts_failed, theirs.attempts_failed),
            ("token", mine.token, theirs.token),
            ("lease_deadline_ms", mine.deadline_ms, theirs.lease_deadline_ms),
            ("cancel_requested", mine.cancel_requested, theirs.cancel_requested),
        ]
        for name, a, b in pairs:
            if mine.partial and name in ("due_ms", "attempts_failed"):
                continue
            if mine.partial and a is None and name in ("token", "lease_deadline_ms"):
                continue  # a lease whose start was trimmed
            if a != b:
                drift.append(Drift(key[0], key[1], name, a, b))
    return drift


def _history_trimmed(replay: Replay, created_ms: int) -> bool:
    """True when every event of a job created at ``created_ms`` may have been trimmed away."""
    return replay.first_ms is not None and created_ms <= replay.first_ms
