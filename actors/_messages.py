"""Messages the actors send each other. Every message between actors is a `tell`;
`ask` is kept for the outside world (the facade, tests, the shutdown sequence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pykka

from .store import Lease


@dataclass(frozen=True, slots=True)
class Carry:
    """Carrier: move due jobs now. ``reason`` shows in logs (timer, wake, watchdog, retry)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Wake:
    """Carrier: a delayed job due at ``due_ms`` was added (maybe by another process)."""

    due_ms: int


@dataclass(frozen=True, slots=True)
class Sweep:
    """RetrySweeper: recover expired leases now."""


@dataclass(frozen=True, slots=True)
class Fetch:
    """TopicListener: lease what the pool can take; block on Redis when nothing is ready."""


@dataclass(frozen=True, slots=True)
class SlotsFreed:
    """TopicListener: the pool finished ``count`` jobs, so it can take that many more."""

    count: int


@dataclass(frozen=True, slots=True)
class StopFetching:
    """TopicListener: lease nothing more (shutdown)."""


@dataclass(frozen=True, slots=True)
class Run:
    """ConsumerPool: start these leased jobs."""

    leases: tuple[Lease, ...]


@dataclass(frozen=True, slots=True)
class Finished:
    """ConsumerPool (from a handler thread): a job's handler returned or raised."""

    key: tuple[str, str]
    token: str
    ok: bool
    detail: str = ""
    retry_after_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Flush:
    """ConsumerPool: ack and fail what finished, in one round trip each."""


@dataclass(frozen=True, slots=True)
class CheckRunning:
    """ConsumerPool: time out overrunning handlers and extend leases of long ones."""


@dataclass(frozen=True, slots=True)
class SetListener:
    """ConsumerPool: where to send SlotsFreed."""

    listener: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class Drain:
    """ConsumerPool (shutdown): release jobs not started; resolve ``idle`` when nothing runs."""

    idle: pykka.Future[int] = field(default_factory=pykka.ThreadingFuture)


@dataclass(frozen=True, slots=True)
class WatchdogTick:
    """Watchdog: force a carry and check every supervised actor."""


@dataclass(frozen=True, slots=True)
class ActorDied:
    """Watchdog: a supervised actor stopped with an error."""

    name: str
    error: str


@dataclass(frozen=True, slots=True)
class Health:
    """Watchdog (ask): a report of every supervised actor."""


@dataclass(frozen=True, slots=True)
class Stats:
    """Any actor (ask): its counters."""
