"""Connections that die without a word (simulations/crash/proxy.py between redelay and a real
redis-server on TCP): the notifier notices a deaf subscription within its documented bound and
subscribes again, a worker process delivers a delayed job another process added during a
partition within seconds of the heal, and a producer's call on a forgotten connection ends
(docs/operations.md#network-faults). Run on the oldest redis-py too (Makefile OLDEST_TESTS):
redis-py 5.3 sets no timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator

import pytest
import redis
from _processes import WorkerProcess, deliveries
from _wait import WAIT_S, wait_until

from actors import AsyncDelayQueue, DelayQueue
from actors import _constants as c
from actors.clock import FakeClock
from actors.runtime.notifier import ShardNotifier, SubscriptionCheck
from actors.server.embedded import RedisProcess
from actors.storage.liveness import client_options, keepalive_options
from actors.storage.store import Store
from actors.storage.topology import connect
from simulations.crash.proxy import Proxy

TcpRedis = tuple[RedisProcess, tuple[str, int]]

# The notifier's worst case from a silent death to giving the subscription up: a PING after
# SUBSCRIPTION_PING_S of silence, SUBSCRIPTION_REPLY_S for anything to come back, one read.
DETECTION_S = c.SUBSCRIPTION_PING_S + c.SUBSCRIPTION_REPLY_S + 0.25
# What a 2-core machine shared by other test runs may add to a bound (threads waiting for a core).
SLACK_S = 2.0
PARTITION_S = 4.0  # long enough for the delayed job to fall due inside it


def test_subscription_check_pings_after_silence_and_gives_up_without_a_reply() -> None:
    check = SubscriptionCheck(100.0, ping_s=2.0, reply_s=3.0)
    assert not check.ping_due(101.0) and not check.dead(102.9)  # waiting for its confirmations
    assert check.dead(103.0)
    check.heard(103.5)
    assert not check.ping_due(105.4) and check.ping_due(105.5)
    check.asked(105.5)
    assert not check.ping_due(107.0) and not check.dead(108.4) and check.dead(108.5)
    check.heard(108.0)  # anything at all, a message or the PONG
    assert not check.dead(120.0) and check.ping_due(120.0)


def test_clients_made_from_a_url_get_timeouts_and_keepalive_under_the_callers_own(
    proxy: Proxy,
) -> None:
    tcp = client_options("redis://h:1", {"socket_timeout": 9})
    assert tcp["socket_timeout"] == 9  # the caller's own wins
    assert tcp["socket_connect_timeout"] == c.SOCKET_CONNECT_TIMEOUT_S
    assert tcp["health_check_interval"] == c.HEALTH_CHECK_INTERVAL_S
    assert tcp["socket_keepalive"] is True
    assert tcp["socket_keepalive_options"][socket.TCP_KEEPIDLE] == c.KEEPALIVE_IDLE_S
    assert keepalive_options()[socket.TCP_KEEPCNT] == c.KEEPALIVE_PROBES
    unix = client_options("unix:///tmp/r.sock", {})
    assert "socket_keepalive" not in unix and unix["socket_timeout"] == c.SOCKET_TIMEOUT_S
    client = connect(f"{proxy.url}/0?socket_timeout=7")  # the URL's own wins too
    assert isinstance(client, redis.Redis)
    assert client.get_connection_kwargs()["socket_timeout"] == 7.0
    assert client.get_connection_kwargs()["socket_keepalive"] is True
    client.close()


@pytest.fixture
def notifier(proxy: Proxy, tcp_redis: TcpRedis) -> Iterator[ShardNotifier]:
    store = Store(connect(proxy.url), "test", FakeClock())
    started = ShardNotifier(
        store.client,
        store.wake_channels,
        store.ready_channels,
        drop_connections=store.drop_connections,
    ).start()
    yield started
    started.stop()
    store.client.close()


def test_a_forgotten_subscription_is_given_up_and_made_again_within_the_bound(
    notifier: ShardNotifier, proxy: Proxy, tcp_redis: TcpRedis
) -> None:
    publisher = tcp_redis[0].client()
    wake = sorted(notifier.wake_channels)[0]
    wait_until(lambda: publisher.pubsub_numsub(wake)[0][1] == 1, what="the subscription")
    proxy.forget()
    forgotten = time.monotonic()
    wait_until(lambda: notifier.resubscribes >= 1, what="a new subscription")
    took_s = time.monotonic() - forgotten
    print(f"forgotten subscription replaced after {took_s:.2f} s")
    assert notifier.lost == 1
    assert took_s < DETECTION_S + SLACK_S
    # The new one hears what is published: a wake reaches it (counted as a message).
    before = notifier.messages
    wait_until(
        lambda: publisher.publish(wake, "1") and notifier.messages > before,
        what="a message on the new subscription",
    )


def test_a_busy_subscription_is_not_pinged_and_an_idle_one_stays(
    notifier: ShardNotifier, proxy: Proxy, tcp_redis: TcpRedis
) -> None:
    wake = sorted(notifier.wake_channels)[0]
    publisher = tcp_redis[0].client()
    wait_until(lambda: publisher.pubsub_numsub(wake)[0][1] == 1, what="the subscription")
    sent_before = proxy.delivered_up
    deadline = time.monotonic() + c.SUBSCRIPTION_PING_S + c.SUBSCRIPTION_REPLY_S + 1
    while time.monotonic() < deadline:  # published faster than the ping interval
        publisher.publish(wake, "1")
        time.sleep(0.2)  # the publishing rate under test, not a wait for something to happen
    assert proxy.delivered_up == sent_before  # no PING went up
    assert notifier.lost == 0 and notifier.resubscribes == 0
    idle = time.monotonic() + c.SUBSCRIPTION_PING_S + c.SUBSCRIPTION_REPLY_S + 1
    wait_until(lambda: time.monotonic() > idle, what="an idle spell")
    assert proxy.delivered_up > sent_before  # pinged while idle, answered, kept
    assert notifier.lost == 0 and notifier.resubscribes == 0


@pytest.mark.parametrize("fault", ["forget", "partition-then-forget"])
def test_a_delayed_job_from_another_process_is_delivered_soon_after_the_heal(
    proxy: Proxy, tcp_redis: TcpRedis, fault: str
) -> None:
    server = tcp_redis[0]
    namespace = "nf"
    worker = WorkerProcess(proxy.url, namespace, "--record-url", server.url, "--concurrency", "2")
    producer = DelayQueue(server.url, namespace=namespace, producer_only=True)  # around the proxy
    direct = server.client()
    try:
        worker.expect("started")
        producer.add("t", "warm")
        wait_until(lambda: deliveries(direct, namespace), what="a first delivery")
        if fault == "forget":
            proxy.forget()
            producer.add("t", "late", delay=2)
            healed = time.monotonic()
        else:
            proxy.blackhole()
            producer.add("t", "late", delay=2)
            time.sleep(PARTITION_S)  # the partition's length is the fault under test
            proxy.forget()  # the middlebox comes back without its table
            proxy.heal()
            healed = time.monotonic()
        found = wait_until(
            lambda: [d for d in deliveries(direct, namespace) if d[0] == "late"],
            what="the delayed job delivered",
            timeout_s=WAIT_S + 60,  # the watchdog's once-a-minute carry would come at last
        )
        took_s = time.monotonic() - healed
        print(f"{fault}: delivered {took_s:.2f} s after the heal, {found}")
        # Found dead within DETECTION_S of the last thing heard (the heal, at the latest), then
        # a new subscription and a carry on a fresh connection.
        assert took_s < DETECTION_S + SLACK_S + 1
    finally:
        worker.kill()
        producer.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_producer_call_on_a_forgotten_connection_ends(proxy: Proxy, face: str) -> None:
    """A call that will never be answered ends after the socket timeout (raising, or retried by
    redis-py on a new connection), rather than holding the caller forever."""
    limit_s = 4 * c.SOCKET_TIMEOUT_S + SLACK_S  # redis-py 8 retries a timeout 3 times
    if face == "sync":
        queue = DelayQueue(proxy.url, namespace="nf", producer_only=True)
        queue.add("t", "first")
        proxy.forget()
        started = time.monotonic()
        try:
            queue.add("t", "second")
        except redis.TimeoutError:
            pass
        finally:
            queue.close()
    else:

        async def run() -> None:
            async with AsyncDelayQueue(proxy.url, namespace="nf") as queue:
                await queue.add("t", "first")
                proxy.forget()
                with contextlib.suppress(redis.TimeoutError):
                    await asyncio.wait_for(queue.add("t", "second"), timeout=limit_s + 5)

        started = time.monotonic()
        asyncio.run(run())
    assert time.monotonic() - started < limit_s
