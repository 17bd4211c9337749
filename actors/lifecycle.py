"""The job lifecycle: its states, its events, and which event may move a job from which state.

Pure: no Redis, no threads. The model (:mod:`actors.model`), the replay of the audit stream
(:mod:`actors.replay`) and the values the store returns (:mod:`actors.values`) all spell states
and events with these enums.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum


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
    EXPIRED = "expired"
    DEAD = "dead"
    EXTENDED = "extended"
    RELEASED = "released"
    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel_requested"
    REQUEUED = "requeued"
    PURGED = "purged"
    REJECTED = "rejected"  # a stale token was refused; no state change


S, E = State, Event
# (event, state before) -> states it may lead to. The choice among several is the due time's:
# a job already due goes straight to ready.
TRANSITIONS: dict[tuple[Event, State], frozenset[State]] = {
    (E.ADDED, S.NEW): frozenset({S.DELAYED, S.READY}),
    **{
        (E.REPLACED, s): frozenset({S.DELAYED, S.READY})
        for s in (S.DELAYED, S.READY, S.LEASED, S.DEAD)
    },
    (E.READY, S.DELAYED): frozenset({S.READY}),
    (E.LEASED, S.READY): frozenset({S.LEASED}),
    (E.ACKED, S.LEASED): frozenset({S.ACKED}),
    (E.FAILED, S.LEASED): frozenset({S.DELAYED, S.READY}),
    (E.EXPIRED, S.LEASED): frozenset({S.DELAYED, S.READY}),
    (E.DEAD, S.LEASED): frozenset({S.DEAD}),
    (E.EXTENDED, S.LEASED): frozenset({S.LEASED}),
    (E.RELEASED, S.LEASED): frozenset({S.READY}),
    (E.CANCEL_REQUESTED, S.LEASED): frozenset({S.LEASED}),
    **{(E.CANCELLED, s): frozenset({S.CANCELLED}) for s in (S.DELAYED, S.READY, S.DEAD, S.LEASED)},
    (E.REQUEUED, S.DEAD): frozenset({S.READY}),
    (E.PURGED, S.DEAD): frozenset({S.CANCELLED}),
}

LIVE_STATES = frozenset({S.DELAYED, S.READY, S.LEASED, S.DEAD})


class IllegalTransition(Exception):
    def __init__(self, event: Event, state: State, key: object = None) -> None:
        super().__init__(f"{event} is not legal from {state}" + (f" for {key}" if key else ""))
        self.event = event
        self.state = state


def check(event: Event, before: State, after: State | None = None, key: object = None) -> None:
    """Raises IllegalTransition unless the table allows ``event`` from ``before`` (to ``after``)."""
    targets = TRANSITIONS.get((event, before))
    if targets is None or (after is not None and after not in targets):
        raise IllegalTransition(event, before, key)


def next_retry(
    attempts_failed: int, schedule_ms: Sequence[int], now_ms: int, override_ms: int | None
) -> int | None:
    """Due time of the next attempt after attempt ``attempts_failed + 1`` failed; None = dead."""
    attempt = attempts_failed + 1
    if attempt > len(schedule_ms):
        return None
    delay = schedule_ms[attempt - 1] if override_ms is None else override_ms
    return now_ms + delay
