"""Script calls on held connections (actors/storage/held_connections.py) behave as redis-py's own
path does: replies and error replies, reconnection after the server closed a connection or
restarted, one connection per concurrent caller, and every connection back in the pool on close."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors.server.embedded import RedisProcess
from actors.storage.held_connections import IDLE_MAX, HeldConnections, holdable
from actors.storage.scripts import ScriptRunner


def in_use(client: redis.Redis) -> int:
    # redis-py has no public count of the connections it has handed out.
    return len(client.connection_pool._in_use_connections)


def test_only_a_pooled_client_of_one_server_speaking_resp2_is_held(
    redis_server: RedisProcess,
) -> None:
    class Subclassed(redis.Redis):
        pass

    url = redis_server.url
    assert holdable(redis.Redis.from_url(url))
    assert not holdable(redis.Redis.from_url(url, single_connection_client=True))
    assert not holdable(redis.Redis.from_url(url, protocol=3))
    assert not holdable(Subclassed.from_url(url))  # may override execute_command
    assert ScriptRunner(redis.Redis.from_url(url)).held is not None
    assert ScriptRunner(redis.Redis.from_url(url, protocol=3)).held is None


def test_replies_and_error_replies(redis_client: redis.Redis) -> None:
    held = HeldConnections(redis_client)
    assert held.call("SET", "k", "v") == b"OK"
    assert held.call("GET", "k") == b"v"
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        held.call("LPUSH", "k", "x")
    # The error reply was read whole: the connection is in step for the next call.
    assert held.call("ECHO", "after") == b"after"
    replies = held.pipeline([("ECHO", "a"), ("LPUSH", "k", "x"), ("ECHO", "b")])
    assert replies[0] == b"a" and replies[2] == b"b"
    assert isinstance(replies[1], redis.ResponseError)
    assert in_use(redis_client) == 1
    held.close()


def no_retries(server: RedisProcess) -> redis.Redis:
    """A client whose failed commands are not sent again: a stale connection must be noticed
    before the call, as redis-py's pool does when it hands one out, not by a retry after it."""
    return redis.Redis.from_url(server.url, retry=Retry(NoBackoff(), 0))


def test_a_connection_the_server_closed_is_replaced_without_an_error(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    client = no_retries(redis_server)
    held = HeldConnections(client)
    my_id = held.call("CLIENT", "ID")
    redis_client.client_kill_filter(_id=my_id)
    assert held.call("ECHO", "again") == b"again"
    assert held.call("CLIENT", "ID") != my_id
    held.close()
    client.close()


def test_calls_after_a_server_restart_reconnect(
    redis_factory: Callable[..., RedisProcess],
) -> None:
    server = redis_factory()
    client = no_retries(server)
    held = HeldConnections(client)
    assert held.call("ECHO", "before") == b"before"
    server.restart()
    assert held.call("ECHO", "after") == b"after"
    held.close()
    client.close()


def test_concurrent_callers_each_get_their_own_reply_and_connection(
    redis_client: redis.Redis,
) -> None:
    held = HeldConnections(redis_client)
    mismatches: list[tuple[str, object]] = []
    start = threading.Barrier(12)

    def caller(n: int) -> None:
        start.wait()
        for k in range(200):
            text = f"{n}-{k}"
            reply = held.call("ECHO", text)
            if reply != text.encode():
                mismatches.append((text, reply))
            (echoed,) = held.pipeline([("ECHO", text)])
            if echoed != text.encode():
                mismatches.append((text, echoed))

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert mismatches == []
    # Twelve callers, but no more than IDLE_MAX kept idle: the rest went back to the pool.
    assert 1 <= in_use(redis_client) <= IDLE_MAX
    held.close()
    assert in_use(redis_client) == 0


def test_connections_go_back_to_the_pool_when_the_holder_is_collected(
    redis_client: redis.Redis,
) -> None:
    held = HeldConnections(redis_client)
    held.call("PING")
    assert in_use(redis_client) == 1
    del held
    assert in_use(redis_client) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_connection(redis_client: redis.Redis) -> None:
    held = HeldConnections(redis_client)
    parent_id = held.call("CLIENT", "ID")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its connection's id, never touch the parent's socket
        try:
            child_id = held.call("CLIENT", "ID")
            os.write(write_end, str(child_id).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    child_id = int(os.read(read_end, 100))
    os.waitpid(pid, 0)
    assert child_id != parent_id
    assert held.call("CLIENT", "ID") == parent_id  # the parent's connection is still in step
    held.close()


def test_a_pipeline_stream_reads_each_pipeline_in_the_order_sent(redis_client: redis.Redis) -> None:
    held = HeldConnections(redis_client)
    stream = held.stream()
    stream.send([("RPUSH", "order", "a"), ("ECHO", "first")])
    stream.send([("RPUSH", "order", "b"), ("LPUSH", "order-is-a-list", "x"), ("GET", "order")])
    assert stream.unread == 2
    assert stream.read() == [1, b"first"]
    second = stream.read()
    assert second[:2] == [2, 1] and isinstance(second[2], redis.ResponseError)  # in place
    with pytest.raises(RuntimeError, match="unread"):
        stream.read()
    stream.close()
    assert redis_client.lrange("order", 0, -1) == [b"a", b"b"]
    assert in_use(redis_client) == 1  # held idle, not lost
    held.close()


def test_a_health_check_never_reads_a_reply_meant_for_the_stream(
    redis_server: RedisProcess,
) -> None:
    """redis-py PINGs a connection idle past health_check_interval before a send, and reads the
    PONG: with a pipeline's replies unread that read would take them. Clients made from a URL
    have a health check (actors/storage/liveness.py)."""
    client = redis_server.client(health_check_interval=1)
    held = HeldConnections(client)
    stream = held.stream()
    stream.send([("ECHO", "first")])
    time.sleep(1.1)  # idle past the interval: the next send would check health
    stream.send([("ECHO", "second")])
    assert stream.read() == [b"first"]
    assert stream.read() == [b"second"]
    stream.close()
    held.close()
    client.close()


def test_a_stream_closed_with_replies_unread_leaves_no_reply_for_the_next_caller(
    redis_client: redis.Redis,
) -> None:
    held = HeldConnections(redis_client)
    stream = held.stream()
    stream.send([("ECHO", "never read")])
    stream.close()
    assert held.call("ECHO", "mine") == b"mine"  # the same connection, reconnected clean
    with pytest.raises(RuntimeError, match="closed"):
        stream.send([("ECHO", "late")])
    held.close()


def test_a_stream_is_broken_by_a_lost_server(redis_factory: Callable[..., RedisProcess]) -> None:
    server = redis_factory()
    held = HeldConnections(no_retries(server))
    stream = held.stream()
    stream.send([("ECHO", "x")])
    assert stream.read() == [b"x"]
    server.kill()
    with pytest.raises(redis.ConnectionError):
        stream.send([("ECHO", "y")])
        stream.read()
    with pytest.raises(RuntimeError, match="broken"):
        stream.send([("ECHO", "z")])
    stream.close()
