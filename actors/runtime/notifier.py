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
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

import pykka

from actors.runtime._backoff import Backoff, outage_of
from actors.runtime.messages import Carry, ReadyNotice, Wake
from actors.storage.store import Store

log = logging.getLogger("actors.notifier")

_BATCH_MAX = 1_000  # most messages folded into one round of tells


class ShardNotifier:
    def __init__(
        self, client: Any, wake_channels: Sequence[str], ready_channels: Sequence[str]
    ) -> None:
        self.client = client
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
        self.resubscribes = 0

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

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        backoff = Backoff(outage=outage_of(self.client), name="notifier")
        channels = sorted(self.wake_channels | self.ready_channels)
        while not self._stop.is_set():
            pubsub = self.client.pubsub()
            try:
                pubsub.subscribe(*channels)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.25)
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

    def _confirmed(self, channels: int) -> None:
        """Counts subscribe confirmations. Every full round after the first (we subscribed
        again after an error, or redis-py did after a reconnect) may have missed messages."""
        self.confirmations += 1
        if self.confirmations % channels:
            return
        if self.confirmations == channels:
            self._subscribed.set()
        else:
            with self._lock:
                self.resubscribes += 1
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
    return ShardNotifier(store.client, store.wake_channels, store.ready_channels)


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    # A stopped actor unregisters itself; one that died between is replaced by the watchdog.
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
