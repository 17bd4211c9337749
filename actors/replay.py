"""Folds the audit stream back into job states.

The same stream answers three questions: what happened to one job (:func:`history`), what state
every job was in at a moment (:func:`fold` with ``until_ms``), and whether the live state agrees
with the log (:func:`compare`). Each event is checked against the lifecycle table in
:mod:`actors.lifecycle` and changes the replayed job as the table's effects say; an event that is
not legal from the replayed state is reported, not applied. The state before the first event of a
job whose history was trimmed is the one the entry names or the only one the table allows.

Replay is exact only when the stream still holds every event since the oldest live job was added;
retention trims approximately, so a job whose first events were trimmed shows as ``partial``, and
a live job created before the oldest event left is not reported as drift by :func:`compare`.

A fold's memory grows with the live jobs, not with the stream: ended jobs are only counted per
end state (``ended_counts``), and the keys of the newest ``ENDED_MEMORY`` of them are remembered
(``recently_ended``, oldest forgotten first) to flag an event that follows a job's ack or cancel.
Such an anomaly is therefore caught only when the job ended within the last ``ENDED_MEMORY``
ends before it; an older one looks like trimmed history and the job restarts as ``partial``. The
first ``ANOMALIES_KEPT`` anomaly texts are kept and the rest only counted (``anomaly_count``).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from actors.lifecycle import (
    END_STATES,
    TOPIC_EVENTS,
    Effect,
    Event,
    Facts,
    IllegalTransition,
    State,
    TopicEvent,
    implied_before,
    rule_for,
    starts_record,
    step,
    target,
)
from actors.values import AuditEntry, Snapshot

Key = tuple[str, str]

# Ended jobs whose keys a fold remembers, to flag events after their end: at ~300 bytes a key,
# about 30 MB however long the stream.
ENDED_MEMORY = 100_000
ANOMALIES_KEPT = 1_000  # anomaly texts a fold keeps; the rest are only counted


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
    lost: int = 0  # lost leases held against it
    suspect: bool = False  # its lease was lost; it runs alone until an attempt ends
    partial: bool = False  # its first events were trimmed from the stream


@dataclass
class Replay:
    jobs: dict[Key, ReplayedJob] = field(default_factory=dict)
    # Ends per end state: a (topic, id) added again after it ended and ending again counts twice.
    ended_counts: Counter[State] = field(default_factory=Counter)
    # The same per topic (``replay --topic``); grows with the topics, not the jobs.
    ended_by_topic: dict[str, Counter[State]] = field(default_factory=dict)
    # The newest ended jobs' end states, oldest first; OrderedDict drops its oldest in O(1).
    recently_ended: OrderedDict[Key, State] = field(default_factory=OrderedDict)
    ended_memory: int = ENDED_MEMORY
    anomalies: list[str] = field(default_factory=list)  # the first ANOMALIES_KEPT
    anomaly_keys: list[Key] = field(default_factory=list)  # the job of each kept anomaly
    anomaly_count: int = 0  # every anomaly, kept or not
    events: int = 0
    last_ms: int = 0
    first_ms: int | None = None  # time of the oldest event replayed
    # How often each row of the lifecycle table was applied (the model counts the same).
    transitions: Counter[tuple[Event, State]] = field(default_factory=Counter)
    topic_events: Counter[TopicEvent] = field(default_factory=Counter)

    def apply(self, entry_id: str, fields: dict[str, str]) -> None:
        self.events += 1
        if fields["e"] in TOPIC_EVENTS:  # pause, resume: no job moves
            self.topic_events[TopicEvent(fields["e"])] += 1
            return
        event = Event(fields["e"])
        key = (fields["t"], fields["i"])
        now = int(fields["ms"])
        self.last_ms = max(self.last_ms, now)
        if self.first_ms is None:
            self.first_ms = now
        if event is Event.REJECTED:
            return
        job = self.jobs.get(key)
        ended = self.recently_ended.get(key)
        if job is None and ended is not None and not starts_record(event):
            # The job's end is in the stream, so this is not trimmed history: nothing may follow
            # an ack or a cancel except a new add of the same (topic, id).
            self._anomaly(key, f"{entry_id}: {event} after the job was {ended}")
            return
        before = job.state if job is not None else _before_unseen(event, fields)
        if before is None:
            self._anomaly(key, f"{entry_id}: {event} does not say the state it left")
            return
        try:
            after = State(fields["to"]) if "to" in fields else target(event, before, key=key)
            rule = rule_for(event, before, after, key)
        except (IllegalTransition, ValueError) as exc:
            self._anomaly(key, f"{entry_id}: {exc}")
            return
        if Effect.NEW_RECORD in rule.effects:
            job = ReplayedJob(key[0], key[1], before, int(fields["due"]))
            self.recently_ended.pop(key, None)
        elif job is None:
            # Its earlier events were trimmed: start it from what this event implies.
            attempts = _attempts_failed_before(event, int(fields["a"]), rule.effects)
            due_ms = int(fields.get("due", 0))
            job = ReplayedJob(*key, before, due_ms, attempts_failed=attempts, partial=True)
        try:
            step(job, event, after, _facts(fields), key)
        except ValueError as exc:  # an entry without a field its event needs
            self._anomaly(key, f"{entry_id}: {exc}")
            return
        self.transitions[(event, before)] += 1
        if after in END_STATES:
            self.jobs.pop(key, None)
            self._ended(key, after)
        else:
            self.jobs[key] = job

    def _ended(self, key: Key, state: State) -> None:
        self.ended_counts[state] += 1
        self.ended_by_topic.setdefault(key[0], Counter())[state] += 1
        self.recently_ended.pop(key, None)  # re-inserted as the newest
        self.recently_ended[key] = state
        while len(self.recently_ended) > self.ended_memory:
            self.recently_ended.popitem(last=False)

    def _anomaly(self, key: Key, text: str) -> None:
        self.anomaly_count += 1
        if len(self.anomalies) < ANOMALIES_KEPT:
            self.anomalies.append(text)
            self.anomaly_keys.append(key)

    def add_up(self, other: Replay) -> None:
        """Adds another shard's replay to this one: shards hold disjoint jobs, each with its own
        stream. The other's recently ended keys are not kept (they only serve its own fold)."""
        self.jobs.update(other.jobs)
        self.ended_counts.update(other.ended_counts)
        self.events += other.events
        self.last_ms = max(self.last_ms, other.last_ms)
        if other.first_ms is not None:
            mine = self.first_ms
            self.first_ms = other.first_ms if mine is None else min(mine, other.first_ms)
        self.transitions.update(other.transitions)
        self.topic_events.update(other.topic_events)
        self.anomaly_count += other.anomaly_count
        room = max(0, ANOMALIES_KEPT - len(self.anomalies))
        self.anomalies += other.anomalies[:room]
        self.anomaly_keys += other.anomaly_keys[:room]


