"""Pipelines on ``redis.asyncio`` connections held out of the client's pool: the async twin of
:mod:`actors.storage.held_connections`.

redis.asyncio pays more client CPU around a round trip than the sync client: it packs commands in
pure Python (hiredis is used to parse, never to pack), and a pipeline takes a connection from the
pool and gives it back (a lock, a readiness check, observability counters awaited on both ends),
wraps the whole in a retry with observability callbacks and runs every reply through the
client's parser. Here the commands are packed by hiredis and written with one
``send_packed_command``, and the connection stays out of the pool between calls: a pipeline of
two EVALSHA costs under half the client CPU it costs through redis.asyncio.

What stays redis-py's: its ``Connection`` connects (auth, TLS, Unix sockets), parses with hiredis,
disconnects itself when a read or write fails, and its ``Retry`` decides, as it does for
redis.asyncio's pipelines, whether a connection error is retried on a fresh connection. The
pool's check when it hands a connection out (data or end-of-file waiting on an idle connection
means a reply was left unread or its server closed it: reconnect) is made here when a held
connection is taken again. As with the pool, that check sees only what the event loop has read
from the socket, so a close the loop has not yet noticed surfaces as a connection error, retried
by the client's ``Retry``.

Connections come from the client's own pool, so its ``max_connections`` still bounds them, and go
back to it on :meth:`AsyncHeldConnections.close`; a client closed without it disconnects them
all the same (its pool disconnects the connections it handed out). Held connections are never
shared: a call takes one from the idle list (or the pool) and puts it back when its replies are
read. One object serves one event loop, as the client's connections do.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, cast

import hiredis
import redis
import redis.asyncio as aredis
from redis.asyncio.connection import ConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import ResponseError

from actors.storage.held_connections import IDLE_MAX, plain_replies


class AsyncHeldConnection(Protocol):
    """The part of redis.asyncio's ``Connection`` used here (unannotated in redis-py)."""

    retry: Retry

    @property
    def is_connected(self) -> bool: ...
    def send_packed_command(self, command: bytes, check_health: bool = True) -> Awaitable[None]: ...
    def read_response(self) -> Awaitable[Any]: ...
    # One or the other, by redis-py's version: see _data_waiting.
    def can_read(self) -> Awaitable[bool]: ...
    def can_read_destructive(self) -> Awaitable[bool]: ...
    def disconnect(self, nowait: bool = False) -> Awaitable[None]: ...


def _data_waiting(connection: AsyncHeldConnection) -> Awaitable[bool]:
    """Whether an idle connection has data waiting (its server closed it, or a reply was left
    unread). redis-py 8 names the check ``can_read``; 5.x to 7.x name it ``can_read_destructive``
    (deprecated by 8), and pyproject.toml admits redis-py from 5.3."""
    if hasattr(connection, "can_read"):
        return connection.can_read()
    return connection.can_read_destructive()


class AsyncPool(Protocol):
    """The part of redis.asyncio's ``ConnectionPool`` used here (unannotated in redis-py)."""

    def get_connection(self) -> Awaitable[Any]: ...
    def release(self, connection: Any) -> Awaitable[None]: ...


def async_holdable(client: object) -> bool:
    """Whether ``client`` sends every command to one server through a connection pool, the case
    this module serves (the sync :func:`~actors.storage.held_connections.holdable`'s test). A
    cluster client routes by key, a single-connection client locks its one connection, RESP3 may
    put push messages between replies, and a Sentinel-managed client keeps redis-py's path (its
    failover handling lives in the pool and connection classes this module would bypass in
    part): those keep redis-py's own path."""
    # A single-connection client takes its connection on its first command, not when made.
    if type(client) is not aredis.Redis or client.single_connection_client:
        return False
    pool = client.connection_pool
    if not isinstance(pool, ConnectionPool) or isinstance(pool, SentinelConnectionPool):
        return False
    return plain_replies(pool)


