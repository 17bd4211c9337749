"""ShutdownCoordinator: stops everything in order without losing a job.

1. Stop fetching at once: every listener is told StopFetching and, if it is blocked on Redis,
   unblocked with CLIENT UNBLOCK (not waited for).
2. Stop the watchdog (so nothing is restarted), the carrier and the sweeper.
3. Drain the pools: jobs fetched but not started are released to the front of their ready list
   (no attempt counted); running handlers get until the grace deadline to finish and be acked.
4. Stop pools and listeners. Jobs still running keep their lease; a sweeper (in this or another
   process) recovers them when it expires.
5. The facade then closes connections.
Every wait is bounded by the grace deadline, so stopping takes at most grace + about a second.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import pykka
import redis

from ._actor import ask
from ._messages import Drain, StopFetching
from .listener import listener_connection_name, unblock
from .watchdog import CurrentRefs

log = logging.getLogger("actors.shutdown")

_UNBLOCK_RETRY_S = 0.05


@dataclass(frozen=True, slots=True)
class Shutdown:
    """ShutdownCoordinator (ask): run the sequence; answers a report dict."""

    grace_s: float


class ShutdownCoordinator(pykka.ThreadingActor):
    def __init__(self, watchdog: pykka.ActorRef[Any], client: redis.Redis, consumer: str) -> None:
        super().__init__()
        self.watchdog = watchdog
        self.client = client
        self.consumer = consumer

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Shutdown):
            return self._shutdown(message.grace_s)
        return None

    def _shutdown(self, grace_s: float) -> dict[str, Any]:
        started = time.monotonic()
        deadline = started + grace_s
        units: dict[str, dict[str, pykka.ActorRef[Any]]] = {}
        if self.watchdog.is_alive():
            units = ask(self.watchdog, CurrentRefs(), timeout=5)
        refs = {name: ref for unit in units.values() for name, ref in unit.items()}
        listeners = {n: r for n, r in refs.items() if n.startswith("listener:")}
        pools = {n: r for n, r in refs.items() if n.startswith("pool:")}
        others = {n: r for n, r in refs.items() if n not in listeners and n not in pools}

        for name, ref in listeners.items():
            self._stop_fetching(name, ref, deadline)
        _stop(self.watchdog)
        for ref in others.values():
            _stop(ref)

        drains: dict[str, pykka.Future[int]] = {}
        for name, ref in pools.items():
            message = Drain()
            try:
                ref.tell(message)
                drains[name] = message.idle
            except pykka.ActorDeadError:
                pass
        still_running: dict[str, int] = {}
        for name, future in drains.items():
            try:
                future.get(timeout=max(0.0, deadline - time.monotonic()))
            except pykka.Timeout:
                still_running[name] = -1
                log.warning("%s: handlers still running after the grace period", name)
        for ref in [*pools.values(), *listeners.values()]:
            _stop(ref)
        return {"seconds": round(time.monotonic() - started, 3), "still_running": still_running}

    def _stop_fetching(self, name: str, ref: pykka.ActorRef[Any], deadline: float) -> None:
        try:
            answer = ref.ask(StopFetching(), block=False)
        except pykka.ActorDeadError:
            return
        topic = name.removeprefix("listener:")
        connection_name = listener_connection_name(self.consumer, topic)
        while True:
            try:
                unblock(self.client, connection_name)
            except redis.RedisError as exc:
                log.warning("cannot unblock %s: %s", connection_name, exc)
            try:
                answer.get(timeout=_UNBLOCK_RETRY_S)
                return
            except pykka.Timeout:
                if time.monotonic() > deadline + 0.5:
                    log.warning("%s did not stop fetching in time", name)
                    return


def _stop(ref: pykka.ActorRef[Any]) -> None:
    with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
        ref.stop(block=True, timeout=2)
