"""The job lifecycle as a small pure model: no Redis, no threads.

It is the oracle the stateful tests compare the Lua scripts against, the rule book the replay
checks the audit stream with, and the source of the state diagram and the effects table in
docs/lifecycle.md (``python -m actors.model`` prints the diagram, ``python -m actors.model
--effects`` the table). Every transition goes through the table in :mod:`actors.lifecycle`: an
illegal transition raises IllegalTransition and changes nothing.
"""

from __future__ import annotations

import sys
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from actors._constants import DEFAULT_LEASE_MS, DEFAULT_LOST_MAX, LOST_SPREAD_MS
from actors.lifecycle import (
    END_STATES,
    LIVE_STATES,
    NO_FACTS,
    RULES,
    TRANSITIONS,
    Effect,
    Event,
    Facts,
    IllegalTransition,
    Rule,
    State,
    Table,
    check,
    lost_due,
    next_retry,
    step,
    target,
)

S, E = State, Event

__all__ = [
    "LIVE_STATES",
    "RULES",
    "TRANSITIONS",
    "Effect",
    "Event",
    "IllegalTransition",
    "Model",
    "ModelJob",
    "Rule",
    "State",
    "check",
    "effects_table",
    "next_retry",
    "state_diagram",
]


Key = tuple[str, str]


@dataclass
class ModelJob:
    topic: str
    id: str
    state: State
    due_ms: int
    attempts_failed: int = 0
    retry_ms: tuple[int, ...] | None = None
    lease_ms: int | None = None
    token: str | None = None
    deadline_ms: int | None = None
    cancel_requested: bool = False
    lost: int = 0  # lost leases held against it
    suspect: bool = False  # its lease was lost; it runs alone until an attempt ends

    @property
    def key(self) -> Key:
        return (self.topic, self.id)

    @property
    def member(self) -> str:
        return f"{self.topic}|{self.id}"


@dataclass(frozen=True)
class _Move:
    """One planned transition: checked against the table before anything changes."""

    job: ModelJob
    event: Event
    after: State
    facts: Facts = NO_FACTS


