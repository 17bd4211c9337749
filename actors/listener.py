"""TopicListener: leases a topic's ready jobs as fast as its pool can start them.

It leases at most as many jobs as the pool has free slots, in one round trip, so jobs wait in
Redis and not in this process. When nothing is ready it blocks on Redis with
``BLMOVE ready ready LEFT LEFT``: that moves the head of the list back onto itself (a no-op)
and returns as soon as the list is non-empty, so there is no polling and no wake-up can be lost
(the list itself is the signal). Shutdown unblocks it with ``CLIENT UNBLOCK`` (see
:func:`unblock`).
"""

from __future__ import annotations

import logging
from typing import Any

import pykka
import redis

from ._actor import RedelayActor
from ._backoff import Backoff
from ._connections import dedicated_client
from ._messages import Fetch, Run, SlotsFreed, Stats, StopFetching
from .clock import Clock
from .store import Store

log = logging.getLogger("actors.listener")


class TopicListener(RedelayActor):
    def __init__(
        self,
        store: Store,
        clock: Clock,
        topic: str,
        pool: pykka.ActorRef[Any],
        slots: int,
        *,
        supervisor: pykka.ActorRef[Any] | None = None,
        consumer: str = "",
        block_timeout_s: float = 5.0,
        batch_max: int = 1_000,
    ) -> None:
        super().__init__(f"listener:{topic}", clock, supervisor)
        self.store = store
        self.topic = topic
        self.pool = pool
        self.free_slots = slots
        self.consumer = consumer
        self.block_timeout_s = block_timeout_s
        self.batch_max = batch_max
        self.backoff = Backoff()
        self.fetch_pending = False
        self.stopping = False
        self.leased = 0
        # A connection of its own for the blocking wait. Its name survives reconnects (redis-py
        # sets it on every connect), so shutdown can find it in CLIENT LIST and unblock it.
        self.connection_name = listener_connection_name(consumer, topic)
        self.blocking = dedicated_client(
            store.client,
            client_name=self.connection_name,
            socket_timeout=block_timeout_s + 5.0,
        )

    def on_start(self) -> None:
        self._request_fetch()

    def on_stop(self) -> None:
        super().on_stop()
        self.blocking.close()

    def on_failure(self, *args: Any) -> None:
        self.blocking.close()
        super().on_failure(*args)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Fetch):
            self.fetch_pending = False
            self._fetch()
        elif isinstance(message, SlotsFreed):
            self.free_slots += message.count
            self._request_fetch()
        elif isinstance(message, StopFetching):
            self.stopping = True
            return self.free_slots
        elif isinstance(message, Stats):
            return {"leased": self.leased, "free_slots": self.free_slots}
        return None

    def _request_fetch(self) -> None:
        if not self.fetch_pending and not self.stopping and self.free_slots > 0:
            self.fetch_pending = True
            self.actor_ref.tell(Fetch())

    def _fetch(self) -> None:
        if self.stopping or self.free_slots <= 0:
            return
        try:
            leases = self.store.lease(
                self.topic, min(self.free_slots, self.batch_max), self.consumer
            )
            if not leases:
                self._wait_for_work()
        except redis.RedisError as exc:
            wait_ms = self.backoff.next_ms()
            log.warning("listener %s: %s; retrying in %d ms", self.topic, exc, wait_ms)
            self.tell_later(wait_ms, Fetch())
            self.fetch_pending = True
            return
        self.backoff.reset()
        if leases:
            self.free_slots -= len(leases)
            self.leased += len(leases)
            self.pool.tell(Run(tuple(leases)))
        self._request_fetch()

    def _wait_for_work(self) -> None:
        key = self.store.keys.ready(self.topic)
        # redis-py types the timeout as int; Redis 6+ takes fractional seconds.
        self.blocking.blmove(key, key, self.block_timeout_s, "LEFT", "LEFT")  # type: ignore[arg-type]


def listener_connection_name(consumer: str, topic: str) -> str:
    """Unique per process and topic (the consumer name holds host, pid and a random part)."""
    return f"redelay-listener:{consumer}:{topic}"


def unblock(client: redis.Redis, connection_name: str) -> int:
    """Unblocks every connection with that name that is waiting in a blocking command."""
    unblocked = 0
    for entry in client.client_list():
        if entry.get("name") == connection_name:
            unblocked += int(client.client_unblock(int(entry["id"])))
    return unblocked
