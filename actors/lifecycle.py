"""The job lifecycle: its states, its events, and the one table of which event may move a job
from which state, to which states, with which effects on the job's record.

Pure: no Redis, no threads. The model (:mod:`actors.model`) applies this table for every
transition, the replay of the audit stream (:mod:`actors.replay`) reads its targets, the states
an event implies before it and its effects from it, and the values the store returns
(:mod:`actors.values`) spell states with these enums. The Lua scripts in ``lua/`` are held to it
by the stateful test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class State(StrEnum):
    NEW = "new"  # before add; only a source
    DELAYED = "delayed"
    READY = "ready"
    LEASED = "leased"
    DEAD = "dead"
    ACKED = "acked"  # removed, done
    CANCELLED = "cancelled"  # removed, never delivered again


class Event(StrEnum):
    ADDED = "added"
    REPLACED = "replaced"
    READY = "ready"
    LEASED = "leased"
    ACKED = "acked"
    FAILED = "failed"
    EXPIRED = "expired"  # a lease expired, counted as a failed attempt: redelay before lost leases
    LOST = "lost"  # a lease expired without a result: the job runs again as a suspect
    QUARANTINED = "quarantined"  # lost too often while it ran alone: dead
    DEAD = "dead"
    EXTENDED = "extended"
    RELEASED = "released"
    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel_requested"
    REQUEUED = "requeued"
    PURGED = "purged"
    REJECTED = "rejected"  # a stale token was refused; no state change


class TopicEvent(StrEnum):
    """Events of a topic, not of a job (their ``i`` is empty): no job changes state."""

    PAUSED = "paused"
    RESUMED = "resumed"


TOPIC_EVENTS = frozenset(TopicEvent)
# Events no script writes any more, kept in the table so that replay still reads the streams
# older versions wrote: `expired` (a lease that expired counted as a failed attempt), which
# redelay writes as `lost` since lost leases (lua/_lost.lua).
LEGACY_EVENTS = frozenset({Event.EXPIRED})


class Effect(StrEnum):
    """What a transition does to the job's record besides changing its state.

    Listed in the order :func:`step` applies them.
    """

    NEW_RECORD = "new record"  # body, schedule, lease and creation time written afresh
    ENDS_LEASE = "ends lease"  # token and deadline dropped; the old token is refused from now on
    RESETS_ATTEMPTS = "resets attempts"  # failed attempts back to 0
    COUNTS_ATTEMPT = "counts attempt"  # one more failed attempt
    RESETS_LOSSES = "resets losses"  # lost leases held against it back to 0, no longer a suspect
    COUNTS_LOSS = "counts loss"  # the lost leases held against it: one more if it ran as a suspect
    CLEARS_CANCEL = "clears cancel"  # a pending cancel request dropped
    MARKS_CANCEL = "marks cancel"  # the lease ends the job, whatever ends the lease
    CLEARS_SUSPECT = "clears suspect"  # an attempt ended: it no longer runs alone
    MARKS_SUSPECT = "marks suspect"  # its lease was lost: it runs alone from now on
    SETS_DUE = "sets due"  # a new due time
    STARTS_LEASE = "starts lease"  # a new token and deadline
    MOVES_DEADLINE = "moves deadline"  # the lease's deadline, for the same token
    FRONT = "ready list front"  # onto the front of its topic's ready list, not the back


@dataclass(frozen=True)
class Rule:
    """One row of the table: the states an event may lead to from one state, and its effects."""

    targets: frozenset[State]
    effects: frozenset[Effect] = frozenset()


# Live and not dead: the job will be delivered (again) without anyone acting. In the order a job
# passes them, the order of columns and listings.
PENDING_STATES: tuple[State, ...] = (State.DELAYED, State.READY, State.LEASED)
LIVE_STATES_IN_ORDER: tuple[State, ...] = (*PENDING_STATES, State.DEAD)
LIVE_STATES = frozenset(LIVE_STATES_IN_ORDER)  # the job has a record
END_STATES = frozenset({State.ACKED, State.CANCELLED})  # the record is deleted

# Where a job goes when its due time decides: already due, straight to ready.
_BY_DUE = frozenset({State.DELAYED, State.READY})


def _rule(targets: frozenset[State], *effects: Effect) -> Rule:
    return Rule(targets, frozenset(effects))


_ATTEMPT_FAILED = (Effect.ENDS_LEASE, Effect.COUNTS_ATTEMPT, Effect.CLEARS_SUSPECT)

# (event, state before) -> its rule. A job that is cancelled while leased keeps its lease until
# something ends it; then it ends as cancelled (or acked) instead of being retried or released.
RULES: dict[tuple[Event, State], Rule] = {
    (Event.ADDED, State.NEW): _rule(_BY_DUE, Effect.NEW_RECORD, Effect.SETS_DUE),
    **{
        (Event.REPLACED, s): _rule(
            _BY_DUE,
            Effect.NEW_RECORD,
            Effect.ENDS_LEASE,
            Effect.RESETS_ATTEMPTS,
            Effect.CLEARS_CANCEL,
            Effect.SETS_DUE,
        )
        for s in (State.DELAYED, State.READY, State.LEASED, State.DEAD)
    },
    (Event.READY, State.DELAYED): _rule(frozenset({State.READY})),
    (Event.LEASED, State.READY): _rule(frozenset({State.LEASED}), Effect.STARTS_LEASE),
    (Event.ACKED, State.LEASED): _rule(frozenset({State.ACKED}), Effect.ENDS_LEASE),
    (Event.FAILED, State.LEASED): _rule(_BY_DUE, *_ATTEMPT_FAILED, Effect.SETS_DUE),
    (Event.EXPIRED, State.LEASED): _rule(_BY_DUE, *_ATTEMPT_FAILED, Effect.SETS_DUE),
    (Event.DEAD, State.LEASED): _rule(frozenset({State.DEAD}), *_ATTEMPT_FAILED),
    (Event.LOST, State.LEASED): _rule(
        _BY_DUE, Effect.ENDS_LEASE, Effect.COUNTS_LOSS, Effect.MARKS_SUSPECT, Effect.SETS_DUE
    ),
    (Event.QUARANTINED, State.LEASED): _rule(
        frozenset({State.DEAD}), Effect.ENDS_LEASE, Effect.COUNTS_LOSS, Effect.CLEARS_SUSPECT
    ),
    (Event.EXTENDED, State.LEASED): _rule(frozenset({State.LEASED}), Effect.MOVES_DEADLINE),
    (Event.RELEASED, State.LEASED): _rule(
        frozenset({State.READY}), Effect.ENDS_LEASE, Effect.FRONT
    ),
    (Event.CANCEL_REQUESTED, State.LEASED): _rule(frozenset({State.LEASED}), Effect.MARKS_CANCEL),
    **{
        (Event.CANCELLED, s): _rule(frozenset({State.CANCELLED}))
        for s in (State.DELAYED, State.READY, State.DEAD)
    },
    (Event.CANCELLED, State.LEASED): _rule(frozenset({State.CANCELLED}), Effect.ENDS_LEASE),
    (Event.REQUEUED, State.DEAD): _rule(
        frozenset({State.READY}), Effect.RESETS_ATTEMPTS, Effect.RESETS_LOSSES, Effect.SETS_DUE
    ),
    (Event.PURGED, State.DEAD): _rule(frozenset({State.CANCELLED})),
}

# The table without its effects: (event, state before) -> states it may lead to.
TRANSITIONS: dict[tuple[Event, State], frozenset[State]] = {
    pair: rule.targets for pair, rule in RULES.items()
}

Table = Mapping[tuple[Event, State], Rule]


class IllegalTransition(Exception):
    def __init__(self, event: Event, state: State, key: object = None) -> None:
        super().__init__(f"{event} is not legal from {state}" + (f" for {key}" if key else ""))
        self.event = event
        self.state = state


def rule_for(
    event: Event,
    before: State,
    after: State | None = None,
    key: object = None,
    table: Table = RULES,
) -> Rule:
    """The row for ``event`` from ``before``; IllegalTransition when there is none (or when it
    does not lead to ``after``)."""
    rule = table.get((event, before))
    if rule is None or (after is not None and after not in rule.targets):
        raise IllegalTransition(event, before, key)
    return rule


def check(event: Event, before: State, after: State | None = None, key: object = None) -> None:
    """Raises IllegalTransition unless the table allows ``event`` from ``before`` (to ``after``)."""
    rule_for(event, before, after, key)


def target(
    event: Event,
    before: State,
    due_ms: int | None = None,
    now_ms: int | None = None,
    key: object = None,
    table: Table = RULES,
) -> State:
    """The state ``event`` leads to from ``before``: the row's only target, or, where the row
    allows delayed and ready, ready when ``due_ms <= now_ms``."""
    targets = rule_for(event, before, key=key, table=table).targets
    if len(targets) == 1:
        return next(iter(targets))
    if targets != _BY_DUE or due_ms is None or now_ms is None:
        raise ValueError(f"{event} from {before} leads to one of {sorted(targets)}: which one?")
    return State.READY if due_ms <= now_ms else State.DELAYED


def sources(event: Event, table: Table = RULES) -> frozenset[State]:
    """The states ``event`` may leave from."""
    return frozenset(before for (e, before) in table if e is event)


def implied_before(event: Event, table: Table = RULES) -> State | None:
    """The state a job must have been in for ``event`` to happen, when only one is possible."""
    possible = sources(event, table)
    return next(iter(possible)) if len(possible) == 1 else None


def starts_record(event: Event, table: Table = RULES) -> bool:
    """True when ``event`` writes a fresh record, from whatever state (added, replaced)."""
    return any(e is event and Effect.NEW_RECORD in rule.effects for (e, _), rule in table.items())


class JobRecord(Protocol):
    """The fields of a job the lifecycle changes (the model's and the replay's jobs have them)."""

    state: State
    due_ms: int
    attempts_failed: int
    token: str | None
    deadline_ms: int | None
    cancel_requested: bool
    lost: int
    suspect: bool


@dataclass(frozen=True)
class Facts:
    """What the caller knows of one transition, for the effects that need it."""

    due_ms: int | None = None  # SETS_DUE
    token: str | None = None  # STARTS_LEASE, MOVES_DEADLINE
    deadline_ms: int | None = None  # STARTS_LEASE, MOVES_DEADLINE
    # COUNTS_ATTEMPT: the count after it, when the caller knows it (the audit's `a`); else +1.
    attempts_failed: int | None = None
    lost: int | None = None  # COUNTS_LOSS: the lost leases held against the job after it


NO_FACTS = Facts()  # for the transitions whose effects need none


def step(
    job: JobRecord,
    event: Event,
    after: State,
    facts: Facts = NO_FACTS,
    key: object = None,
    table: Table = RULES,
) -> Rule:
    """Moves ``job`` by ``event`` to ``after`` and applies the row's effects to its record.

    Raises (IllegalTransition, or ValueError when ``facts`` lack what an effect needs) before
    changing anything. Where the job sits (ready list, end) and NEW_RECORD / FRONT are the
    caller's: they are about the container, not the record.
    """
    rule = rule_for(event, job.state, after, key, table)
    effects = rule.effects
    if Effect.SETS_DUE in effects and facts.due_ms is None:
        raise ValueError(f"{event} sets the due time: due_ms is missing")
    if effects & {Effect.STARTS_LEASE, Effect.MOVES_DEADLINE} and (
        facts.token is None or facts.deadline_ms is None
    ):
        raise ValueError(f"{event} sets the lease: token and deadline_ms are missing")
    if Effect.COUNTS_LOSS in effects and facts.lost is None:
        raise ValueError(f"{event} counts a lost lease: lost is missing")
    if Effect.ENDS_LEASE in effects:
        job.token = job.deadline_ms = None
    if Effect.RESETS_ATTEMPTS in effects:
        job.attempts_failed = 0
    if Effect.COUNTS_ATTEMPT in effects:
        counted = facts.attempts_failed
        job.attempts_failed = job.attempts_failed + 1 if counted is None else counted
    if Effect.RESETS_LOSSES in effects:
        job.lost, job.suspect = 0, False
    if Effect.COUNTS_LOSS in effects:
        assert facts.lost is not None
        job.lost = facts.lost
    if Effect.CLEARS_CANCEL in effects:
        job.cancel_requested = False
    if Effect.MARKS_CANCEL in effects:
        job.cancel_requested = True
    if Effect.CLEARS_SUSPECT in effects:
        job.suspect = False
    if Effect.MARKS_SUSPECT in effects:
        job.suspect = True
    if Effect.SETS_DUE in effects:
        assert facts.due_ms is not None
        job.due_ms = facts.due_ms
    if effects & {Effect.STARTS_LEASE, Effect.MOVES_DEADLINE}:
        job.token, job.deadline_ms = facts.token, facts.deadline_ms
    job.state = after
    return rule


def lost_due(
    attempts_failed: int, schedule_ms: Sequence[int], now_ms: int, nth: int, spread_ms: int
) -> int:
    """Due time of a job whose lease was lost, the ``nth`` (from 1) its sweep ended: the delay its
    schedule gives after the running attempt (the schedule's last past its end; none without
    one), plus ``spread_ms`` for each job before it in the sweep, cycling every 100."""
    delay = schedule_ms[min(attempts_failed + 1, len(schedule_ms)) - 1] if schedule_ms else 0
    return now_ms + delay + ((nth - 1) % 100) * spread_ms


def next_retry(
    attempts_failed: int, schedule_ms: Sequence[int], now_ms: int, override_ms: int | None
) -> int | None:
    """Due time of the next attempt after attempt ``attempts_failed + 1`` failed; None = dead."""
    attempt = attempts_failed + 1
    if attempt > len(schedule_ms):
        return None
    delay = schedule_ms[attempt - 1] if override_ms is None else override_ms
    return now_ms + delay