@dataclass
class Model:
    """The expected state of one shard, applying the same rules the scripts do."""

    topic_retry_ms: dict[str, tuple[int, ...]] = field(default_factory=dict)
    topic_lease_ms: dict[str, int] = field(default_factory=dict)
    topic_lost_max: dict[str, int] = field(default_factory=dict)
    jobs: dict[Key, ModelJob] = field(default_factory=dict)
    ready: dict[str, deque[Key]] = field(default_factory=dict)
    done: dict[Key, State] = field(default_factory=dict)  # last end state of removed jobs
    paused: set[str] = field(default_factory=set)  # topics no lease takes from
    # The suspect each consumer was last leased, with its token: while that lease holds, the
    # consumer is leased nothing else.
    suspect_of: dict[str, tuple[Key, str]] = field(default_factory=dict)
    # How often each row of the table was applied (the replay of the audit counts the same).
    transitions: Counter[tuple[Event, State]] = field(default_factory=Counter)
    # The table every transition is checked against and takes its effects from.
    table: Table = field(default_factory=lambda: RULES, repr=False, compare=False)

    # -- the table ----------------------------------------------------------------------------

    def _plan(
        self,
        job: ModelJob,
        event: Event,
        facts: Facts = NO_FACTS,
        now_ms: int | None = None,
    ) -> _Move:
        """Raises IllegalTransition unless the table allows ``event`` from the job's state."""
        after = target(event, job.state, facts.due_ms, now_ms, job.key, self.table)
        return _Move(job, event, after, facts)

    def _commit(self, moves: Iterable[_Move]) -> None:
        """Applies planned moves (all of them planned before the first is applied)."""
        for move in moves:
            job, before = move.job, move.job.state
            key = job.key
            rule = step(job, move.event, move.after, move.facts, key, self.table)
            self.transitions[(move.event, before)] += 1
            # A new record re-enters its structure even when its state stays the same.
            moved = before is not move.after or Effect.NEW_RECORD in rule.effects
            if moved and before is S.READY:
                self.ready[job.topic].remove(key)
            if move.after in END_STATES:
                self.jobs.pop(key, None)
                self.done[key] = move.after
                continue
            self.jobs[key] = job
            self.done.pop(key, None)
            if moved and move.after is S.READY:
                queue = self.ready.setdefault(job.topic, deque())
                if Effect.FRONT in rule.effects:
                    queue.appendleft(key)
                else:
                    queue.append(key)

    def _apply(
        self, job: ModelJob, event: Event, facts: Facts = NO_FACTS, now_ms: int | None = None
    ) -> State:
        move = self._plan(job, event, facts, now_ms)
        self._commit([move])
        return move.after

    # -- helpers ----------------------------------------------------------------------------

    def _schedule(self, job: ModelJob) -> tuple[int, ...]:
        return job.retry_ms or self.topic_retry_ms.get(job.topic, ())

    def state_of(self, key: Key) -> State:
        job = self.jobs.get(key)
        if job is not None:
            return job.state
        return self.done.get(key, S.NEW)

    def token_ok(self, key: Key, token: str) -> bool:
        job = self.jobs.get(key)
        return job is not None and job.state is S.LEASED and job.token == token

    # -- transitions ------------------------------------------------------------------------

    def add(
        self,
        key: Key,
        due_ms: int,
        now_ms: int,
        retry_ms: tuple[int, ...] | None = None,
        lease_ms: int | None = None,
        replace: bool = False,
    ) -> State:
        """Returns the state the job had before (NEW when it did not exist).

        Adding a job that exists without ``replace`` is an ``added`` from a live state: illegal.
        """
        old = self.jobs.get(key)
        before = S.NEW if old is None else old.state
        event = E.REPLACED if replace and old is not None else E.ADDED
        fresh = ModelJob(key[0], key[1], before, due_ms, 0, retry_ms, lease_ms)
        self._apply(fresh, event, Facts(due_ms=due_ms), now_ms)
        return before

    def carry(self, now_ms: int, limit: int) -> list[Key]:
        due = sorted(
            (j for j in self.jobs.values() if j.state is S.DELAYED and j.due_ms <= now_ms),
            key=lambda j: (j.due_ms, j.member.encode()),
        )[:limit]
        self._commit([self._plan(job, E.READY) for job in due])
        return [job.key for job in due]

    def pause(self, topic: str, paused: bool) -> bool:
        """Pauses or resumes a topic (no job changes state); True when that changed it."""
        if (topic in self.paused) == paused:
            return False
        if paused:
            self.paused.add(topic)
        else:
            self.paused.discard(topic)
        return True

    def runs_suspect(self, consumer: str) -> bool:
        """True while the suspect ``consumer`` was last leased still holds that lease."""
        held = self.suspect_of.get(consumer)
        return held is not None and self.token_ok(*held)

    def lease(
        self, topic: str, now_ms: int, limit: int, tokens: Iterable[str], consumer: str = ""
    ) -> list[Key]:
        """Up to ``limit`` of the topic's ready jobs, oldest first; none while it is paused or
        while ``consumer`` runs a suspect. A suspect is taken only first, and alone: the batch
        ends before a suspect behind other jobs, and after one taken."""
        if topic in self.paused or self.runs_suspect(consumer):
            return []
        queue = self.ready.get(topic, deque())
        moves: list[_Move] = []
        suspect: tuple[Key, str] | None = None
        for key, token in zip(list(queue)[:limit], tokens, strict=False):
            job = self.jobs[key]
            if job.suspect and moves:
                break
            lease_ms = job.lease_ms or self.topic_lease_ms.get(topic, DEFAULT_LEASE_MS)
            facts = Facts(token=token, deadline_ms=now_ms + lease_ms)
            moves.append(self._plan(job, E.LEASED, facts))
            if job.suspect:
                suspect = (key, token)
                break
        self._commit(moves)
        if suspect is not None:
            self.suspect_of[consumer] = suspect
        return [move.job.key for move in moves]

    def ack(self, key: Key, token: str) -> bool:
        if not self.token_ok(key, token):
            return False
        self._apply(self.jobs[key], E.ACKED)
        return True

    def _plan_failed_attempt(
        self, job: ModelJob, now_ms: int, event: Event, override_ms: int | None
    ) -> _Move:
        """A failed (or expired) attempt: retried on the schedule, dead, or cancelled if asked."""
        if job.cancel_requested:
            return self._plan(job, E.CANCELLED)
        due = next_retry(job.attempts_failed, self._schedule(job), now_ms, override_ms)
        if due is None:
            return self._plan(job, E.DEAD)
        return self._plan(job, event, Facts(due_ms=due), now_ms)

    def fail(
        self, key: Key, token: str, now_ms: int, override_ms: int | None = None
    ) -> State | None:
        if not self.token_ok(key, token):
            return None
        move = self._plan_failed_attempt(self.jobs[key], now_ms, E.FAILED, override_ms)
        self._commit([move])
        return move.after

    def expire(self, now_ms: int, limit: int) -> list[Key]:
        expired = sorted(
            (
                j
                for j in self.jobs.values()
                if j.state is S.LEASED and j.deadline_ms is not None and j.deadline_ms <= now_ms
            ),
            key=lambda j: (j.deadline_ms, j.member.encode()),
        )[:limit]
        self._commit([self._plan_lost(j, now_ms, nth) for nth, j in enumerate(expired, 1)])
        keys = {job.key for job in expired}
        for consumer, (key, _) in list(self.suspect_of.items()):
            if key in keys:  # its consumer's mark goes with the lease
                del self.suspect_of[consumer]
        return [job.key for job in expired]

    def _plan_lost(self, job: ModelJob, now_ms: int, nth: int) -> _Move:
        """A lease that expired: lost, held against the job when it ran as a suspect, which
        quarantines it at the topic's lost_max; removed if its cancel was asked."""
        if job.cancel_requested:
            return self._plan(job, E.CANCELLED)
        lost = job.lost + (1 if job.suspect else 0)
        lost_max = self.topic_lost_max.get(job.topic, DEFAULT_LOST_MAX)
        if job.suspect and lost >= lost_max:
            return self._plan(job, E.QUARANTINED, Facts(lost=lost))
        due = lost_due(job.attempts_failed, self._schedule(job), now_ms, nth, LOST_SPREAD_MS)
        return self._plan(job, E.LOST, Facts(due_ms=due, lost=lost), now_ms)

    def extend(self, key: Key, token: str, now_ms: int, extend_ms: int) -> bool:
        if not self.token_ok(key, token):
            return False
        self._apply(self.jobs[key], E.EXTENDED, Facts(token=token, deadline_ms=now_ms + extend_ms))
        return True

    def release(self, key: Key, token: str, now_ms: int) -> bool:
        if not self.token_ok(key, token):
            return False
        job = self.jobs[key]
        self._apply(job, E.CANCELLED if job.cancel_requested else E.RELEASED)
        return True

    def cancel(self, key: Key) -> str:
        job = self.jobs.get(key)
        if job is None:
            return "missing"
        if job.state is S.LEASED:
            if not job.cancel_requested:  # a repeated request is no transition
                self._apply(job, E.CANCEL_REQUESTED)
            return "requested"
        self._apply(job, E.CANCELLED)
        return "removed"

    def requeue(self, key: Key, now_ms: int) -> bool:
        job = self.jobs.get(key)
        if job is None or job.state is not S.DEAD:
            return False
        self._apply(job, E.REQUEUED, Facts(due_ms=now_ms), now_ms)
        return True

    def purge(self, key: Key) -> bool:
        job = self.jobs.get(key)
        if job is None or job.state is not S.DEAD:
            return False
        self._apply(job, E.PURGED)
        return True


