"""Carrier: moves due jobs to their topic's ready list.

It sleeps until the earliest due time (a clock timer) and wakes early when an earlier job is
added: the add script publishes the due time on the shard's wake channel, which every process's
carrier hears, so a job added by a producer-only process is carried on time. The watchdog's
periodic Carry is the backstop for a missed message.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import pykka
import redis

from ._actor import RedelayActor
from ._backoff import Backoff
from ._messages import Carry, Stats, Wake
from .clock import Clock, Timer
from .store import Store

log = logging.getLogger("actors.carrier")

# Most carry calls per message before yielding the mailbox to other messages (e.g. Stop).
_ROUNDS_PER_MESSAGE = 20


class Carrier(RedelayActor):
    def __init__(
        self,
        store: Store,
        clock: Clock,
        supervisor: pykka.ActorRef[Any] | None = None,
        batch: int = 1_000,
        name: str = "carrier",
    ) -> None:
        super().__init__(name, clock, supervisor)
        self.store = store
        self.batch = batch
        self.backoff = Backoff()
        self.timer: Timer | None = None
        self.timer_at_ms: int | None = None
        self.carried = 0
        self.carries = 0
        self.subscriber: WakeSubscriber | None = None

    def on_start(self) -> None:
        self.subscriber = WakeSubscriber(self.store, self.actor_ref)
        self.subscriber.start()
        self.actor_ref.tell(Carry("start"))

    def on_stop(self) -> None:
        super().on_stop()
        if self.subscriber is not None:
            self.subscriber.stop()

    def on_failure(self, *args: Any) -> None:
        if self.subscriber is not None:
            self.subscriber.stop()
        super().on_failure(*args)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Carry):
            self._carry(message.reason)
        elif isinstance(message, Wake):
            self._wake(message.due_ms)
        elif isinstance(message, Stats):
            return {"carried": self.carried, "carries": self.carries, "next_ms": self.timer_at_ms}
        return None

    def _carry(self, reason: str) -> None:
        try:
            for _ in range(_ROUNDS_PER_MESSAGE):
                moved, next_due = self.store.carry(self.batch)
                self.carries += 1
                self.carried += moved
                if moved < self.batch:
                    break
            else:
                self.actor_ref.tell(Carry("more"))  # a big backlog: let other messages in
                return
        except redis.RedisError as exc:
            wait_ms = self.backoff.next_ms()
            log.warning("carry failed (%s); retrying in %d ms", exc, wait_ms)
            self._sleep_until(self.clock.now_ms() + wait_ms, force=True)
            return
        self.backoff.reset()
        self._sleep_until(next_due, force=True)

    def _wake(self, due_ms: int) -> None:
        if due_ms <= self.clock.now_ms():
            self._carry("wake")
        elif self.timer_at_ms is None or due_ms < self.timer_at_ms:
            self._sleep_until(due_ms, force=True)

    def _sleep_until(self, at_ms: int | None, force: bool) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_at_ms = None, at_ms
        if at_ms is not None:
            self.timer = self.tell_at(at_ms, Carry("timer"))


class WakeSubscriber:
    """A thread that turns wake-channel messages into Wake messages for the carrier.

    After a dropped connection it subscribes again and asks for a carry, because a wake
    published while it was away is lost (pub/sub keeps nothing).
    """

    def __init__(self, store: Store, carrier: pykka.ActorRef[Any]) -> None:
        self.store = store
        self.carrier = carrier
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redelay-wake", daemon=True)

    def start(self, timeout_s: float = 5.0) -> None:
        self._thread.start()
        # Subscribe before the first carry, so no wake can fall between the two.
        self._subscribed.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        backoff = Backoff()
        first = True
        while not self._stop.is_set():
            pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(self.store.keys.wake_channel)
                pubsub.get_message(timeout=1.0)  # the subscribe confirmation
                self._subscribed.set()
                if not first:
                    self._tell(Carry("resubscribed"))
                first = False
                backoff.reset()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None and message["type"] == "message":
                        self._tell(Wake(int(message["data"])))
            except (redis.RedisError, OSError) as exc:
                self._subscribed.set()  # do not hold up start(); the carrier runs on timers
                wait_s = backoff.next_ms() / 1000
                log.warning("wake channel lost (%s); resubscribing in %.2fs", exc, wait_s)
                self._stop.wait(wait_s)
            finally:
                with contextlib.suppress(redis.RedisError, OSError):
                    pubsub.close()

    def _tell(self, message: Any) -> None:
        try:
            self.carrier.tell(message)
        except pykka.ActorDeadError:
            self._stop.set()
