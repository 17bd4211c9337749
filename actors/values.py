"""The values redelay passes around: jobs to add, leases, job snapshots, topic settings.

Pure dataclasses: no Redis, no threads, so every layer (and a user's type hints) can import them
without pulling in the Redis client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from actors import _validation as validation
from actors._constants import (
    DEFAULT_AUDIT_MAXLEN,
    DEFAULT_LEASE_MS,
    DEFAULT_LOST_MAX,
    DEFAULT_RETRY_SCHEDULE_MS,
)
from actors._frozen import slot_setters
from actors.lifecycle import State

# One audit stream entry: its id and its fields (e, t, i, a, ms, then the event's own).
AuditEntry = tuple[str, dict[str, str]]


@dataclass(frozen=True, slots=True)
class AuditRetention:
    """How the audit stream is trimmed; Redis trims approximately (whole nodes, ``~``).

    ``kind`` "MAXLEN" keeps about ``maxlen`` entries; "MINID" keeps about ``retention_ms`` of
    history, counted back from the newest entry's id (the Redis server's clock, not the
    caller's); "NONE" keeps everything.
    """

    kind: Literal["MAXLEN", "MINID", "NONE"] = "MAXLEN"
    maxlen: int = DEFAULT_AUDIT_MAXLEN
    retention_ms: int = 7 * 24 * 3600 * 1000

    def args(self, now_ms: int) -> tuple[str, str]:
        if self.kind == "MAXLEN":
            return "MAXLEN", str(self.maxlen)
        if self.kind == "MINID":
            # The script measures from the id it writes; now_ms (the caller's clock) may be skewed.
            return "MINID", str(self.retention_ms)
        return "NONE", "0"


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to add, already validated (use :meth:`Store.new_job` to build one)."""

    topic: str
    id: str
    body: bytes
    due_ms: int
    retry_ms: tuple[int, ...] | None = None
    lease_ms: int | None = None
    callback: str | None = None
    traceparent: str | None = None  # the W3C context of its producer span (actors.tracing)
    # Set when the job was given a delay (none: due now) rather than an absolute time: the
    # scripts then count it from the server's now, and ``due_ms`` is the caller's estimate.
    delay_ms: int | None = None


@dataclass(frozen=True, slots=True, init=False)
class Lease:
    """A job handed to a consumer. ``attempt`` counts from 1."""

    topic: str
    id: str
    token: str
    deadline_ms: int
    body: bytes
    attempt: int
    due_ms: int
    callback: str | None
    lease_ms: int | None
    traceparent: str | None = None  # the W3C context its add stored (actors.tracing)

    def __init__(
        self,
        topic: str,
        id: str,
        token: str,
        deadline_ms: int,
        body: bytes,
        attempt: int,
        due_ms: int,
        callback: str | None,
        lease_ms: int | None,
        traceparent: str | None = None,
    ) -> None:
        # One per leased job: by hand, as the generated one is slower (actors/_frozen.py).
        (
            set_topic,
            set_id,
            set_token,
            set_deadline_ms,
            set_body,
            set_attempt,
            set_due_ms,
            set_callback,
            set_lease_ms,
            set_traceparent,
        ) = _LEASE_SETTERS
        set_topic(self, topic)
        set_id(self, id)
        set_token(self, token)
        set_deadline_ms(self, deadline_ms)
        set_body(self, body)
        set_attempt(self, attempt)
        set_due_ms(self, due_ms)
        set_callback(self, callback)
        set_lease_ms(self, lease_ms)
        set_traceparent(self, traceparent)

    @property
    def key(self) -> tuple[str, str]:
        return (self.topic, self.id)


_LEASE_SETTERS = slot_setters(Lease)


@dataclass(frozen=True, slots=True)
class Swept:
    """What one carry or expire did over every shard: jobs moved, the next due time or lease
    deadline (None: none left), and how long until then by the clock the scripts judged by (the
    server's), so a sleep timed from it wakes neither early nor late whatever the local clock
    says (``Store.carry_swept``, ``Store.expire_swept``)."""

    moved: int
    next_ms: int | None
    next_in_ms: int | None
    now_ms: int | None = None  # the time the scripts judged by (the latest shard's)


