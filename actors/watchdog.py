"""Watchdog: the backstop. Every ``interval_ms`` it forces a carry, and it supervises.

An actor that dies (its ``on_failure`` tells us ActorDied, and the tick also checks
``is_alive``) is restarted from its factory and the restart is logged and counted. A topic's
listener and pool are one unit: when either dies both are replaced, because the listener's free
slots only make sense for the pool it was counting for. Jobs the dead pool held come back when
their leases expire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pykka

from ._actor import RedelayActor
from ._messages import ActorDied, Carry, Health, WatchdogTick
from .clock import Clock

log = logging.getLogger("actors.watchdog")

# Builds a unit's actors; receives the watchdog's ref to pass on as their supervisor.
Factory = Callable[[pykka.ActorRef[Any]], dict[str, pykka.ActorRef[Any]]]


@dataclass(frozen=True, slots=True)
class Supervise:
    """Watchdog (ask): start a unit of actors from ``factory`` and keep it alive."""

    unit: str
    factory: Factory


@dataclass(frozen=True, slots=True)
class CurrentRefs:
    """Watchdog (ask): the refs of every unit, as they are now (for shutdown)."""


@dataclass(slots=True)
class _Unit:
    factory: Factory
    refs: dict[str, pykka.ActorRef[Any]]
    restarts: int = 0
    last_error: str = ""
    errors: list[str] = field(default_factory=list)


class Watchdog(RedelayActor):
    def __init__(self, clock: Clock, *, interval_ms: int = 60_000, carrier: str = "carrier"):
        super().__init__("watchdog", clock, None)
        self.interval_ms = interval_ms
        self.carrier_name = carrier
        self.units: dict[str, _Unit] = {}
        self.ticks = 0

    def on_start(self) -> None:
        self.tell_later(self.interval_ms, WatchdogTick())

    def on_stop(self) -> None:
        super().on_stop()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Supervise):
            refs = message.factory(self.actor_ref)
            self.units[message.unit] = _Unit(message.factory, refs)
            return refs
        if isinstance(message, WatchdogTick):
            self._tick()
        elif isinstance(message, ActorDied):
            self._died(message.name, message.error)
        elif isinstance(message, Health):
            return self._health()
        elif isinstance(message, CurrentRefs):
            return {unit: dict(u.refs) for unit, u in self.units.items()}
        return None

    def _tick(self) -> None:
        self.ticks += 1
        for unit in self.units.values():
            ref = unit.refs.get(self.carrier_name)
            if ref is not None and ref.is_alive():
                ref.tell(Carry("watchdog"))
        for name, unit in self.units.items():
            dead = [actor for actor, ref in unit.refs.items() if not ref.is_alive()]
            if dead:
                self._restart(name, unit, f"{', '.join(dead)} found dead")
        self.tell_later(self.interval_ms, WatchdogTick())

    def _died(self, actor: str, error: str) -> None:
        for name, unit in self.units.items():
            if actor in unit.refs:
                self._restart(name, unit, f"{actor}: {error}")
                return

    def _restart(self, name: str, unit: _Unit, why: str) -> None:
        for ref in unit.refs.values():
            if ref.is_alive():
                ref.stop(block=False)
        unit.restarts += 1
        unit.last_error = why
        unit.errors = [*unit.errors[-9:], why]
        log.warning("restarting %s (restart #%d): %s", name, unit.restarts, why)
        unit.refs = unit.factory(self.actor_ref)

    def _health(self) -> dict[str, Any]:
        return {
            name: {
                "alive": all(ref.is_alive() for ref in unit.refs.values()),
                "restarts": unit.restarts,
                "last_error": unit.last_error,
            }
            for name, unit in self.units.items()
        }
