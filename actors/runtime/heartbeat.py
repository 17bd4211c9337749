"""The worker's heartbeat: a plain thread that writes this process's heartbeat every few seconds.

Not an actor: it only reads the pools' counters (an ``ask`` from outside the actors, which is
safe) and writes one key, so it needs no mailbox, and a heartbeat that keeps beating while the
actors are wedged would lie. It beats only while every pool answers; a pool that does not
answer within the interval skips that beat, and three skipped beats let the key expire.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

import redis

from actors.clock import Clock
from actors.storage import heartbeats
from actors.storage.store import Store
from actors.values import WorkerInfo

log = logging.getLogger("actors.heartbeat")

# (busy slots, total slots) of this process's pools, or None when a pool did not answer.
BusyFn = Callable[[], tuple[int, int] | None]


class Heartbeat:
    """Started and stopped by the ActorSystem, from the facade's thread."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        name: str,
        topics: list[str],
        busy: BusyFn,
        *,
        interval_ms: int,
        ttl_ms: int,
    ) -> None:
        self.store = store
        self.clock = clock
        self.name = name
        self.topics = tuple(topics)
        self.busy = busy
        self.interval_ms = interval_ms
        self.ttl_ms = ttl_ms
        self.started_ms = clock.now_ms()
        self._stop = threading.Event()
        self._forget = True
        self._thread: threading.Thread | None = None

    def info(self, busy_slots: int, slots: int) -> WorkerInfo:
        return WorkerInfo(
            name=self.name,
            host=socket.gethostname(),
            pid=os.getpid(),
            topics=self.topics,
            busy_slots=busy_slots,
            slots=slots,
            started_ms=self.started_ms,
            beat_ms=self.clock.now_ms(),
        )

    def beat_once(self) -> bool:
        """Writes one heartbeat; False when skipped (a pool silent, or Redis unreachable)."""
        counts = self.busy()
        if counts is None:
            return False
        try:
            info = self.info(*counts)
            heartbeats.beat(self.store.client, self.store.namespace, info, self.ttl_ms)
        except redis.RedisError as exc:  # Redis away: the next beat tries again
            log.warning("heartbeat not written: %s", exc)
            return False
        return True

    def start(self) -> None:
        self.beat_once()  # listed as soon as start() returns
        self._thread = threading.Thread(target=self._run, name="redelay-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            self.beat_once()
        if self._forget:
            self._forget_now()

    def _forget_now(self) -> None:
        try:
            heartbeats.forget(self.store.client, self.store.namespace, self.name)
        except redis.RedisError as exc:  # it expires by itself
            log.warning("heartbeat not removed: %s", exc)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, *, forget: bool = True, wait_s: float = 5.0) -> bool:
        """Stops beating; the thread removes the heartbeat on its way out, so a cleanly stopped
        worker leaves at once (``forget=False`` leaves it to expire, as a killed process's does:
        actors.testing). Waits up to ``wait_s`` for the thread, which may be in a Redis call;
        True when it ended. The ActorSystem waits 0 here and joins it with ``wait``."""
        self._forget = forget
        self._stop.set()
        return self.wait(wait_s)

    def wait(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for the thread to end; True when it has (or never ran)."""
        if self._thread is None:
            return True
        if timeout_s > 0:
            self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()
