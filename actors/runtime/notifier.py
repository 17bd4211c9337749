"""ShardNotifier: the one wake path of a process, for one shard as for many.

The scripts publish two signals on each shard's channels (see lua/_lib.lua, add-6, _place):

- ``<prefix>wake``: a due time, when a delayed job becomes the shard's earliest;
- ``<prefix>ready``: a topic, when its ready list goes from empty to non-empty, or when a lease
  leaves jobs behind (the leasing process was full, others may have room).

This thread subscribes to both channels of every shard on one connection (on Redis Cluster a
plain PUBLISH reaches every node, so any node will do) and turns messages into actor messages:
``Wake`` for the carriers, ``ReadyNotice`` for the listeners of the topic. So no actor waits on
Redis inside its own thread: a listener with nothing to lease waits for a notice in its mailbox,
and still answers stats and stop at once. One connection serves every shard and topic, where a
blocking wait would need one per topic per shard.

A busy listener needs no notice (its next lease is already coming: a Fetch, or the SlotsFreed of
its pool), and a backlog makes every lease publish one, so listeners ask for one notice at a time:
``await_ready`` after an empty lease, with the ``ready_mark`` they read before it. A notice that
arrived during that lease moved the mark, and is told at once; none is lost in between.

Pub/sub keeps nothing for a subscriber that is away, so after it subscribes again it tells every
carrier to carry and every listener to look.

A subscription only reads, so a connection that died silently (a partition, a middlebox that
forgot it) would leave it deaf for good: no read times out, and keepalive probes may be answered
by a proxy. So the thread PINGs it after hearing nothing for ``ping_s`` and calls it dead when
nothing at all came back within ``reply_s`` of a PING or a SUBSCRIBE (SubscriptionCheck): it
closes it, subscribes again on a new connection, and everyone looks. The client's other
connections went the same way, most likely (``drop_connections``): its idle ones are closed when
the subscription is given up, and once it is back every connection is closed, calls waiting on
one included, so they retry on a new one now rather than after their socket timeout (and the
retries redis-py makes of a timeout, each as long, when the connection it makes is lost too).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pykka

from actors._constants import SUBSCRIPTION_PING_S, SUBSCRIPTION_REPLY_S
from actors.runtime._backoff import Backoff, outage_of
from actors.runtime.messages import Carry, ReadyNotice, Wake
from actors.storage.store import Store

log = logging.getLogger("actors.notifier")

_BATCH_MAX = 1_000  # most messages folded into one round of tells
_READ_S = 0.25  # one wait for a message; also how often the stop flag and the check are looked at
_PING_DATA = b"redelay-notifier"


class SubscriptionLost(Exception):
    """Nothing came back on the subscription in time: its connection is taken for dead."""


class SubscriptionCheck:
    """When to PING a subscription and when to give it up, from monotonic times passed in."""

    def __init__(self, now_s: float, ping_s: float, reply_s: float) -> None:
        self.ping_s = ping_s
        self.reply_s = reply_s
        self.heard_s = now_s
        self.asked_s: float | None = now_s  # a new subscription waits for its confirmations

    def heard(self, now_s: float) -> None:
        self.heard_s, self.asked_s = now_s, None

    def ping_due(self, now_s: float) -> bool:
        return self.asked_s is None and now_s - self.heard_s >= self.ping_s

    def asked(self, now_s: float) -> None:
        self.asked_s = now_s

    def dead(self, now_s: float) -> bool:
        return self.asked_s is not None and now_s - self.asked_s >= self.reply_s


class ShardNotifier:
    def __init__(
        self,
        client: Any,
        wake_channels: Sequence[str],
        ready_channels: Sequence[str],
        *,
        drop_connections: Callable[[bool], None] | None = None,
        ping_s: float = SUBSCRIPTION_PING_S,
        reply_s: float = SUBSCRIPTION_REPLY_S,
    ) -> None:
        self.client = client
        # Closes the client's idle connections (False) or all of them (True): see the docstring.
        self.drop_connections = drop_connections
        self._lost_since_subscribed = False
        self.ping_s = ping_s
        self.reply_s = reply_s
        self.wake_channels = set(wake_channels)
        self.ready_channels = set(ready_channels)
        self._lock = threading.Lock()
        self._carriers: list[pykka.ActorRef[Any]] = []
        self._listeners: dict[str, list[pykka.ActorRef[Any]]] = {}  # told every notice
        self._waiting: dict[str, set[pykka.ActorRef[Any]]] = {}  # told the next notice only
        self._notices: dict[str, int] = {}  # notices received per topic
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redelay-notifier", daemon=True)
        self.messages = 0
        self.confirmations = 0
        self._round = 0  # confirmations on the current connection since its last full round
        self.resubscribes = 0
        self.lost = 0  # subscriptions given up for silence

    # -- registration (any thread) ----------------------------------------------------------

    def watch_wake(self, carrier: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._carriers.append(carrier)

    def unwatch_wake(self, carrier: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._carriers = [ref for ref in self._carriers if ref != carrier]

    def watch_ready(self, topic: str, listener: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._listeners.setdefault(topic, []).append(listener)

    def unwatch_ready(self, topic: str, listener: pykka.ActorRef[Any]) -> None:
        with self._lock:
            refs = [ref for ref in self._listeners.get(topic, []) if ref != listener]
            if refs:
                self._listeners[topic] = refs
            else:
                self._listeners.pop(topic, None)
            self._waiting.get(topic, set()).discard(listener)

    def ready_mark(self, topic: str) -> int:
        """Grows with every notice for the topic and every resubscription; read before a lease."""
        with self._lock:
            return self._notices.get(topic, 0) + self.resubscribes

    def await_ready(self, topic: str, listener: pykka.ActorRef[Any], mark: int) -> None:
        """Tells the listener ReadyNotice once: at once if the mark moved since it was read,
        else at the topic's next notice (or the next resubscription)."""
        with self._lock:
            moved = self._notices.get(topic, 0) + self.resubscribes != mark
            if not moved:
                self._waiting.setdefault(topic, set()).add(listener)
        if moved:
            _tell(listener, ReadyNotice())

    # -- the thread -------------------------------------------------------------------------

    def start(self, timeout_s: float = 5.0) -> ShardNotifier:
        """Subscribes before returning (within ``timeout_s``), so actors started next miss
        nothing published after they first look at Redis."""
        self._thread.start()
        self._subscribed.wait(timeout_s)
        return self

    def stop(self, wait_s: float = 2.0) -> bool:
        """Ends the thread (within one read, unless it waits on a connection); waits up to
        ``wait_s`` for it. True when it ended."""
        self._stop.set()
        return self.wait(wait_s)

    def wait(self, timeout_s: float) -> bool:
        if self._thread is threading.current_thread() or not self._thread.is_alive():
            return True
        if timeout_s > 0:
            self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        # At most a second between tries: one connection, and each try after a heal that it
        # misses delays every wake-up of the process.
        backoff = Backoff(max_ms=1_000, outage=outage_of(self.client), name="notifier")
        channels = sorted(self.wake_channels | self.ready_channels)
        while not self._stop.is_set():
            pubsub = self.client.pubsub()
            self._round = 0
            try:
                check = SubscriptionCheck(time.monotonic(), self.ping_s, self.reply_s)
                pubsub.subscribe(*channels)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=_READ_S)
                    now_s = time.monotonic()
                    if message is not None:
                        check.heard(now_s)
                    elif check.dead(now_s):
                        self._lose(now_s - check.heard_s)
                    elif check.ping_due(now_s):
                        pubsub.ping(_PING_DATA)
                        check.asked(now_s)
                    # What arrived together is told together: a carry that filled the lists of
                    # five shards makes one notice per listener, not five.
                    notices: list[tuple[bytes | str, bytes | str]] = []
                    while message is not None:
                        if message["type"] == "subscribe":
                            self._confirmed(len(channels))
                            backoff.redis_ok()
                        elif message["type"] == "message":
                            notices.append((message["channel"], message["data"]))
                        if len(notices) >= _BATCH_MAX:
                            break
                        message = pubsub.get_message(timeout=0.0)
                    if notices:
                        self._dispatch(notices)
            except Exception as exc:  # e.g. the client closed under us: never end the thread
                self._subscribed.set()  # do not hold up start(); the actors fall back to timers
                wait_s = backoff.redis_failed(exc, "subscribe") / 1000
                self._stop.wait(wait_s)
            finally:
                with contextlib.suppress(Exception):
                    pubsub.close()

    def _lose(self, silent_s: float) -> None:
        """Gives the subscription up (the caller's ``finally`` closes it) and the client's idle
        connections with it."""
        self.lost += 1
        self._lost_since_subscribed = True
        self._drop(in_use=False)
        raise SubscriptionLost(
            f"nothing heard on the subscription for {silent_s:.1f} s, {self.reply_s:g} s after"
            " asking; its connection is taken for dead"
        )

    def _drop(self, *, in_use: bool) -> None:
        if self.drop_connections is None:
            return
        try:
            self.drop_connections(in_use)
        except Exception as exc:  # closing is best effort; subscribing again is what matters
            log.warning("notifier: closing the client's connections failed: %r", exc)

    def _confirmed(self, channels: int) -> None:
        """Counts subscribe confirmations, a round of ``channels`` at a time on one connection.
        Every full round after the first (we subscribed again after an error, or redis-py did
        after a reconnect) may have missed messages."""
        self.confirmations += 1
        self._round += 1
        if self._round < channels:
            return
        self._round = 0
        if not self._subscribed.is_set():
            self._subscribed.set()
        else:
            with self._lock:
                self.resubscribes += 1
            if self._lost_since_subscribed:
                self._lost_since_subscribed = False
                self._drop(in_use=True)
            self._everyone_look()

    def _dispatch(self, notices: list[tuple[bytes | str, bytes | str]]) -> None:
        earliest_due: int | None = None
        topics: set[str] = set()
        for raw_channel, raw_data in notices:
            channel = raw_channel.decode() if isinstance(raw_channel, bytes) else raw_channel
            data = raw_data.decode() if isinstance(raw_data, bytes) else raw_data
            self.messages += 1
            if channel in self.wake_channels:
                due = int(data)
                earliest_due = due if earliest_due is None else min(earliest_due, due)
            elif channel in self.ready_channels:
                topics.add(data)
        with self._lock:
            carriers = list(self._carriers)
            listeners = [ref for topic in topics for ref in self._listeners.get(topic, ())]
            for topic in topics:
                self._notices[topic] = self._notices.get(topic, 0) + 1
                listeners += self._waiting.pop(topic, ())
        if earliest_due is not None:
            for ref in carriers:
                _tell(ref, Wake(earliest_due))
        for ref in listeners:
            _tell(ref, ReadyNotice())

    def _everyone_look(self) -> None:
        with self._lock:
            carriers = list(self._carriers)
            listeners = [ref for refs in self._listeners.values() for ref in refs]
            listeners += [ref for refs in self._waiting.values() for ref in refs]
            self._waiting.clear()
        for ref in carriers:
            _tell(ref, Carry("resubscribed"))
        for ref in listeners:
            _tell(ref, ReadyNotice())


def notifier_for(store: Store) -> ShardNotifier:
    """A notifier (not started) for every shard of the store's namespace."""
    return ShardNotifier(
        store.client,
        store.wake_channels,
        store.ready_channels,
        drop_connections=store.drop_connections,
    )


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    # A stopped actor unregisters itself; one that died between is replaced by the watchdog.
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