@dataclass(frozen=True, slots=True)
class LeaseBatch:
    """What one lease call got: the leases, and how long the topic's gate asks the caller to wait
    before the next call (``Store.lease_batch``). ``wait_ms`` is 0 when no gate held jobs back,
    None when the topic is paused (wait for its resume notice), else milliseconds."""

    leases: list[Lease]
    wait_ms: int | None = 0

    @property
    def paused(self) -> bool:
        return self.wait_ms is None


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """A topic's limits for every process of the namespace (``DelayQueue.limit``): at most
    ``rate[0]`` jobs leased per ``rate[1]`` seconds, at most ``max_in_flight`` leased at once.
    None: no such limit."""

    rate: tuple[int, float] | None = None
    max_in_flight: int | None = None


@dataclass(frozen=True, slots=True)
class JobInfo:
    topic: str
    id: str
    state: State  # one of LIVE_STATES
    due_ms: int
    attempt: int  # the attempt that is next or running, from 1 (for a dead job: the last one)
    attempts_failed: int
    body_bytes: bytes  # the body as stored (UTF-8 JSON)
    created_ms: int
    token: str | None = None
    lease_deadline_ms: int | None = None
    dead_since_ms: int | None = None
    cancel_requested: bool = False
    callback: str | None = None
    retry_ms: tuple[int, ...] | None = None
    traceback: str | None = None  # the end of the last failed attempt's traceback, if it had one
    lost: int = 0  # lost leases held against it (lua/_lost.lua)
    suspect: bool = False  # its lease was lost: it runs alone until an attempt ends
    quarantined: bool = False  # dead because its worker was lost `lost` times while it ran alone

    @property
    def body(self) -> Any:
        """The body, decoded as :attr:`actors.job.Job.body` is (on each access: a snapshot of
        many jobs does not pay for bodies nobody reads)."""
        return orjson.loads(self.body_bytes)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    retry_ms: tuple[int, ...] = DEFAULT_RETRY_SCHEDULE_MS
    lease_ms: int = DEFAULT_LEASE_MS
    lost_max: int = DEFAULT_LOST_MAX  # lost leases held against a job before it is quarantined


@dataclass(slots=True)
class Snapshot:
    """Every job's live state, read for comparisons (O(jobs); not for hot paths)."""

    jobs: dict[tuple[str, str], JobInfo] = field(default_factory=dict)
    # Jobs the scripts could never have left this way: in two structures or none, a member
    # without a record, a token without a lease. Empty unless Redis was changed behind them.
    problems: dict[tuple[str, str], list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Durability:
    """Adds return only once ``replicas`` replicas hold them (Redis ``WAIT``), or raise.

    Replication is asynchronous: without this an add acknowledged by a master that dies before
    its replica got it is lost. ``timeout_ms`` bounds the wait; on timeout the job stays added
    on the master and :class:`NotReplicatedError` is raised.
    """

    replicas: int = 1
    timeout_ms: int = 1_000

    def __post_init__(self) -> None:
        validation.count(self.replicas, "replicas", 100)
        validation.count(self.timeout_ms, "timeout_ms", 60_000)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a topic's jobs in one state (``DelayQueue.jobs``, ``Store.jobs``).

    ``next_after`` is the cursor to pass as ``after`` for the next page, or None when this page
    is the last. A page may hold fewer jobs than asked for while more follow: the cursor, not
    the page's length, says when to stop.
    """

    jobs: tuple[JobInfo, ...]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live worker process, from its heartbeat (``DelayQueue.workers``).

    ``busy_slots`` of ``slots`` handler slots were running jobs at ``beat_ms``; a worker whose
    heartbeat expired (it crashed, or lost Redis) is not listed at all.
    """

    name: str
    host: str
    pid: int
    topics: tuple[str, ...]
    busy_slots: int
    slots: int
    started_ms: int
    beat_ms: int
