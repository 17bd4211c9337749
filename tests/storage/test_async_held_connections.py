"""Pipelines on held redis.asyncio connections (actors/storage/async_held_connections.py) behave as
redis.asyncio's own pipelines do: replies and error replies in place, reconnection after the
server closed a connection or restarted, one connection per concurrent task, a cancelled call
leaving nothing unread behind, and every connection back in the pool on close.

Each test drives its coroutines with asyncio.run, as tests/runtime/test_async_queue.py does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from actors import AsyncDelayQueue
from actors.server.embedded import RedisProcess
from actors.storage.async_batch import AsyncScriptBatch
from actors.storage.async_held_connections import AsyncHeldConnections, async_holdable

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        return await make()

    return asyncio.run(wrapped())


def in_use(client: aredis.Redis) -> int:
    # redis-py has no public count of the connections it has handed out.
    return len(client.connection_pool._in_use_connections)


def no_retries(server: RedisProcess) -> aredis.Redis:
    """A client whose failed commands are not sent again: a stale connection must be noticed
    before the call, as redis-py's pool does when it hands one out, not by a retry after it."""
    return aredis.Redis.from_url(server.url, retry=Retry(NoBackoff(), 0))


def test_only_a_pooled_client_of_one_server_speaking_resp2_is_held(
    redis_server: RedisProcess,
) -> None:
    class Subclassed(aredis.Redis):
        pass

    url = redis_server.url
    assert async_holdable(aredis.Redis.from_url(url))
    assert not async_holdable(aredis.Redis.from_url(url, single_connection_client=True))
    assert not async_holdable(aredis.Redis.from_url(url, protocol=3))
    assert not async_holdable(aredis.Redis.from_url(url, encoding="latin-1"))
    assert not async_holdable(Subclassed.from_url(url))  # may override execute_command
    assert not async_holdable(Sentinel([("localhost", 1)]).master_for("mymaster"))
    assert not async_holdable(redis.Redis.from_url(url))  # the sync client has its own
    assert AsyncScriptBatch(aredis.Redis.from_url(url))._held is not None
    assert AsyncScriptBatch(aredis.Redis.from_url(url, protocol=3))._held is None


def test_replies_and_error_replies_in_place(redis_server: RedisProcess) -> None:
    async def scenario() -> None:
        client = aredis.Redis.from_url(redis_server.url)
        held = AsyncHeldConnections(client)
        replies = await held.pipeline(
            [("SET", "k", "v"), ("GET", "k"), ("LPUSH", "k", "x"), ("ECHO", "after")]
        )
        assert replies[:2] == [b"OK", b"v"] and replies[3] == b"after"
        assert isinstance(replies[2], redis.ResponseError) and "WRONGTYPE" in str(replies[2])
        # The error reply was read whole: the connection is in step for the next call.
        assert await held.pipeline([("ECHO", "next")]) == [b"next"]
        assert in_use(client) == 1
        await held.close()
        assert in_use(client) == 0
        await client.aclose()

    run(scenario)


def test_a_connection_the_server_closed_is_replaced_without_an_error(
    redis_server: RedisProcess,
) -> None:
    async def scenario() -> None:
        client, killer = no_retries(redis_server), aredis.Redis.from_url(redis_server.url)
        held = AsyncHeldConnections(client)
        (my_id,) = await held.pipeline([("CLIENT", "ID")])
        # Awaited on the same loop, so the loop reads the killed socket's end-of-file (sent
        # before the kill's reply) as redis-py's pool needs it to.
        assert await killer.client_kill_filter(_id=my_id) == 1
        assert await held.pipeline([("ECHO", "again")]) == [b"again"]
        (new_id,) = await held.pipeline([("CLIENT", "ID")])
        assert new_id != my_id
        await held.close()
        await client.aclose()
        await killer.aclose()

    run(scenario)


def test_calls_after_a_server_restart_reconnect(
    redis_factory: Callable[..., RedisProcess],
) -> None:
    server = redis_factory()

    async def scenario() -> None:
        client = no_retries(server)
        held = AsyncHeldConnections(client)
        assert await held.pipeline([("ECHO", "before")]) == [b"before"]
        await asyncio.to_thread(server.restart)  # the loop runs on, as a service's does
        assert await held.pipeline([("ECHO", "after")]) == [b"after"]
        await held.close()
        await client.aclose()

    run(scenario)


def test_concurrent_tasks_each_get_their_own_replies_and_connection(
    redis_server: RedisProcess,
) -> None:
    async def scenario() -> tuple[list[tuple[str, Any]], int, int]:
        client = aredis.Redis.from_url(redis_server.url)
        held = AsyncHeldConnections(client)
        mismatches: list[tuple[str, Any]] = []

        async def caller(n: int) -> None:
            for k in range(50):
                texts = [f"{n}-{k}-a", f"{n}-{k}-b"]
                replies = await held.pipeline([("ECHO", text) for text in texts])
                if replies != [text.encode() for text in texts]:
                    mismatches.append((texts[0], replies))

        await asyncio.gather(*(caller(n) for n in range(40)))
        held_at_most = in_use(client)
        await held.close()
        after_close = in_use(client)
        await client.aclose()
        return mismatches, held_at_most, after_close

    mismatches, held_at_most, after_close = run(scenario)
    assert mismatches == []
    assert 1 < held_at_most <= 40  # the tasks' calls overlapped, each on its own connection
    assert after_close == 0


