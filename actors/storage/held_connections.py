"""Script calls on connections held out of the client's pool, past redis-py's per-command layers.

redis-py 8 spends most of a command's client CPU around the socket rather than on it: taking a
connection from the pool and giving it back (a lock, a readiness poll, observability counters on
both ends), deprecation and observability wrappers, response callbacks: on a held connection an
EVALSHA costs under half the client CPU. Every add, lease and ack pays that once per round trip;
docs/benchmarks.md's floor (an empty EVALSHA on a held connection) is measured in every run.

What stays redis-py's: its ``Connection`` connects (auth, TLS, Unix sockets, a sentinel's current
master) and parses with hiredis, and its ``Retry`` decides, as it does for ``execute_command`` and
pipelines, whether a connection error is retried on a fresh connection. Commands are packed by
hiredis directly: redis-py first copies every argument through a generator to turn memoryviews
into bytes, which script calls never send. The pool's check when it hands a connection out (data
waiting on an idle connection means its server closed it or a reply was left unread: reconnect)
is made here when a held connection is taken again.

Connections come from the client's own pool, so its ``max_connections`` still bounds them, and go
back to it when this object is closed or collected. At most :data:`IDLE_MAX` are kept idle here;
a call that finds more idle gives its connection back to the pool at once, so the pool's other
commands (reads, INFO, heartbeats) never find more than that many connections set aside. Held
connections are never shared: a call takes one from the idle list (or the pool) and puts it back
when its replies are read.
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol, cast

import hiredis
import redis
from redis.connection import ConnectionPool
from redis.exceptions import ResponseError
from redis.retry import Retry


class HeldConnection(Protocol):
    """The part of redis-py's ``Connection`` used here (partly unannotated in redis-py)."""

    retry: Retry

    def connect(self) -> None: ...
    def send_packed_command(self, command: list[bytes], check_health: bool = True) -> None: ...
    def read_response(self) -> Any: ...
    def can_read(self) -> bool: ...
    def disconnect(self) -> None: ...


# Idle connections kept out of the pool: one per thread that makes script calls at once in a
# worker (listener and pool per topic, carrier, sweeper), and a few producer threads.
IDLE_MAX = 8


def holdable(client: object) -> bool:
    """Whether ``client`` sends every command to one server through a connection pool, the case
    this module serves. A cluster client routes by key; a single-connection client locks its one
    connection; RESP3 may put push messages between replies, and a client-side cache must see
    the replies: those keep redis-py's own path."""
    if type(client) is not redis.Redis or client.connection is not None:
        return False
    pool = client.connection_pool
    return isinstance(pool, ConnectionPool) and plain_replies(pool)


def plain_replies(pool: Any) -> bool:
    """Whether a pool's connections read plain replies in order and send text as hiredis packs
    it: no client-side cache (it must see the replies), RESP2 (RESP3 may put push messages
    between replies), UTF-8 (hiredis packs text as UTF-8, redis-py in the client's encoding).
    Shared with the async twin, whose pools take the same settings."""
    if getattr(pool, "cache", None) is not None:
        return False
    kwargs = pool.connection_kwargs
    utf8 = kwargs.get("encoding", "utf-8").replace("_", "-").lower() in ("utf-8", "utf8")
    return utf8 and kwargs.get("protocol") in (None, 2, "2")


def _give_back(pool: ConnectionPool, idle: list[HeldConnection], pid: list[int]) -> None:
    """Returns the idle connections to the pool (a forked child's are the parent's: dropped)."""
    connections = idle[:]
    idle.clear()
    if pid[0] != os.getpid():
        return
    for connection in connections:
        pool.release(cast(Any, connection))


