"""ShardNotifier: one pub/sub connection turns every shard's notices into actor messages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pykka
import pytest
import redis
from _wait import wait_until

from actors.clock import FakeClock
from actors.runtime.messages import Carry, ReadyNotice, Wake
from actors.runtime.notifier import ShardNotifier
from actors.storage.store import Store


class Inbox(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.got: list[Any] = []
        self.lock = threading.Lock()

    def on_receive(self, message: Any) -> Any:
        if message == "read":
            with self.lock:
                return list(self.got)
        with self.lock:
            self.got.append(message)
        return None


def received(ref: pykka.ActorRef[Any]) -> list[Any]:
    got: list[Any] = ref.ask("read", block=True, timeout=5)
    return got


@pytest.fixture
def store(redis_client: redis.Redis, fake_clock: FakeClock) -> Store:
    return Store(redis_client, "n", fake_clock, shards=3)


@pytest.fixture
def notifier(store: Store) -> Iterator[ShardNotifier]:
    started = ShardNotifier(store.client, store.wake_channels, store.ready_channels).start()
    yield started
    started.stop()


def test_notices_reach_the_listeners_of_their_topic_and_wakes_the_carriers(
    store: Store, notifier: ShardNotifier, fake_clock: FakeClock
) -> None:
    carrier, mail, other = Inbox.start(), Inbox.start(), Inbox.start()
    notifier.watch_wake(carrier)
    notifier.watch_ready("mail", mail)
    notifier.watch_ready("other", other)
    store.add(store.new_job("mail", "a"))  # due now: onto an empty ready list
    wait_until(lambda: received(mail) == [ReadyNotice()], "a ready notice")
    store.add(store.new_job("mail", "later", delay_ms=500))
    wait_until(lambda: received(carrier) == [Wake(fake_clock.now_ms() + 500)], "a wake")
    assert received(other) == []
    notifier.unwatch_ready("mail", mail)
    store.add(store.new_job("mail", "b", delay_ms=0))
    store.add(store.new_job("other", "c"))
    wait_until(lambda: received(other) == [ReadyNotice()], "the other topic's notice")
    assert received(mail) == [ReadyNotice()]  # unwatched: nothing more


def test_notices_that_arrive_together_are_told_once(
    store: Store, notifier: ShardNotifier, fake_clock: FakeClock
) -> None:
    listener, carrier = Inbox.start(), Inbox.start()
    notifier.watch_ready("t", listener)
    notifier.watch_wake(carrier)
    # One pipeline of three shards' adds: three ready notices, sent back to back.
    store.add_many([store.new_job("t", f"j{n}") for n in range(30)])
    wait_until(lambda: notifier.messages >= 3, "the three notices")
    assert 1 <= len(received(listener)) < 3


def test_after_a_lost_connection_everyone_looks_again(
    redis_client: redis.Redis, notifier: ShardNotifier
) -> None:
    listener, carrier = Inbox.start(), Inbox.start()
    notifier.watch_ready("t", listener)
    notifier.watch_wake(carrier)
    redis_client.client_kill_filter(_type="pubsub")
    wait_until(lambda: notifier.resubscribes >= 1, "a resubscription")
    wait_until(lambda: received(carrier) == [Carry("resubscribed")], "a carry")
    wait_until(lambda: received(listener) == [ReadyNotice()], "a look")


def test_a_waiting_listener_is_told_once_and_a_notice_during_its_lease_is_not_lost(
    store: Store, notifier: ShardNotifier
) -> None:
    listener = Inbox.start()
    mark = notifier.ready_mark("t")  # what a listener reads before its lease
    store.add(store.new_job("t", "during-the-lease"))  # its notice arrives before it asks
    wait_until(lambda: notifier.ready_mark("t") != mark, "the notice")
    notifier.await_ready("t", listener, mark)
    wait_until(lambda: received(listener) == [ReadyNotice()], "the notice told at once")

    notifier.await_ready("t", listener, notifier.ready_mark("t"))
    assert received(listener) == [ReadyNotice()]  # nothing new yet: it waits
    seen = notifier.messages
    store.add_many([store.new_job("t", f"j{n}") for n in range(30)])  # notices on other shards
    wait_until(lambda: notifier.messages > seen, "the next notices")
    wait_until(lambda: len(received(listener)) == 2, "the next notice")
    assert len(store.lease("t", 100)) == 31  # every list empty again
    seen = notifier.messages
    store.add(store.new_job("t", "unasked"))
    wait_until(lambda: notifier.messages > seen, "a notice nobody waits for")
    assert received(listener) == [ReadyNotice(), ReadyNotice()]  # told once per await_ready


def test_after_a_lost_connection_a_waiting_listener_looks_again(
    redis_client: redis.Redis, notifier: ShardNotifier
) -> None:
    waiting = Inbox.start()
    notifier.await_ready("t", waiting, notifier.ready_mark("t"))
    redis_client.client_kill_filter(_type="pubsub")
    wait_until(lambda: notifier.resubscribes >= 1, "a resubscription")
    wait_until(lambda: received(waiting) == [ReadyNotice()], "a look")
