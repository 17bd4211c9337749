"""TopicListener: leases a topic's ready jobs as fast as its pool can start them.

It leases at most as many jobs as the pool has free slots, in one round trip, so jobs wait in
Redis and not in this process. When nothing is ready it blocks on Redis with
``BLMOVE ready ready LEFT LEFT`` on a connection of its own: that moves the head of the list back
onto itself (a no-op) and returns as soon as the list is non-empty. The list itself is the
signal, so there is no polling, and no wake-up is lost: a job pushed between the empty lease and
the BLMOVE is already in the list when BLMOVE looks. Shutdown unblocks it with
``CLIENT UNBLOCK`` (see :func:`unblock`) instead of waiting for the block timeout.

While blocked, the actor answers no messages (its thread is in the BLMOVE); what it would get
then (SlotsFreed, Stats) can wait, because a blocked listener has free slots and no work.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pykka
import redis

from actors.clock import Clock, Timer
from actors.runtime._actor import RedelayActor
from actors.runtime._backoff import Backoff
from actors.runtime.messages import Fetch, Run, SlotsFreed, Stats, StopFetching
from actors.runtime.notifier import ReadyNotice, ShardNotifier
from actors.storage.connections import dedicated_client
from actors.storage.store import Store
from actors.values import Lease

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
        notifier: ShardNotifier | None = None,
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
        self.leases = 0  # lease round trips
        self.waits = 0  # BLMOVE round trips
        # A connection of its own for the blocking wait. Its name survives reconnects (redis-py
        # sets it on every connect), so shutdown can find it in CLIENT LIST and unblock it. It
        # does not retry inside redis-py: the actor's own backoff does that.
        self.connection_name = listener_connection_name(consumer, topic)
        # A sharded store's lists cannot be blocked on together: the process's notifier sends
        # this listener a ReadyNotice when one fills; a timer every block_timeout_s is the backstop.
        self.notifier = notifier
        self.backstop: Timer | None = None
        self.blocking: redis.Redis | None = None
        if notifier is None:
            assert isinstance(store.client, redis.Redis), "a sharded store needs a ShardNotifier"
            self.ready_key = store.keys.ready(topic)
            self.blocking = dedicated_client(
                store.client,
                client_name=self.connection_name,
                socket_timeout=block_timeout_s + 5.0,
            )

    def started(self) -> None:
        if self.notifier is not None:
            self.notifier.watch_ready(self.topic, self.actor_ref)  # before the first look
        self._request_fetch()

    def on_stop(self) -> None:
        super().on_stop()
        self._close()

    def on_failure(self, *args: Any) -> None:
        self._close()
        super().on_failure(*args)

    def _close(self) -> None:
        if self.blocking is not None:
            self.blocking.close()
        if self.notifier is not None:
            self.notifier.unwatch_ready(self.topic, self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Fetch):
            self.fetch_pending = False
            self._fetch()
        elif isinstance(message, ReadyNotice):
            self._request_fetch()  # at most one Fetch queued, however many notices
        elif isinstance(message, SlotsFreed):
            self.free_slots += message.count
            self._request_fetch()
        elif isinstance(message, StopFetching):
            self.stopping = True
            return self.free_slots
        elif isinstance(message, Stats):
            return {
                "leased": self.leased,
                "leases": self.leases,
                "waits": self.waits,
                "free_slots": self.free_slots,
                "failures": self.backoff.failures,
            }
        return None

    def _request_fetch(self) -> None:
        if not self.fetch_pending and not self.stopping and self.free_slots > 0:
            self.fetch_pending = True
            self.actor_ref.tell(Fetch())

    def _fetch(self) -> None:
        if self.stopping or self.free_slots <= 0 or not self.pool.is_alive():
            return  # a dead pool means the watchdog is replacing this unit
        try:
            leases = self.store.lease(
                self.topic, min(self.free_slots, self.batch_max), self.consumer
            )
            self.leases += 1
            if not leases and self.notifier is not None:
                self._await_notice()
                return
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
            try:
                self.pool.tell(Run(tuple(leases)))
            except pykka.ActorDeadError:
                self._give_back(leases)
                return
        self._request_fetch()

    def _give_back(self, leases: list[Lease]) -> None:
        """The pool died between the lease and the Run: release the jobs, no attempt counted."""
        try:
            self.store.release_many([(x.topic, x.id, x.token) for x in leases])
        except redis.RedisError as exc:
            log.warning("listener %s: release failed (%s); leases will expire", self.topic, exc)

    def _wait_for_work(self) -> None:
        key = self.ready_key
        self.waits += 1
        assert self.blocking is not None
        # redis-py types the timeout as int; Redis 6+ takes fractional seconds.
        self.blocking.blmove(key, key, self.block_timeout_s, "LEFT", "LEFT")  # type: ignore[arg-type]

    def _await_notice(self) -> None:
        self.waits += 1
        self.backoff.reset()
        if self.backstop is not None:
            self.backstop.cancel()
        self.backstop = self.tell_later(round(self.block_timeout_s * 1000), Fetch())


def listener_connection_name(consumer: str, topic: str) -> str:
    """Unique per process and topic (the consumer name holds host, pid and a random part).

    Redis refuses client names with spaces or special characters, so the consumer name (which
    the user may choose) is reduced to a safe set; topics are already restricted to it.
    """
    safe = re.sub(r"[^A-Za-z0-9._:@/+=\-]", "_", consumer)
    return f"redelay-listener:{safe}:{topic}"


def unblock(client: redis.Redis, connection_name: str) -> int:
    """Unblocks every connection with that name that is waiting in a blocking command."""
    unblocked = 0
    for entry in client.client_list():
        if entry.get("name") == connection_name:
            unblocked += int(client.client_unblock(int(entry["id"])))
    return unblocked