class HeldConnections:
    """Runs commands and pipelines for one ``holdable`` client. Thread-safe: each call has a
    connection of its own for its duration (``list.pop`` and ``append`` are atomic)."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool: ConnectionPool = client.connection_pool
        self._idle: list[HeldConnection] = []
        self._pid = [os.getpid()]  # a list, so the finalizer sees a fork noticed after it was made
        self._finalizer = weakref.finalize(self, _give_back, self._pool, self._idle, self._pid)

    def call(self, *args: Any) -> Any:
        """One command's reply; an error reply is raised, as ``execute_command`` does."""
        connection = self._take()
        try:
            reply = connection.retry.call_with_retry(
                lambda: self._send_and_read(connection, hiredis.pack_command(args), 1)[0],
                lambda _error: connection.disconnect(),
            )
        except BaseException:
            connection.disconnect()  # interrupted mid-reply, or out of retries: start clean
            raise
        finally:
            self._give_back_one(connection)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Every command's reply in order, sent together; error replies are returned in place
        (a pipeline's ``raise_on_error=False``), a connection error is raised."""
        packed = _pack(commands)
        connection = self._take()
        try:
            return connection.retry.call_with_retry(
                lambda: self._send_and_read(connection, packed, len(commands)),
                lambda _error: connection.disconnect(),
            )
        except BaseException:
            connection.disconnect()
            raise
        finally:
            self._give_back_one(connection)

    def send(self, commands: Sequence[Sequence[Any]]) -> SentPipeline:
        """Sends a pipeline and returns before its replies come: ``read()`` on the result reads
        them (errors in place, as ``pipeline``), so the caller works while the server does. The
        connection stays taken until then. Not retried: the calls may or may not have run when
        a connection error is raised by either half."""
        packed = _pack(commands)
        connection = self._take()
        try:
            connection.connect()  # as _send_and_read does
            connection.send_packed_command([packed])
        except BaseException:
            connection.disconnect()
            self._give_back_one(connection)
            raise
        return SentPipeline(self, connection, len(commands))

    def stream(self) -> PipelineStream:
        """One connection taken for pipelines sent one after another, each read later in the
        order sent (see PipelineStream)."""
        return PipelineStream(self, self._take())

    def close(self) -> None:
        """Gives the held connections back to the client's pool; later calls take them again."""
        _give_back(self._pool, self._idle, self._pid)

    def _give_back_one(self, connection: HeldConnection) -> None:
        if len(self._idle) < IDLE_MAX:
            self._idle.append(connection)
        else:
            self._pool.release(cast(Any, connection))

    def _take(self) -> HeldConnection:
        if self._pid[0] != os.getpid():
            # A forked child: the idle connections' sockets are the parent's, and redis-py's
            # pool resets itself in the child the same way.
            self._idle.clear()
            self._pid[0] = os.getpid()
        try:
            connection = self._idle.pop()
        except IndexError:
            return cast(HeldConnection, self._pool.get_connection())  # connected and checked
        try:
            if connection.can_read():
                connection.disconnect()  # reconnected by the next send
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            connection.disconnect()
        return connection

    @staticmethod
    def _read(connection: HeldConnection, replies: int) -> list[Any]:
        read: list[Any] = []
        for _ in range(replies):
            try:
                read.append(connection.read_response())
            except ResponseError as error:
                read.append(error)
        return read

    @staticmethod
    def _send_and_read(connection: HeldConnection, packed: bytes, replies: int) -> list[Any]:
        """The replies, errors in place (``call`` raises its one error itself)."""
        # connect() as the pool does before handing a connection out: a sentinel-managed one
        # asks the sentinels for the current master there, while a send that reconnects by
        # itself goes back to the address it had. A no-op when connected.
        connection.connect()
        connection.send_packed_command([packed])  # a list: redis-py iterates it
        return HeldConnections._read(connection, replies)


class SentPipeline:
    """A pipeline sent by ``HeldConnections.send`` whose replies are not read yet."""

    __slots__ = ("_connection", "_held", "_replies")

    def __init__(self, held: HeldConnections, connection: HeldConnection, replies: int) -> None:
        self._held = held
        self._connection: HeldConnection | None = connection
        self._replies = replies

    def read(self) -> list[Any]:
        """Every reply in order, errors in place; a connection error is raised. Once only."""
        connection = self._connection
        if connection is None:
            raise RuntimeError("these replies were read already")
        self._connection = None
        try:
            return HeldConnections._read(connection, self._replies)
        except BaseException:
            connection.disconnect()  # interrupted mid-reply: start clean
            raise
        finally:
            self._held._give_back_one(connection)


class PipelineStream:
    """Pipelines sent on one held connection before the replies of the ones before are read:
    ``read()`` returns the oldest unread pipeline's replies (errors in place). One connection,
    so the server runs the pipelines in the order they were sent, while the caller builds the
    next. Not retried: after a connection error the stream is broken, and pipelines sent on it
    may or may not have run. ``close()`` gives the connection back (disconnected when replies
    were left unread, so nobody reads them as theirs)."""

    __slots__ = ("_broken", "_connection", "_held", "_unread")

    def __init__(self, held: HeldConnections, connection: HeldConnection) -> None:
        self._held = held
        self._connection: HeldConnection | None = connection
        self._unread: deque[int] = deque()  # replies per pipeline sent and not read yet
        self._broken = False

    @property
    def unread(self) -> int:
        """Pipelines sent whose replies are not read yet."""
        return len(self._unread)

    def send(self, commands: Sequence[Sequence[Any]]) -> None:
        connection = self._live()
        packed = _pack(commands)
        try:
            if not self._unread:
                connection.connect()  # as _send_and_read does; a no-op when connected
            # redis-py's health check (a PING on a connection idle past health_check_interval)
            # reads its PONG: with replies unread it would read one of them instead.
            connection.send_packed_command([packed], check_health=not self._unread)
        except BaseException:
            self._break()
            raise
        self._unread.append(len(commands))

    def read(self) -> list[Any]:
        connection = self._live()
        if not self._unread:
            raise RuntimeError("no pipeline sent on this stream is unread")
        try:
            return HeldConnections._read(connection, self._unread.popleft())
        except BaseException:
            self._break()
            raise

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._unread or self._broken:
            connection.disconnect()
        self._held._give_back_one(connection)

    def _live(self) -> HeldConnection:
        if self._connection is None or self._broken:
            raise RuntimeError("this pipeline stream is closed or broken by a connection error")
        return self._connection

    def _break(self) -> None:
        self._broken = True
        if self._connection is not None:
            self._connection.disconnect()


def _pack(commands: Sequence[Sequence[Any]]) -> bytes:
    return b"".join([hiredis.pack_command(tuple(command)) for command in commands])
