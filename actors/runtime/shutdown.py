"""ShutdownCoordinator: stops everything in order without losing a job.

1. The watchdog stops supervising (nothing is restarted from now on) and hands over every ref.
2. Stop fetching at once: every listener is asked StopFetching. No listener waits on Redis in its
   own thread (they wait for notices in their mailboxes), so each answers within one lease.
3. Stop the watchdog, the carrier and the sweeper (without waiting for them).
4. Drain the pools: jobs fetched but not started are released to the front of their ready list
   (no attempt counted); running handlers get until the grace deadline to finish and be acked.
5. Stop pools and listeners. Jobs still running keep their lease; a sweeper (in this or another
   process) recovers them when it expires.
Every wait is bounded by the grace deadline or by the hard deadline ActorSystem.stop gives (grace
+ ``STOP_BOUND_S`` - ``CUT_RESERVE_S``). An actor still waiting on Redis then (a partition) is
named in the answer; ActorSystem.stop cuts the actors' connections (actors/storage/fence.py) so
it can no longer act, stops the notifier and the heartbeat the same way, and the facade closes its
client: stopping takes at most grace + ``STOP_BOUND_S``, whatever Redis or the network do.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import pykka

from actors.runtime._actor import ask
from actors.runtime.messages import Drain, Stats, StopFetching, StopSupervising

log = logging.getLogger("actors.shutdown")

# What stop() may take beyond the grace period: stopping actors, the last acks, and cutting off
# what did not stop. The last CUT_RESERVE_S of it are kept for the cut and the facade's close.
STOP_BOUND_S = 1.0
CUT_RESERVE_S = 0.3
# Listeners get at least this long to stop fetching, even with grace=0.
_STOP_FETCHING_MIN_S = 0.3


@dataclass(frozen=True, slots=True)
class Shutdown:
    """ShutdownCoordinator (ask): run the sequence by ``hard_deadline`` (time.monotonic());
    answers a ShutdownResult."""

    grace_s: float
    hard_deadline: float


@dataclass(frozen=True, slots=True)
class ShutdownResult:
    report: dict[str, Any]  # seconds, still_running, stopped, not_stopped
    pending: dict[str, pykka.Future[Any]]  # the stops of the actors in not_stopped


class ShutdownCoordinator(pykka.ThreadingActor):
    def __init__(self, watchdog: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.watchdog = watchdog

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Shutdown):
            return self._shutdown(message.grace_s, message.hard_deadline)
        return None

    def _shutdown(self, grace_s: float, hard_deadline: float) -> ShutdownResult:
        started = time.monotonic()
        grace_deadline = min(started + max(0.0, grace_s), hard_deadline)
        refs = self._take_over(hard_deadline)
        listeners = {n: r for n, r in refs.items() if n.startswith("listener:")}
        pools = {n: r for n, r in refs.items() if n.startswith("pool:")}
        others = {n: r for n, r in refs.items() if n not in listeners and n not in pools}

        fetch_deadline = min(max(grace_deadline, started + _STOP_FETCHING_MIN_S), hard_deadline)
        self._stop_fetching(listeners, fetch_deadline)
        stopping = {"watchdog": _stop_later(self.watchdog)}
        stopping |= {name: _stop_later(ref) for name, ref in others.items()}

        still_running = self._drain(pools, grace_deadline)
        stopping |= {name: _stop_later(ref) for name, ref in {**pools, **listeners}.items()}
        pending = {
            name: future
            for name, future in stopping.items()
            if future is not None and not _wait(future, hard_deadline)
        }
        report = {
            "seconds": round(time.monotonic() - started, 3),
            "still_running": still_running,
            "stopped": sorted(set(stopping) - set(pending)),
            "not_stopped": sorted(pending),
        }
        return ShutdownResult(report, pending)

    def _take_over(self, deadline: float) -> dict[str, pykka.ActorRef[Any]]:
        try:
            units = ask(self.watchdog, StopSupervising(), timeout=_left(deadline))
        except (pykka.ActorDeadError, pykka.Timeout):
            log.error("the watchdog did not hand over its actors; they are left running")
            units = {}
        return {name: ref for unit in units.values() for name, ref in unit.items()}

    def _stop_fetching(self, listeners: dict[str, pykka.ActorRef[Any]], deadline: float) -> None:
        answers: dict[str, pykka.Future[Any]] = {}
        for name, ref in listeners.items():
            with contextlib.suppress(pykka.ActorDeadError):
                answers[name] = ref.ask(StopFetching(), block=False)
        # A listener answers once the lease it may be in returns (bounded by the client's
        # socket timeout); one that does not answer by the deadline is stopped anyway below.
        late = [name for name, future in answers.items() if not _wait(future, deadline)]
        if late:
            log.warning("did not stop fetching in time: %s", ", ".join(late))

    def _drain(self, pools: dict[str, pykka.ActorRef[Any]], deadline: float) -> dict[str, int]:
        drains: dict[str, pykka.Future[int]] = {}
        for name, ref in pools.items():
            message = Drain()
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(message)
                drains[name] = message.idle
        still_running: dict[str, int] = {}
        for name, future in drains.items():
            if _wait(future, deadline):
                continue
            try:
                running = int(ask(pools[name], Stats(), timeout=0.1)["running"])
            except (pykka.ActorDeadError, pykka.Timeout):
                running = -1
            still_running[name] = running
            log.warning(
                "%s: %s handlers still running after the grace period; their jobs keep their "
                "leases and are recovered when those expire",
                name,
                running if running >= 0 else "some",
            )
        return still_running


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _stop_later(ref: pykka.ActorRef[Any]) -> pykka.Future[Any] | None:
    try:
        return ref.stop(block=False)
    except pykka.ActorDeadError:
        return None


def _wait(future: pykka.Future[Any] | None, deadline: float) -> bool:
    """True when the future resolved (with anything, an error too) before the deadline."""
    if future is None:
        return True
    try:
        future.get(timeout=_left(deadline))
    except pykka.Timeout:
        return False
    except Exception:  # e.g. ActorDeadError: the actor is gone, which is what we waited for
        return True
    return True
