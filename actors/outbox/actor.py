"""The relay as an actor of a worker process: ``start_relay(store, engine)``.

A thin actor over :class:`Relay`: each ``RelayPass`` it is told drains the outbox (on the actor's
thread); its ``Stats`` are the relay's counters. A waker thread owns the waiting (LISTEN/NOTIFY or
the poll interval) and tells the actor a pass when a commit notified or the interval passed; it
tells one at a time, so a slow pass is followed by one more, not by a queue of them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import pykka
from sqlalchemy import Engine

from actors.outbox._table import NOTIFY_CHANNEL
from actors.outbox._wake import CommitWaiter
from actors.outbox.relay import DEFAULT_BATCH, DEFAULT_LAG_WARN_MS, DEFAULT_POLL_S, Relay, status
from actors.runtime.messages import Stats
from actors.storage.store import Store

log = logging.getLogger("actors.outbox")

_STOP_TIMEOUT_S = 30.0  # a pass under way finishes first (one batch: milliseconds to seconds)


@dataclass(frozen=True, slots=True)
class RelayPass:
    """Drain the outbox now (a commit notified, or the poll interval passed)."""


class OutboxRelayActor(pykka.ThreadingActor):
    def __init__(self, relay: Relay, pending: threading.Event) -> None:
        super().__init__()
        self.relay, self._pending = relay, pending

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, RelayPass):
            self._pending.clear()  # a commit from now on needs a pass after this one
            try:
                self.relay.drain()
            except Exception:  # the rows stay; the next notice or poll tries again
                log.exception("outbox relay pass failed; the next poll retries")
            return None
        if isinstance(message, Stats):
            return self.relay.stats()
        return None


class RelayHandle:
    """A started relay: ``stats()`` and ``stop()`` (waits for a pass under way)."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._ref = OutboxRelayActor.start(relay, self._pending)
        self._waiter = CommitWaiter.for_engine(relay.engine, NOTIFY_CHANNEL)
        self._thread = threading.Thread(target=self._wake, name="redelay-outbox-waker", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        self._tell()  # rows written while nothing relayed
        while not self._stop.is_set():
            self._waiter.wait(self.relay.poll_s, self._stop)
            if not self._stop.is_set():
                self._tell()

    def _tell(self) -> None:
        if self._pending.is_set():
            return
        self._pending.set()
        try:
            self._ref.tell(RelayPass())
        except pykka.ActorDeadError:
            self._stop.set()

    @property
    def listening(self) -> bool:
        return self._waiter.listening

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self._ref.ask(Stats(), block=True, timeout=5)
        stats["listening"] = self.listening
        return stats

    def stop(self) -> None:
        self._stop.set()
        self.relay.stop()  # a drain under way ends after its current pass
        self._thread.join(_STOP_TIMEOUT_S)
        self._waiter.close()
        self._ref.stop(timeout=_STOP_TIMEOUT_S)


def start_relay(
    store: Store,
    engine: Engine,
    *,
    batch: int = DEFAULT_BATCH,
    poll_s: float = DEFAULT_POLL_S,
    lag_warn_ms: int = DEFAULT_LAG_WARN_MS,
) -> RelayHandle:
    """Starts relaying ``engine``'s outbox into ``store`` (e.g. ``queue.store`` of a started
    worker) in this process; ``stop()`` the handle before the queue."""
    relay = Relay(engine, store, batch=batch, poll_s=poll_s, lag_warn_ms=lag_warn_ms)
    return RelayHandle(relay)


def outbox_collector(handle: RelayHandle) -> Any:
    """A Prometheus collector of the outbox and of ``handle``'s relay (actors.metrics; the
    metrics extra), to register in the queue's registry (``actors.metrics.registry(queue)``)."""
    from actors.metrics import OutboxCollector

    def read() -> tuple[int, int | None]:
        found = status(handle.relay.engine)
        return found.depth, found.oldest_ms

    return OutboxCollector(read, handle.relay.stats)
