"""Watchdog: the backstop. Every ``interval_ms`` it forces a carry, and it supervises.

An actor that dies (its ``on_failure`` or failed ``on_start`` tells us ActorDied, and every tick
also checks ``is_alive``) is restarted from its factory; the restart is logged and counted, and
health() shows it. A topic's listener and pool are one unit: when either dies both are replaced,
because the listener's free slots only make sense for the pool it was counting for. Jobs the
dead pool held come back when their leases expire (or at once, for jobs it had not started).

A unit that dies again within ``_CALM_MS`` of its last restart is restarted after a growing
delay, so a bug that kills an actor at start cannot spin a core. The watchdog itself catches
every error of its own: nothing restarts the supervisor, so it must not die.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pykka

from actors.clock import Clock
from actors.runtime._actor import RedelayActor
from actors.runtime._backoff import Backoff
from actors.runtime.messages import (
    ActorDied,
    Carry,
    CheckUnits,
    CurrentRefs,
    Factory,
    Health,
    Stats,
    StopSupervising,
    Supervise,
    WatchdogTick,
)

log = logging.getLogger("actors.watchdog")

# A unit that ran this long since its last restart is restarted at once when it dies again.
_CALM_MS = 10_000


@dataclass(slots=True)
class _Unit:
    factory: Factory
    refs: dict[str, pykka.ActorRef[Any]]
    restarts: int = 0
    last_error: str = ""
    last_restart_ms: int | None = None
    restart_at_ms: int | None = None  # a delayed restart is due then
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_ms=100, max_ms=30_000))

    def dead(self) -> list[str]:
        return [name for name, ref in self.refs.items() if not ref.is_alive()]


class Watchdog(RedelayActor):
    def __init__(self, clock: Clock, *, interval_ms: int = 60_000, carrier: str = "carrier"):
        super().__init__("watchdog", clock, None)
        self.interval_ms = interval_ms
        self.carrier_name = carrier
        self.units: dict[str, _Unit] = {}
        self.ticks = 0
        self.supervising = True

    def started(self) -> None:
        self.tell_later(self.interval_ms, WatchdogTick())

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Supervise):  # an ask: a failing factory fails start()
            refs = message.factory(self.actor_ref)
            self.units[message.unit] = _Unit(message.factory, refs)
            return refs
        if isinstance(message, Health):
            return self._health()
        if isinstance(message, CurrentRefs):
            return {unit: dict(u.refs) for unit, u in self.units.items()}
        if isinstance(message, StopSupervising):
            self.supervising = False
            self._cancel_timers()
            return {unit: dict(u.refs) for unit, u in self.units.items()}
        if isinstance(message, Stats):
            return {"ticks": self.ticks, "restarts": sum(u.restarts for u in self.units.values())}
        try:
            if isinstance(message, WatchdogTick):
                self._tick()
            elif isinstance(message, CheckUnits):
                self._check()
            elif isinstance(message, ActorDied):
                self._died(message)
        except Exception:
            log.exception("watchdog: handling %r failed; it keeps supervising", message)
        return None

    def _tick(self) -> None:
        if not self.supervising:
            return
        self.ticks += 1
        # Set the next tick first, so an error below cannot end the ticks.
        self.tell_later(self.interval_ms, WatchdogTick())
        for unit in self.units.values():
            ref = unit.refs.get(self.carrier_name)
            if ref is not None and ref.is_alive():
                ref.tell(Carry("watchdog"))
        self._check()

    def _check(self) -> None:
        now = self.clock.now_ms()
        for name, unit in self.units.items():
            if unit.restart_at_ms is not None and now < unit.restart_at_ms:
                continue
            dead = unit.dead()
            if dead:
                why = unit.last_error if unit.restart_at_ms else f"{', '.join(dead)} found dead"
                self._restart(name, unit, why)

    def _died(self, message: ActorDied) -> None:
        for name, unit in self.units.items():
            if any(ref.actor_urn == message.urn for ref in unit.refs.values()):
                self._restart(name, unit, f"{message.name}: {message.error}")
                return
        log.debug("ignoring the death of %s: its unit was already replaced", message.name)

    def _restart(self, name: str, unit: _Unit, why: str) -> None:
        if not self.supervising:
            return
        for ref in unit.refs.values():
            if ref.is_alive():
                ref.stop(block=False)
        unit.last_error = why
        now = self.clock.now_ms()
        if unit.restart_at_ms is None and unit.last_restart_ms is not None:
            if now - unit.last_restart_ms < _CALM_MS:
                wait_ms = unit.backoff.next_ms()
                unit.restart_at_ms = now + wait_ms
                log.warning("%s died again (%s); restarting in %d ms", name, why, wait_ms)
                self.tell_at(unit.restart_at_ms, CheckUnits())
                return
            unit.backoff.reset()
        unit.restart_at_ms = None
        unit.restarts += 1
        unit.last_restart_ms = now
        log.warning("restarting %s (restart #%d): %s", name, unit.restarts, why)
        try:
            unit.refs = unit.factory(self.actor_ref)
        except Exception as exc:
            unit.last_error = f"restart failed: {exc!r}"
            unit.restart_at_ms = now + unit.backoff.next_ms()
            log.exception("restarting %s failed; trying again at %d", name, unit.restart_at_ms)
            self.tell_at(unit.restart_at_ms, CheckUnits())

    def _health(self) -> dict[str, Any]:
        report: dict[str, Any] = {
            "watchdog": {"alive": True, "restarts": 0, "last_error": "", "ticks": self.ticks}
        }
        for name, unit in self.units.items():
            report[name] = {
                "alive": not unit.dead(),
                "restarts": unit.restarts,
                "last_error": unit.last_error,
                "last_restart_ms": unit.last_restart_ms,
            }
        return report
