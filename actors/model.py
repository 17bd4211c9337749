"""The job lifecycle as a small pure model: no Redis, no threads.

It is the oracle the stateful tests compare the Lua scripts against, the rule book the replay
checks the audit stream with, and the source of the state diagram in docs/lifecycle.md
(``python -m actors.model`` prints it). An illegal transition raises and changes nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from actors import _constants as c
from actors.lifecycle import (
    LIVE_STATES,
    TRANSITIONS,
    Event,
    IllegalTransition,
    State,
    check,
    next_retry,
)

S, E = State, Event

__all__ = [
    "LIVE_STATES",
    "TRANSITIONS",
    "Event",
    "IllegalTransition",
    "Model",
    "ModelJob",
    "State",
    "check",
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

    @property
    def member(self) -> str:
        return f"{self.topic}|{self.id}"


@dataclass
class Model:
    """The expected state of one shard, applying the same rules the scripts do."""

    topic_retry_ms: dict[str, tuple[int, ...]] = field(default_factory=dict)
    topic_lease_ms: dict[str, int] = field(default_factory=dict)
    jobs: dict[Key, ModelJob] = field(default_factory=dict)
    ready: dict[str, deque[Key]] = field(default_factory=dict)
    done: dict[Key, State] = field(default_factory=dict)  # last end state of removed jobs

    # -- helpers ----------------------------------------------------------------------------

    def _place(self, job: ModelJob, now_ms: int, front: bool = False) -> None:
        if job.due_ms <= now_ms:
            job.state = S.READY
            queue = self.ready.setdefault(job.topic, deque())
            if front:
                queue.appendleft((job.topic, job.id))
            else:
                queue.append((job.topic, job.id))
        else:
            job.state = S.DELAYED

    def _remove(self, key: Key, end: State) -> None:
        job = self.jobs.pop(key)
        if job.state == S.READY:
            self.ready[job.topic].remove(key)
        self.done[key] = end

    def _schedule(self, job: ModelJob) -> tuple[int, ...]:
        return job.retry_ms or self.topic_retry_ms.get(job.topic, ())

    def state_of(self, key: Key) -> State:
        job = self.jobs.get(key)
        if job is not None:
            return job.state
        return self.done.get(key, S.NEW)

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
        """Returns the state the job had before (NEW when it did not exist)."""
        before = self.state_of(key) if key in self.jobs else S.NEW
        if before != S.NEW and not replace:
            raise IllegalTransition(E.ADDED, before, key)
        if before != S.NEW:
            check(E.REPLACED, before, key=key)
            self._remove(key, S.CANCELLED)
        self.done.pop(key, None)
        job = ModelJob(key[0], key[1], S.NEW, due_ms, 0, retry_ms, lease_ms)
        self.jobs[key] = job
        self._place(job, now_ms)
        return before

    def carry(self, now_ms: int, limit: int) -> list[Key]:
        due = sorted(
            (j for j in self.jobs.values() if j.state == S.DELAYED and j.due_ms <= now_ms),
            key=lambda j: (j.due_ms, j.member.encode()),
        )[:limit]
        for job in due:
            job.state = S.READY
            self.ready.setdefault(job.topic, deque()).append((job.topic, job.id))
        return [(j.topic, j.id) for j in due]

    def lease(self, topic: str, now_ms: int, limit: int, tokens: Iterable[str]) -> list[Key]:
        queue = self.ready.setdefault(topic, deque())
        taken: list[Key] = []
        for token in tokens:
            if not queue or len(taken) >= limit:
                break
            key = queue.popleft()
            job = self.jobs[key]
            job.state = S.LEASED
            job.token = token
            lease = job.lease_ms or self.topic_lease_ms.get(topic, c.DEFAULT_LEASE_MS)
            job.deadline_ms = now_ms + lease
            taken.append(key)
        return taken

    def token_ok(self, key: Key, token: str) -> bool:
        job = self.jobs.get(key)
        return job is not None and job.state == S.LEASED and job.token == token

    def _end_lease(self, job: ModelJob) -> None:
        job.token = None
        job.deadline_ms = None

    def ack(self, key: Key, token: str) -> bool:
        if not self.token_ok(key, token):
            return False
        self._remove(key, S.ACKED)
        return True

    def _failed_attempt(self, job: ModelJob, now_ms: int, override_ms: int | None) -> State:
        self._end_lease(job)
        key = (job.topic, job.id)
        if job.cancel_requested:
            self._remove(key, S.CANCELLED)
            return S.CANCELLED
        due = next_retry(job.attempts_failed, self._schedule(job), now_ms, override_ms)
        job.attempts_failed += 1
        if due is None:
            job.state = S.DEAD
            return S.DEAD
        job.due_ms = due
        self._place(job, now_ms)
        return job.state

    def fail(
        self, key: Key, token: str, now_ms: int, override_ms: int | None = None
    ) -> State | None:
        if not self.token_ok(key, token):
            return None
        return self._failed_attempt(self.jobs[key], now_ms, override_ms)

    def expire(self, now_ms: int, limit: int) -> list[Key]:
        expired = sorted(
            (
                j
                for j in self.jobs.values()
                if j.state == S.LEASED and j.deadline_ms is not None and j.deadline_ms <= now_ms
            ),
            key=lambda j: (j.deadline_ms, j.member.encode()),
        )[:limit]
        for job in expired:
            self._failed_attempt(job, now_ms, None)
        return [(j.topic, j.id) for j in expired]

    def extend(self, key: Key, token: str, now_ms: int, extend_ms: int) -> bool:
        if not self.token_ok(key, token):
            return False
        self.jobs[key].deadline_ms = now_ms + extend_ms
        return True

    def release(self, key: Key, token: str, now_ms: int) -> bool:
        if not self.token_ok(key, token):
            return False
        job = self.jobs[key]
        self._end_lease(job)
        if job.cancel_requested:
            self._remove(key, S.CANCELLED)
        else:
            job.state = S.READY
            self.ready.setdefault(job.topic, deque()).appendleft(key)
        return True

    def cancel(self, key: Key) -> str:
        job = self.jobs.get(key)
        if job is None:
            return "missing"
        if job.state == S.LEASED:
            job.cancel_requested = True
            return "requested"
        self._remove(key, S.CANCELLED)
        return "removed"

    def requeue(self, key: Key, now_ms: int) -> bool:
        job = self.jobs.get(key)
        if job is None or job.state != S.DEAD:
            return False
        job.attempts_failed = 0
        job.due_ms = now_ms
        self._place(job, now_ms)
        return True

    def purge(self, key: Key) -> bool:
        job = self.jobs.get(key)
        if job is None or job.state != S.DEAD:
            return False
        self._remove(key, S.CANCELLED)
        return True


def state_diagram() -> str:
    """The lifecycle as a Mermaid state diagram, drawn from TRANSITIONS."""
    lines = ["stateDiagram-v2"]
    for (event, before), targets in TRANSITIONS.items():
        for after in sorted(targets):
            src = "[*]" if before == S.NEW else before.value
            dst = "[*]" if after in (S.ACKED, S.CANCELLED) else after.value
            label = (
                event.value if after not in (S.ACKED, S.CANCELLED) else f"{event.value} ({after})"
            )
            lines.append(f"    {src} --> {dst}: {label}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(state_diagram())