def state_diagram() -> str:
    """The lifecycle as a Mermaid state diagram, drawn from TRANSITIONS."""
    lines = ["stateDiagram-v2"]
    for (event, before), targets in TRANSITIONS.items():
        for after in sorted(targets):
            src = "[*]" if before is S.NEW else before.value
            dst = "[*]" if after in END_STATES else after.value
            label = event.value if after not in END_STATES else f"{event.value} ({after})"
            lines.append(f"    {src} --> {dst}: {label}")
    return "\n".join(lines)


def _either(states: Iterable[State]) -> str:
    names = [state.value for state in states]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def effects_table() -> str:
    """The table with its effects, as a Markdown table: one line per event and rule, the states
    that share a rule on one line."""
    grouped: dict[tuple[Event, Rule], list[State]] = {}
    for (event, before), rule in RULES.items():
        grouped.setdefault((event, rule), []).append(before)
    lines = ["| Event | From | To | Effects on the record |", "|---|---|---|---|"]
    for (event, rule), befores in grouped.items():
        targets = [state for state in State if state in rule.targets]
        effects = ", ".join(effect.value for effect in Effect if effect in rule.effects)
        lines.append(f"| `{event}` | {_either(befores)} | {_either(targets)} | {effects or '-'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(effects_table() if sys.argv[1:] == ["--effects"] else state_diagram())
