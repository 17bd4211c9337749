"""The fault proxy (simulations/crash/proxy.py, shared by the tests and the chaos simulator) fails
as documented, against a real redis-server on TCP: a blackhole holds bytes and delivers them at
the heal, a reset sender's held bytes are dropped, forgotten connections stay dead after the heal
while new ones pass."""

from __future__ import annotations

import socket
import struct

import pytest
import redis
from _wait import wait_until
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors.server.embedded import RedisProcess
from simulations.crash.proxy import Proxy

TcpRedis = tuple[RedisProcess, tuple[str, int]]


def through(proxy: Proxy, timeout_s: float = 0.5) -> redis.Redis:
    return redis.Redis(
        host=proxy.host, port=proxy.port, socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
    )


def raw_set(sock: socket.socket, key: str, value: str) -> None:
    sock.sendall(
        f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n${len(value)}\r\n{value}\r\n".encode()
    )


def test_forwards_both_ways(proxy: Proxy, tcp_redis: TcpRedis) -> None:
    client = through(proxy)
    assert client.set("k", "v") and client.get("k") == b"v"
    assert proxy.accepted == 1 and proxy.delivered_up > 0


def test_a_blackhole_holds_bytes_until_the_heal(proxy: Proxy, tcp_redis: TcpRedis) -> None:
    direct = tcp_redis[0].client()
    client = through(proxy)
    client.ping()
    proxy.blackhole()
    with pytest.raises(redis.TimeoutError):
        client.set("held", "1")  # sent, never answered; the socket stays open
    fresh = through(proxy)
    with pytest.raises(redis.TimeoutError):
        fresh.ping()  # a new connection is accepted, and nothing passes either
    assert direct.get("held") is None
    proxy.heal()
    wait_until(lambda: direct.get("held") == b"1", what="the held SET delivered at the heal")


def test_a_reset_sender_loses_what_the_blackhole_held(proxy: Proxy, tcp_redis: TcpRedis) -> None:
    direct = tcp_redis[0].client()
    sock = socket.create_connection((proxy.host, proxy.port))
    raw_set(sock, "before", "1")
    wait_until(lambda: direct.get("before") == b"1", what="the SET before the blackhole")
    proxy.blackhole()
    raw_set(sock, "during", "1")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # an RST: its kernel stops retransmitting what was not delivered
    wait_until(lambda: proxy.links() == (1, 0), what="the link still held open")
    proxy.heal()
    wait_until(lambda: proxy.links() == (0, 0), what="the reset passed on at the heal")
    assert direct.get("during") is None


def test_forgotten_connections_stay_dead_and_new_ones_pass(
    proxy: Proxy, tcp_redis: TcpRedis
) -> None:
    direct = tcp_redis[0].client()
    old = through(proxy)
    old.ping()
    proxy.forget()
    assert proxy.links() == (1, 1)
    with pytest.raises(redis.TimeoutError):
        old.ping()  # redis-py closes the connection after the timeout: its FIN goes nowhere
    proxy.blackhole()
    proxy.heal()
    new = through(proxy)
    assert new.ping()
    assert proxy.links() == (2, 1)
    # The server still has the forgotten client: nobody told it. Ours, it and the new one.
    assert len(direct.client_list()) == 3
