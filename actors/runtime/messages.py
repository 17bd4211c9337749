"""Messages the actors send each other. Every message between actors is a `tell`;
`ask` is kept for the outside world (the facade, tests, the shutdown sequence).

docs/concepts.md has the table of who sends what to whom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pykka

from actors.values import Lease

# Builds a unit's actors; receives the watchdog's ref to pass on as their supervisor.
Factory = Callable[[pykka.ActorRef[Any]], dict[str, pykka.ActorRef[Any]]]


@dataclass(frozen=True, slots=True)
class Carry:
    """Carrier: move due jobs now. ``reason`` is counted in its stats (start, timer, wake,
    watchdog, resubscribed, more, retry)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Wake:
    """Carrier (from the process's ShardNotifier): a delayed job due at ``due_ms`` became the
    earliest one (maybe added by another process)."""

    due_ms: int


@dataclass(frozen=True, slots=True)
class Sweep:
    """RetrySweeper: recover expired leases now."""


@dataclass(frozen=True, slots=True)
class Fetch:
    """TopicListener: lease what the pool can take; wait for a ReadyNotice when nothing is
    ready."""


@dataclass(frozen=True, slots=True)
class LookAgain:
    """TopicListener (from its own timer): the backstop look for a ready notice lost anyway, a
    Fetch once ``look_interval_s`` has passed since the listener last began to wait."""


@dataclass(frozen=True, slots=True)
class ReadyNotice:
    """TopicListener (from the process's ShardNotifier): its topic may have ready jobs. Unlike a
    Fetch it is folded into the one the listener may already have queued, so a burst of notices
    cannot flood its mailbox and hold up the SlotsFreed behind them."""


@dataclass(frozen=True, slots=True)
class SlotsFreed:
    """TopicListener: the pool finished ``count`` jobs, so it can take that many more."""

    count: int


@dataclass(frozen=True, slots=True)
class StopFetching:
    """TopicListener (ask, shutdown): lease nothing more; answers its free slots."""


class Refill(NamedTuple):
    """What a pool needs to lease for itself (see Run): the consumer name its leases carry, and
    the most jobs one lease may take."""

    consumer: str
    batch_max: int


@dataclass(frozen=True, slots=True)
class Run:
    """ConsumerPool: start these leased jobs. Each Run also says whether the pool refills: with
    ``refill`` (the listener's lease was full and no gate held it back) the pool leases the slots
    its jobs free by itself, in the round trip of their acks, until one of its own leases comes
    back short or a Run without ``refill`` arrives (the listener sends an empty one when it is
    told StopFetching). Slots the pool does not fill go back to the listener with SlotsFreed."""

    leases: tuple[Lease, ...]
    refill: Refill | None = None


@dataclass(frozen=True, slots=True)
class Flush:
    """ConsumerPool: ack and fail what finished, in one round trip each. A handler's result is not
    a message of its own: it goes on the pool's result queue, and the first of a burst tells the
    pool this (see ConsumerPool._report)."""


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
class Supervise:
    """Watchdog (ask, at start): build a unit of actors from ``factory`` and keep it alive."""

    unit: str
    factory: Factory


@dataclass(frozen=True, slots=True)
class WatchdogTick:
    """Watchdog (from its clock timer): force a carry and check every supervised actor."""


@dataclass(frozen=True, slots=True)
class CheckUnits:
    """Watchdog (from its clock timer): restart the units that are dead (a delayed restart)."""


@dataclass(frozen=True, slots=True)
class ActorDied:
    """Watchdog: a supervised actor stopped with an error. ``urn`` names the very actor, so a
    death reported after its unit was already replaced restarts nothing."""

    name: str
    urn: str
    error: str


@dataclass(frozen=True, slots=True)
class Health:
    """Watchdog (ask): a report of every supervised unit."""


@dataclass(frozen=True, slots=True)
class CurrentRefs:
    """Watchdog (ask): the refs of every unit, as they are now."""


@dataclass(frozen=True, slots=True)
class StopSupervising:
    """Watchdog (ask, shutdown): restart nothing from now on; answers the refs of every unit."""


@dataclass(frozen=True, slots=True)
class Stats:
    """Any actor (ask): its counters."""