def test_a_cancelled_call_leaves_no_reply_behind(redis_server: RedisProcess) -> None:
    async def scenario() -> None:
        client, other = no_retries(redis_server), aredis.Redis.from_url(redis_server.url)
        await other.delete("empty")
        held = AsyncHeldConnections(client)
        blocked = asyncio.create_task(held.pipeline([("BLPOP", "empty", "10")]))
        while (await other.info("clients"))["blocked_clients"] != 1:
            pass  # until the server has the BLPOP
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        # The cancelled BLPOP's connection was closed: it neither takes the next push nor
        # hands its reply to the next call.
        await other.rpush("empty", "v")
        assert await held.pipeline([("ECHO", "next")]) == [b"next"]
        assert await other.llen("empty") == 1
        await held.close()
        await client.aclose()
        await other.aclose()

    run(scenario)


def test_closing_the_queue_gives_the_held_connections_back(redis_server: RedisProcess) -> None:
    async def scenario() -> tuple[int, int]:
        client = aredis.Redis.from_url(redis_server.url)
        queue = AsyncDelayQueue(client, namespace="held")
        await asyncio.gather(*(queue.add("t", f"j{n}", delay=60) for n in range(3)))
        store = await queue.store()
        held = store._batch._held
        assert held is not None
        # The first script call took a connection out of the pool and kept it.
        held_before_close = len(held._idle)
        await queue.aclose()
        return held_before_close, in_use(client)

    held_before_close, after_close = run(scenario)
    assert held_before_close >= 1
    assert after_close == 0


def test_scripts_the_server_forgot_are_loaded_again_on_the_held_connection(
    redis_server: RedisProcess,
) -> None:
    async def scenario() -> tuple[list[str], int, int]:
        client = aredis.Redis.from_url(redis_server.url)
        queue = AsyncDelayQueue(client, namespace="reload")
        added = [await queue.add("t", "a", delay=60)]
        other = aredis.Redis.from_url(redis_server.url)
        await other.script_flush()  # as after a restart or a failover
        await other.aclose()
        added += await asyncio.gather(*(queue.add("t", f"b{n}", delay=60) for n in range(3)))
        pool = client.connection_pool
        # One connection all along: SCRIPT LOAD went out on the held one, not a pool's second.
        counts = len(pool._in_use_connections), len(pool._available_connections)
        await queue.aclose()
        return added, *counts

    added, in_use_count, available = run(scenario)
    assert added == ["new"] * 4
    assert (in_use_count, available) == (1, 0)


def test_a_pipeline_stream_reads_each_pipeline_in_the_order_sent(
    redis_server: RedisProcess,
) -> None:
    async def scenario() -> None:
        client = aredis.Redis.from_url(redis_server.url)
        held = AsyncHeldConnections(client)
        stream = await held.stream()
        await stream.send([("RPUSH", "order", "a"), ("ECHO", "first")])
        await stream.send([("RPUSH", "order", "b"), ("LPUSH", "order-x", "x"), ("GET", "order")])
        assert stream.unread == 2
        assert await stream.read() == [1, b"first"]
        second = await stream.read()
        assert second[:2] == [2, 1] and isinstance(second[2], redis.ResponseError)
        with pytest.raises(RuntimeError, match="unread"):
            await stream.read()
        await stream.close()
        assert await client.lrange("order", 0, -1) == [b"a", b"b"]
        # A stream closed with a reply unread: the next caller does not read it as its own.
        unread = await held.stream()
        await unread.send([("ECHO", "never read")])
        await unread.close()
        assert await held.pipeline([("ECHO", "mine")]) == [b"mine"]
        with pytest.raises(RuntimeError, match="closed"):
            await unread.send([("ECHO", "late")])
        await held.close()
        await client.aclose()

    run(scenario)


def test_a_health_check_never_reads_a_reply_meant_for_the_stream(
    redis_server: RedisProcess,
) -> None:
    """As the sync twin's test: a PING before a send, on a connection idle past the interval,
    must not read the reply of a pipeline sent before (actors/storage/liveness.py sets one)."""

    async def scenario() -> None:
        client = aredis.Redis.from_url(redis_server.url, health_check_interval=1)
        held = AsyncHeldConnections(client)
        stream = await held.stream()
        await stream.send([("ECHO", "first")])
        await asyncio.sleep(1.1)  # idle past the interval: the next send would check health
        await stream.send([("ECHO", "second")])
        assert await stream.read() == [b"first"]
        assert await stream.read() == [b"second"]
        await stream.close()
        await held.close()
        await client.aclose()

    run(scenario)
