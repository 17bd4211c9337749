"""Builds, starts and stops one process's actors for a set of handlers.

The watchdog starts first and builds every other actor through factories, so it can build them
again when one dies. Units: "carrier", "sweeper", and one "topic:<name>" unit (pool + listener)
per handler.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from actors._constants import HEARTBEAT_INTERVAL_MS, HEARTBEAT_TTL_MS, LEASE_MS_MAX
from actors.clock import Clock
from actors.runtime._actor import ask
from actors.runtime._hooks import FailureHooks
from actors.runtime.carrier import Carrier
from actors.runtime.heartbeat import Heartbeat
from actors.runtime.listener import TopicListener
from actors.runtime.messages import CurrentRefs, Health, SetListener, Stats, Supervise
from actors.runtime.notifier import ShardNotifier, notifier_for
from actors.runtime.pool import ConsumerPool
from actors.runtime.recorder import NO_RECORDER, Recorder
from actors.runtime.shutdown import (
    CUT_RESERVE_S,
    STOP_BOUND_S,
    Shutdown,
    ShutdownCoordinator,
    ShutdownResult,
)
from actors.runtime.sweeper import RetrySweeper
from actors.runtime.watchdog import Watchdog
from actors.storage.fence import Fence
from actors.storage.liveness import without_timeout
from actors.storage.store import Store
from actors.tracing import Tracing
from actors.values import TopicConfig

log = logging.getLogger("actors.system")


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    topic: str
    handler: Callable[..., Any]
    concurrency: int
    timeout_ms: int
    retry_ms: tuple[int, ...] | None
    lease_ms: int | None
    prefetch: int = 0  # jobs leased beyond the threads, waiting in the pool for one
    lost_max: int | None = None  # lost leases before a job is quarantined; None: the default

    def topic_config(self, defaults: TopicConfig) -> TopicConfig:
        """What a worker stores for the topic at start: the handler's retry schedule, lease and
        lost_max, else the namespace defaults, with a lease of at least twice the handler's
        timeout."""
        return TopicConfig(
            self.retry_ms or defaults.retry_ms,
            self.lease_ms or max(defaults.lease_ms, min(self.timeout_ms * 2, LEASE_MS_MAX)),
            self.lost_max or defaults.lost_max,
        )


@dataclass(frozen=True, slots=True)
class SystemSettings:
    consumer: str
    watchdog_interval_ms: int = 60_000
    sweep_interval_ms: int = 1_000
    carry_batch: int = 1_000
    lease_batch_max: int = 1_000
    look_interval_s: float = 5.0  # a listener's backstop look, for a ready notice lost anyway
    check_interval_ms: int = 100
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    heartbeat_ttl_ms: int = HEARTBEAT_TTL_MS


class ActorSystem:
    """Only touched by the facade's thread; the actors themselves talk by messages."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        handlers: list[HandlerSpec],
        settings: SystemSettings,
        recorder: Recorder = NO_RECORDER,
        hooks: FailureHooks | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        # The actors' own connections, which stop() cuts when one of them did not stop in time
        # (fence.py); a client whose pool cannot be copied (a cluster) is shared, unfenced.
        self.fence = Fence()
        fenced = self.fence.client_for(store.client)
        self.store = store if fenced is None else store.on_client(fenced)
        self.recorder = recorder  # the pools' metrics (actors.metrics), or nothing
        self.clock = clock
        self.handlers = handlers
        self.settings = settings
        self.hooks = hooks
        self.tracing = tracing  # the pools' consumer spans (actors.tracing), or none
        self.watchdog: pykka.ActorRef[Any] | None = None
        self.coordinator: pykka.ActorRef[Any] | None = None
        # The process's one wake path: one pub/sub connection for every shard's wake and ready
        # signals, for one shard as for many.
        self.notifier: ShardNotifier = notifier_for(self.store)
        self.heartbeat = Heartbeat(
            self.store,
            clock,
            settings.consumer,
            [spec.topic for spec in handlers],
            self.busy_slots,
            interval_ms=settings.heartbeat_interval_ms,
            ttl_ms=settings.heartbeat_ttl_ms,
        )

    def start(self) -> None:
        """Starts the watchdog, which builds every other actor. If building one fails, what was
        started is stopped again and the error is raised."""
        s = self.settings
        if without_timeout(self.store.client):
            log.warning(
                "this Redis client has no socket_timeout: a call on a connection that died without"
                " a word (a partition, a firewall that forgot it) waits until the kernel gives up;"
                " give the client one (docs/operations.md#network-faults)"
            )
        self.notifier.start()  # subscribed before any actor looks at Redis
        self.watchdog = Watchdog.start(self.clock, interval_ms=s.watchdog_interval_ms)
        self.coordinator = ShutdownCoordinator.start(self.watchdog)
        try:
            self.watchdog.ask(Supervise("carrier", self._carrier_factory))
            self.watchdog.ask(Supervise("sweeper", self._sweeper_factory))
            for spec in self.handlers:
                self.watchdog.ask(Supervise(f"topic:{spec.topic}", self._topic_factory(spec)))
        except BaseException:
            self.stop(0)
            raise
        self.heartbeat.start()

    def busy_slots(self) -> tuple[int, int] | None:
        """(running handlers, slots) over this process's pools; None when a pool did not
        answer (the heartbeat skips a beat rather than report a wedged worker as idle).
        Runs on the heartbeat thread."""
        stats = self.stats(timeout_s=1.0)
        pools = {name: found for name, found in stats.items() if name.startswith("pool:")}
        if any(found is None for found in pools.values()):
            return None
        busy = sum(int(found.get("running", 0)) for found in pools.values())
        return busy, sum(spec.concurrency for spec in self.handlers)

    def _carrier_factory(self, supervisor: pykka.ActorRef[Any]) -> dict[str, Any]:
        ref = Carrier.start(
            self.store,
            self.clock,
            supervisor,
            batch=self.settings.carry_batch,
            notifier=self.notifier,
        )
        return {"carrier": ref}

    def _sweeper_factory(self, supervisor: pykka.ActorRef[Any]) -> dict[str, Any]:
        ref = RetrySweeper.start(
            self.store,
            self.clock,
            supervisor,
            interval_ms=self.settings.sweep_interval_ms,
            recorder=self.recorder,
        )
        return {"sweeper": ref}

    def _topic_factory(
        self, spec: HandlerSpec
    ) -> Callable[[pykka.ActorRef[Any]], dict[str, pykka.ActorRef[Any]]]:
        def build(supervisor: pykka.ActorRef[Any]) -> dict[str, pykka.ActorRef[Any]]:
            s = self.settings
            topic_config = self.store.topic_configs.get(spec.topic, self.store.default_topic_config)
            pool = ConsumerPool.start(
                self.store,
                self.clock,
                spec.topic,
                spec.handler,
                concurrency=spec.concurrency,
                prefetch=spec.prefetch,
                timeout_ms=spec.timeout_ms,
                lease_ms=topic_config.lease_ms,
                supervisor=supervisor,
                check_interval_ms=s.check_interval_ms,
                recorder=self.recorder,
                hooks=self.hooks,
                tracing=self.tracing,
            )
            listener = TopicListener.start(
                self.store,
                self.clock,
                spec.topic,
                pool,
                spec.concurrency + spec.prefetch,
                supervisor=supervisor,
                consumer=s.consumer,
                look_interval_s=s.look_interval_s,
                batch_max=s.lease_batch_max,
                notifier=self.notifier,
            )
            pool.tell(SetListener(listener))
            return {f"pool:{spec.topic}": pool, f"listener:{spec.topic}": listener}

        return build

    def refs(self) -> dict[str, pykka.ActorRef[Any]]:
        if self.watchdog is None or not self.watchdog.is_alive():
            return {}
        units: dict[str, dict[str, pykka.ActorRef[Any]]] = ask(self.watchdog, CurrentRefs(), 5)
        return {name: ref for unit in units.values() for name, ref in unit.items()}

    def health(self) -> dict[str, Any]:
        if self.watchdog is None:
            return {}
        try:
            report: dict[str, Any] = ask(self.watchdog, Health(), 5)
        except (pykka.ActorDeadError, pykka.Timeout) as exc:
            return {"watchdog": {"alive": False, "restarts": 0, "last_error": repr(exc)}}
        return report

    def stats(self, timeout_s: float = 0.5) -> dict[str, Any]:
        """Every actor's counters. An actor busy with a long message (a carry of a big backlog,
        a lease while Redis is slow) may not answer within ``timeout_s``: it shows as None."""
        asked = {}
        for name, ref in self.refs().items():
            with contextlib.suppress(pykka.ActorDeadError):
                asked[name] = ref.ask(Stats(), block=False)
        deadline = time.monotonic() + timeout_s
        found: dict[str, Any] = {}
        for name, future in asked.items():
            try:
                found[name] = future.get(timeout=max(0.0, deadline - time.monotonic()))
            except (pykka.ActorDeadError, pykka.Timeout):
                found[name] = None
        return found

    def stop(self, grace_s: float) -> dict[str, Any]:
        """Runs the shutdown sequence; returns within grace + STOP_BOUND_S whatever Redis and the
        network do. What had not stopped by then (an actor, the heartbeat or the notifier waiting
        on Redis in a partition) is cut off from Redis (fence.py): it cannot act any more, and
        the report names it. Report: ``seconds`` (real time taken), ``stopped``,
        ``not_stopped`` (cut off), ``abandoned`` (cut off and still alive at return: a thread
        pykka cannot end, which can no longer reach Redis), ``still_running`` (pools whose
        handlers outlived the grace period: their jobs keep their leases)."""
        if self.coordinator is None:
            return {}
        started = time.monotonic()
        deadline = started + max(0.0, grace_s) + STOP_BOUND_S
        cut_at = deadline - CUT_RESERVE_S
        # Stopping workers take no new jobs: no longer listed. Its thread removes the heartbeat
        # meanwhile (a Redis write, which a partition may hold until the cut). Notices are not
        # needed any more: listeners stop fetching first.
        self.heartbeat.stop(wait_s=0)
        self.notifier.stop(wait_s=0)
        report: dict[str, Any]
        pending: dict[str, pykka.Future[Any]] = {}
        try:
            result: ShutdownResult = ask(
                self.coordinator, Shutdown(grace_s, cut_at), _left(cut_at) + 0.05
            )
            report, pending = result.report, result.pending
        except pykka.Timeout:
            report = {"error": "the shutdown sequence did not finish in time", "stopped": []}
        with contextlib.suppress(pykka.ActorDeadError):
            self.coordinator.stop(block=False)  # idle once it has answered
        self.coordinator = None
        self.watchdog = None
        threads = {"heartbeat": self.heartbeat.wait, "notifier": self.notifier.wait}
        late = sorted(
            [name for name, future in pending.items() if not _done(future)]
            + [name for name, wait in threads.items() if not wait(_left(cut_at))]
        )
        if late:
            log.warning("not stopped in time, cut off from Redis: %s", ", ".join(late))
            self.fence.cut()
        else:
            self.store.drop_connections()  # every actor stopped: close their connections
            self.fence.cut()  # and any still taken
        # Cut off, they fail their Redis calls at once and end; what has not ended by the
        # deadline is left, unable to reach Redis.
        end_by = deadline - CUT_RESERVE_S / 3  # the rest is the facade's close
        abandoned = [
            name
            for name in late
            if not (
                _done(pending[name], end_by) if name in pending else threads[name](_left(end_by))
            )
        ]
        if abandoned:
            log.warning("abandoned, cut off from Redis: %s", ", ".join(abandoned))
        stopped = set(report.get("stopped", ())) | {n for n in threads if n not in late}
        report |= {
            "stopped": sorted(stopped),
            "not_stopped": late,
            "abandoned": abandoned,
            "seconds": round(time.monotonic() - started, 3),
        }
        return report


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _done(future: pykka.Future[Any], by: float | None = None) -> bool:
    """Whether the future resolved (with anything, an error too), waiting until ``by``."""
    try:
        future.get(timeout=0 if by is None else _left(by))
    except pykka.Timeout:
        return False
    except Exception:  # e.g. ActorDeadError: gone, which is what was waited for
        return True
    return True
