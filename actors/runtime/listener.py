"""TopicListener: leases a topic's ready jobs as fast as its pool can start them.

It leases at most as many jobs as the pool has free slots, in one round trip, so jobs wait in
Redis and not in this process. While its leases come back full, the pool leases the slots it
frees by itself, with its acks (``Run.refill``), and this listener takes over again when it
gives slots back. When nothing is ready it waits, in its mailbox, for a
``ReadyNotice`` from the process's ShardNotifier: the scripts publish the topic on the shard's
ready channel when its list goes from empty to non-empty (or a lease leaves jobs behind). No
wake-up is lost: the notifier subscribed before any listener started, and the listener reads the
notifier's mark before each lease, so a notice that arrives while the lease is under way is told
as soon as it asks for one (see ``ShardNotifier.await_ready``). A timer every ``look_interval_s``
is the backstop for a notice lost anyway (pub/sub keeps nothing for a subscriber that is away; the
notifier also tells waiting listeners to look when it subscribes again).

A topic's gate (pause, limits; see lua/_gate.lua) answers in the lease reply: a paused topic
waits for the notice its resume publishes, a limited one looks again when the reply says the
limit lets the next job go. Neither spins.

The listener never waits on Redis inside its own thread, so it answers Stats and StopFetching at
once, and shutdown needs nothing but messages.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pykka
import redis

from actors.clock import Clock, Timer
from actors.runtime._actor import RedelayActor
from actors.runtime._backoff import Backoff, outage_of
from actors.runtime.messages import (
    Fetch,
    LookAgain,
    ReadyNotice,
    Refill,
    Run,
    SlotsFreed,
    Stats,
    StopFetching,
)
from actors.runtime.notifier import ShardNotifier
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
        look_interval_s: float = 5.0,
        batch_max: int = 1_000,
        notifier: ShardNotifier,
    ) -> None:
        super().__init__(f"listener:{topic}", clock, supervisor)
        self.store = store
        self.topic = topic
        self.pool = pool
        self.free_slots = slots
        self.consumer = consumer
        self.look_interval_s = look_interval_s
        self.batch_max = batch_max
        self.backoff = Backoff(outage=outage_of(store.client), name=f"listener {topic}")
        self.fetch_pending = False
        # From its wait for a ReadyNotice (its last lease left the ready list empty) to its next
        # lease (_fetch): freed slots meanwhile only count, they do not lease.
        self.awaiting_notice = False
        self.stopping = False
        self.leased = 0
        self.leases = 0  # lease round trips
        self.waits = 0  # times it waited for a notice (its lease found nothing or emptied the list)
        self.paused_waits = 0  # times the topic was paused
        self.gated_waits = 0  # times the topic's limits held jobs back
        self.notifier = notifier
        self.backstop: Timer | None = None
        self.look_at_ms = 0  # when the backstop looks, unless a later wait moves it
        # A LookAgain is on its way (its timer pending, or fired and in the mailbox): a wait
        # then only moves look_at_ms, so there is never more than one.
        self.look_armed = False

    def started(self) -> None:
        self._request_fetch()

    def on_stop(self) -> None:
        super().on_stop()
        self._close()

    def on_failure(self, *args: Any) -> None:
        self._close()
        super().on_failure(*args)

    def _close(self) -> None:
        if self.backstop is not None:
            self.backstop.cancel()
        self.notifier.unwatch_ready(self.topic, self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Fetch):
            self.fetch_pending = False
            self._fetch()
        elif isinstance(message, LookAgain):
            self._look_again()
        elif isinstance(message, ReadyNotice):
            self._request_fetch()  # at most one Fetch queued, however many notices
        elif isinstance(message, SlotsFreed):
            self.free_slots += message.count
            # While it waits for a notice its last lease found the list empty, and a push onto
            # an empty list publishes one: a lease now would come back empty too.
            if not self.awaiting_notice:
                self._request_fetch()
        elif isinstance(message, StopFetching):
            self.stopping = True
            # The pool leases nothing more by itself either: this Run is in its mailbox before
            # the answer (and so before the Drain that follows it).
            with contextlib.suppress(pykka.ActorDeadError):
                self.pool.tell(Run(()))
            return self.free_slots
        elif isinstance(message, Stats):
            return {
                "leased": self.leased,
                "leases": self.leases,
                "waits": self.waits,
                "paused_waits": self.paused_waits,
                "gated_waits": self.gated_waits,
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
        self.awaiting_notice = False
        mark = self.notifier.ready_mark(self.topic)  # before the lease: see await_ready
        limit = min(self.free_slots, self.batch_max)
        try:
            batch = self.store.lease_batch(self.topic, limit, self.consumer)
            self.leases += 1
        except redis.RedisError as exc:
            wait_ms = self.backoff.redis_failed(exc, "lease")
            self.tell_later(wait_ms, Fetch())
            self.fetch_pending = True
            return
        self.backoff.redis_ok()
        leases = batch.leases
        one_shard = len(self.store.shard_keys) == 1
        if leases:
            self.free_slots -= len(leases)
            self.leased += len(leases)
            # A full lease that no gate held back means more are ready: the pool leases the slots
            # these jobs free in the round trip of their acks (see ConsumerPool._flush), without
            # a SlotsFreed, Fetch and Run between the two actors and a round trip of its own.
            full = len(leases) == limit and batch.wait_ms == 0 and one_shard
            refill = Refill(self.consumer, self.batch_max) if full else None
            try:
                self.pool.tell(Run(tuple(leases), refill))
            except pykka.ActorDeadError:
                self._give_back(leases)
                return
        if batch.paused:
            self.paused_waits += 1
            self._await_notice(mark)  # the resume publishes the topic on the ready channel
        elif batch.wait_ms:
            # The topic's limits held jobs back: look again when they let one go, not before
            # (a ReadyNotice or SlotsFreed meanwhile finds the Fetch already pending).
            self.gated_waits += 1
            self.fetch_pending = True
            self.tell_later(batch.wait_ms, Fetch())
        elif leases and (len(leases) == limit or not one_shard):
            # Full: more may be ready. Of several shards, one that failed may still hold jobs.
            self._request_fetch()
        else:
            # Nothing, or fewer than asked of one shard: the lease pops up to `limit`, so its
            # list is empty now, and the push that next fills it publishes a notice (a lease that
            # leaves jobs behind publishes one too), so leasing again at once would find nothing.
            self._await_notice(mark)

    def _give_back(self, leases: list[Lease]) -> None:
        """The pool died between the lease and the Run: release the jobs, no attempt counted."""
        try:
            self.store.release_many([(x.topic, x.id, x.token) for x in leases])
        except redis.RedisError as exc:
            log.warning(
                "listener %s: releasing %d jobs failed (%s); any not released run again when"
                " their leases expire",
                self.topic,
                len(leases),
                exc,
            )

    def _await_notice(self, mark: int) -> None:
        self.waits += 1
        self.awaiting_notice = True
        self.notifier.await_ready(self.topic, self.actor_ref, mark)
        # One backstop timer at a time: a wait only moves the time it looks, and a timer that
        # fires before that time is set again for the rest. A timer set (and the last one
        # cancelled) at every wait, thousands a second at a steady rate, was garbage for the
        # collector to walk (docs/scaling.md, lateness and Python's garbage collector).
        self.look_at_ms = self.clock.now_ms() + round(self.look_interval_s * 1000)
        if not self.look_armed:
            self._arm_look()

    def _look_again(self) -> None:
        self.look_armed = False
        if self.clock.now_ms() < self.look_at_ms:
            self._arm_look()
            return
        self.backstop = None
        self._request_fetch()

    def _arm_look(self) -> None:
        self.look_armed = True
        self.backstop = self.tell_at(self.look_at_ms, LookAgain())
