"""A worker's own connections to Redis, which its stop can cut for good.

``stop()`` must return within its bound whatever the network does, and nothing of the worker may
act after it returns. An actor waiting on Redis in a partition cannot be interrupted, and pykka
cannot kill a thread; but its connections can be taken away. So a worker's actors talk to Redis
over a connection pool of their own, made like the user's client (same server, auth, TLS, socket
type, timeouts), whose connections refuse to connect once the fence is up (:class:`Fenced`, a
``ConnectionError``, so an actor takes it for an outage, and redis-py's retries give up at once).
Cutting (:meth:`Fence.cut`) raises it and aborts every connection of the pool: a call waiting on
one fails at once, and the bytes of a command still in flight are dropped with an RST rather than
delivered by TCP after the heal. Closing (:meth:`Fence.close`) raises it and closes them cleanly,
for a stop where every actor stopped in time.

Only a client this module can copy gets a pool of its own (a ``redis.Redis`` on a
``ConnectionPool``, Sentinel's included); a cluster client is used as it is, unfenced.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import weakref
from typing import Any

import redis
from redis.connection import ConnectionPool

from actors.storage.held_connections import holdable


class Fenced(redis.ConnectionError):
    """This worker stopped: its actors may not reach Redis any more."""


class Fence:
    """Thread-safe. ``client_for`` makes the fenced twin of a client; ``cut`` or ``close`` once."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self._pools: list[ConnectionPool] = []
        self._made = _Made()

    def client_for(self, client: Any) -> redis.Redis | None:
        """A client of the same Redis on a fenced pool of its own, or None for a client whose
        pool cannot be copied (the caller then uses the client as it is)."""
        if not holdable(client):
            return None
        pool: ConnectionPool = client.connection_pool
        own = ConnectionPool(
            connection_class=_fenced_class(pool.connection_class, self.up, self._made),
            max_connections=pool.max_connections,
            **pool.connection_kwargs,
        )
        self._pools.append(own)
        return redis.Redis(connection_pool=own)

    def cut(self) -> None:
        """Raises the fence and aborts every connection made: a call waiting on one fails now
        (in its own thread, which disconnects it there), and what was sent and not delivered is
        dropped (an RST, no FIN)."""
        self.up.set()
        for connection in self._made.snapshot():
            _no_more_retries(connection)
            sock = getattr(connection, "_sock", None)
            if sock is not None:
                _abort(sock)

    def close(self) -> None:
        """Closes idle connections cleanly, then cuts (for a stop where every actor stopped,
        the rest are a stopped actor's held ones, idle too)."""
        for pool in self._pools:
            pool.disconnect(inuse_connections=False)
        self.cut()


class _Made:
    """The connections a fenced pool made, weakly (a closed pool's go with it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, connection: Any) -> None:
        with self._lock:
            self._connections.add(connection)

    def snapshot(self) -> list[Any]:
        with self._lock:
            return list(self._connections)


def _fenced_class(base: type[Any], up: threading.Event, made: _Made) -> type[Any]:
    """``base`` (redis-py's Connection class of the user's pool) that refuses to connect once
    ``up`` is set, and aborts rather than closes then."""

    class FencedConnection(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.add(self)

        def _connect(self) -> Any:
            # Every way redis-py (5.3 to 8.x, Sentinel's too) makes a socket comes here.
            if up.is_set():
                raise Fenced("this worker stopped: its connections to Redis are cut")
            return super()._connect()

        def disconnect(self, *args: Any, **kwargs: Any) -> Any:
            sock = getattr(self, "_sock", None)
            if up.is_set() and sock is not None:
                _abort(sock)
            return super().disconnect(*args, **kwargs)

    FencedConnection.__name__ = FencedConnection.__qualname__ = f"Fenced{base.__name__}"
    return FencedConnection


def _no_more_retries(connection: Any) -> None:
    """A retry loop under way on the connection gives up at its next failure, rather than
    sleeping through redis-py 8's ten backoffs (about 4 s) before the fence's error surfaces.
    Each connection has its own copy of the Retry (5.3 to 8.x), so the user's is untouched."""
    retry = getattr(connection, "retry", None)
    if retry is None:
        return
    if hasattr(retry, "update_retries"):  # redis-py 6 and newer
        retry.update_retries(0)
    elif hasattr(retry, "_retries"):
        retry._retries = 0


def _abort(sock: socket.socket) -> None:
    """Wakes a thread reading the socket and closes it with an RST. No FIN first (redis-py's own
    disconnect shuts both ways, which sends one): a FIN lets the peer's side of a partition
    deliver what was in flight once it heals, an RST drops it."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)  # wakes a reader; sends nothing
    with contextlib.suppress(OSError):
        sock.close()
