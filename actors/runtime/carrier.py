"""Carrier: moves due jobs to their topic's ready list, in bounded batches.

It sleeps until the earliest due time (a clock timer) and wakes early when an earlier job is
added: the add and fail scripts publish the due time on the shard's wake channel when a job
becomes the earliest, every process's carrier hears it (through its WakeSubscriber thread), so a
job added by a producer-only process is carried on time. The watchdog's periodic Carry is the
backstop for a wake message that was lost anyway.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from typing import Any

import pykka
import redis

from actors.clock import Clock, Timer
from actors.runtime._actor import RedelayActor
from actors.runtime._backoff import Backoff
from actors.runtime.messages import Carry, Stats, Wake
from actors.runtime.notifier import ShardNotifier
from actors.storage.store import Store

log = logging.getLogger("actors.carrier")

# Most carry calls per message before yielding the mailbox to other messages (e.g. a stop).
_ROUNDS_PER_MESSAGE = 20


class Carrier(RedelayActor):
    def __init__(
        self,
        store: Store,
        clock: Clock,
        supervisor: pykka.ActorRef[Any] | None = None,
        batch: int = 1_000,
        name: str = "carrier",
        notifier: ShardNotifier | None = None,
    ) -> None:
        super().__init__(name, clock, supervisor)
        self.store = store
        self.batch = batch
        self.backoff = Backoff()
        self.timer: Timer | None = None
        self.timer_at_ms: int | None = None
        self.carried = 0
        self.carries = 0
        self.reasons: Counter[str] = Counter()
        self.subscriber: WakeSubscriber | None = None
        self.notifier = notifier  # a sharded store's wakes come through the process's notifier

    def started(self) -> None:
        if self.notifier is not None:
            self.notifier.watch_wake(self.actor_ref)  # it subscribed before any actor started
        else:
            assert isinstance(self.store, Store), "a sharded store needs a ShardNotifier"
            self.subscriber = WakeSubscriber(self.store, self.actor_ref)
            self.subscriber.start()
        self.actor_ref.tell(Carry("start"))

    def on_stop(self) -> None:
        super().on_stop()
        if self.subscriber is not None:
            self.subscriber.stop()
        if self.notifier is not None:
            self.notifier.unwatch_wake(self.actor_ref)

    def on_failure(self, *args: Any) -> None:
        if self.subscriber is not None:
            self.subscriber.stop()
        if self.notifier is not None:
            self.notifier.unwatch_wake(self.actor_ref)
        super().on_failure(*args)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Carry):
            self.reasons[message.reason] += 1
            self._carry()
        elif isinstance(message, Wake):
            self._wake(message.due_ms)
        elif isinstance(message, Stats):
            return {
                "carried": self.carried,
                "carries": self.carries,
                "next_ms": self.timer_at_ms,
                "failures": self.backoff.failures,
                "reasons": dict(self.reasons),
            }
        return None

    def _carry(self) -> None:
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
            self._sleep_until(self.clock.now_ms() + wait_ms, retry=True)
            return
        self.backoff.reset()
        self._sleep_until(next_due)

    def _wake(self, due_ms: int) -> None:
        if due_ms <= self.clock.now_ms():
            self.reasons["wake"] += 1
            self._carry()
        elif self.timer_at_ms is None or due_ms < self.timer_at_ms:
            self._sleep_until(due_ms)

    def _sleep_until(self, at_ms: int | None, retry: bool = False) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_at_ms = None, at_ms
        if at_ms is not None:
            self.timer = self.tell_at(at_ms, Carry("retry" if retry else "timer"))


class WakeSubscriber:
    """A thread that turns wake-channel messages into Wake messages for the carrier.

    Pub/sub keeps nothing: a wake published while the connection was down is lost. So every
    subscription after the first (redis-py may resubscribe on its own after a reconnect, or we do
    after an error) asks the carrier for a carry, which finds whatever was added meanwhile.
    """

    def __init__(self, store: Store, carrier: pykka.ActorRef[Any], poll_s: float = 0.25) -> None:
        self.store = store
        self.carrier = carrier
        self.poll_s = poll_s  # how often the thread looks at its stop flag; no Redis traffic
        self.subscriptions = 0
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redelay-wake", daemon=True)

    def start(self, timeout_s: float = 5.0) -> None:
        self._thread.start()
        # Subscribe before the first carry, so no wake can fall between the two.
        self._subscribed.wait(timeout_s)

    def stop(self, join_s: float = 1.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=join_s)

    def _run(self) -> None:
        backoff = Backoff()
        channel = self.store.keys.wake_channel.encode()
        while not self._stop.is_set():
            pubsub = self.store.client.pubsub()  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(channel)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=self.poll_s)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self._subscription()
                        backoff.reset()
                    elif message["type"] == "message":
                        self._tell(Wake(int(message["data"])))
            except Exception as exc:  # e.g. the client closed under us: never end the thread
                self._subscribed.set()  # do not hold up start(); the carrier runs on timers
                wait_s = backoff.next_ms() / 1000
                log.warning("wake channel lost (%s); resubscribing in %.2fs", exc, wait_s)
                self._stop.wait(wait_s)
            finally:
                with contextlib.suppress(Exception):
                    pubsub.close()

    def _subscription(self) -> None:
        self.subscriptions += 1
        if self.subscriptions > 1:
            self._tell(Carry("resubscribed"))
        self._subscribed.set()

    def _tell(self, message: Any) -> None:
        try:
            self.carrier.tell(message)
        except pykka.ActorDeadError:
            self._stop.set()