def _before_unseen(event: Event, fields: dict[str, str]) -> State | None:
    """The state before ``event`` of a job replay has not seen: the state the entry names (`from`
    of a cancel, `was` of a replace), else the only one the lifecycle table allows."""
    named = fields.get("from", fields.get("was"))
    return State(named) if named is not None else implied_before(event)


def _facts(fields: dict[str, str]) -> Facts:
    """What an audit entry tells the effects of its event."""
    return Facts(
        due_ms=int(fields["due"]) if "due" in fields else None,
        token=fields.get("tok"),
        deadline_ms=int(fields["dl"]) if "dl" in fields else None,
        # Where an event counts an attempt, `a` is the attempt that failed: the count after it.
        attempts_failed=int(fields["a"]),
        lost=int(fields["lost"]) if "lost" in fields else None,
    )


def _attempts_failed_before(event: Event, attempt: int, effects: frozenset[Effect]) -> int:
    """Failed attempts before ``event``, from the attempt number every event carries."""
    if Effect.COUNTS_ATTEMPT in effects:
        return attempt - 1  # the attempt that just failed
    if event is Event.PURGED:
        return attempt  # a dead job's count of failed attempts
    return max(0, attempt - 1)  # the attempt that is next or running


def fold(entries: Iterable[AuditEntry], until_ms: int | None = None) -> Replay:
    """Replays events in stream order; with ``until_ms``, only those at or before that time."""
    replay = Replay()
    for entry_id, fields in entries:
        if until_ms is not None and int(fields["ms"]) > until_ms:
            break
        replay.apply(entry_id, fields)
    return replay


def history(entries: Iterable[AuditEntry], topic: str, job_id: str) -> list[AuditEntry]:
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
            ("lost", mine.lost, theirs.lost),
            ("suspect", mine.suspect, theirs.suspect),
        ]
        for name, a, b in pairs:
            if mine.partial and name in ("due_ms", "attempts_failed", "lost", "suspect"):
                continue
            if mine.partial and a is None and name in ("token", "lease_deadline_ms"):
                continue  # a lease whose start was trimmed
            if a != b:
                drift.append(Drift(key[0], key[1], name, a, b))
    return drift


def _history_trimmed(replay: Replay, created_ms: int) -> bool:
    """True when every event of a job created at ``created_ms`` may have been trimmed away."""
    return replay.first_ms is not None and created_ms <= replay.first_ms