class AsyncHeldConnections:
    """Runs pipelines for one ``async_holdable`` client on one event loop. Concurrent tasks each
    have a connection of their own for the duration of their call."""

    def __init__(self, client: aredis.Redis) -> None:
        self._pool = cast(AsyncPool, client.connection_pool)
        self._idle: list[AsyncHeldConnection] = []

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Every command's reply in order, sent together; error replies are returned in place
        (a pipeline's ``raise_on_error=False``), a connection error is raised."""
        packed = b"".join([hiredis.pack_command(tuple(command)) for command in commands])
        connection = await self._take()
        try:
            return await connection.retry.call_with_retry(
                lambda: self._send_and_read(connection, packed, len(commands)),
                lambda _error: connection.disconnect(),
            )
        except BaseException:
            # Interrupted mid-reply (cancelled) or out of retries: the next call must start
            # clean. redis-py's Connection disconnects itself in both cases; not relied on here.
            await connection.disconnect(nowait=True)
            raise
        finally:
            await self._give_back(connection)

    async def close(self) -> None:
        """Gives the held connections back to the client's pool; later calls take them again."""
        connections = self._idle[:]
        self._idle.clear()
        for connection in connections:
            await self._pool.release(connection)

    async def _take(self) -> AsyncHeldConnection:
        try:
            connection = self._idle.pop()
        except IndexError:
            # Connected and checked by the pool.
            return cast(AsyncHeldConnection, await self._pool.get_connection())
        if not connection.is_connected:
            return connection  # connected again by the next send
        try:
            if await _data_waiting(connection):
                await connection.disconnect()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            await connection.disconnect()
        return connection

    async def stream(self) -> AsyncPipelineStream:
        """One connection taken for pipelines sent one after another, each read later in the
        order sent (see AsyncPipelineStream)."""
        return AsyncPipelineStream(self, await self._take())

    async def _give_back(self, connection: AsyncHeldConnection) -> None:
        if len(self._idle) < IDLE_MAX:
            self._idle.append(connection)
        else:  # as many set aside as the sync side keeps: the pool has it back
            await self._pool.release(connection)

    @staticmethod
    async def _read(connection: AsyncHeldConnection, replies: int) -> list[Any]:
        read: list[Any] = []
        for _ in range(replies):
            try:
                read.append(await connection.read_response())
            except ResponseError as error:
                read.append(error)
        return read

    @staticmethod
    async def _send_and_read(
        connection: AsyncHeldConnection, packed: bytes, replies: int
    ) -> list[Any]:
        await connection.send_packed_command(packed)
        return await AsyncHeldConnections._read(connection, replies)


class AsyncPipelineStream:
    """The async twin of held_connections.PipelineStream: pipelines sent on one held connection
    before the replies of the ones before are read, read back oldest first, so the server runs
    them in the order sent while the caller builds the next. Not retried: after a connection
    error (or a cancellation mid-read) the stream is broken. ``close()`` gives the connection
    back, disconnected when replies were left unread."""

    __slots__ = ("_broken", "_connection", "_held", "_unread")

    def __init__(self, held: AsyncHeldConnections, connection: AsyncHeldConnection) -> None:
        self._held = held
        self._connection: AsyncHeldConnection | None = connection
        self._unread: deque[int] = deque()
        self._broken = False

    @property
    def unread(self) -> int:
        return len(self._unread)

    async def send(self, commands: Sequence[Sequence[Any]]) -> None:
        connection = self._live()
        packed = b"".join([hiredis.pack_command(tuple(command)) for command in commands])
        try:
            # No health check (a PING whose PONG it reads) while replies are unread: it would
            # read one of them instead (see held_connections.PipelineStream.send).
            await connection.send_packed_command(packed, check_health=not self._unread)
        except BaseException:
            await self._break()
            raise
        self._unread.append(len(commands))

    async def read(self) -> list[Any]:
        connection = self._live()
        if not self._unread:
            raise RuntimeError("no pipeline sent on this stream is unread")
        try:
            return await AsyncHeldConnections._read(connection, self._unread.popleft())
        except BaseException:
            await self._break()
            raise

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._unread or self._broken:
            await connection.disconnect(nowait=True)
        await self._held._give_back(connection)

    def _live(self) -> AsyncHeldConnection:
        if self._connection is None or self._broken:
            raise RuntimeError("this pipeline stream is closed or broken by a connection error")
        return self._connection

    async def _break(self) -> None:
        self._broken = True
        if self._connection is not None:
            await self._connection.disconnect(nowait=True)
