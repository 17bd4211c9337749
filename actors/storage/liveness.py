"""The connection options that bound how long a silently dead connection goes unnoticed.

A connection can die without a word: a partition drops every packet, a middlebox that lost its
table drops the connection's packets for good, and neither end gets a FIN or an RST. Without a
socket timeout a read on it waits forever (redis-py before 8 sets none), and a pooled connection
idle meanwhile looks healthy until used. So every client redelay makes from a URL gets a socket
and connect timeout, TCP keepalive and redis-py's health check, under whatever the caller chose:
options given to the queue or set in the URL's query (``?socket_timeout=10``) win.
"""

from __future__ import annotations

import socket
from typing import Any

from actors._constants import (
    HEALTH_CHECK_INTERVAL_S,
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    KEEPALIVE_PROBES,
    SOCKET_CONNECT_TIMEOUT_S,
    SOCKET_TIMEOUT_S,
)

# Schemes whose connections are TCP (keepalive applies); unix:// is a local socket.
_TCP_SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "sentinel")


def keepalive_options() -> dict[int, int]:
    """TCP keepalive settings this platform has (Linux: idle, interval, probes)."""
    wanted = {
        "TCP_KEEPIDLE": KEEPALIVE_IDLE_S,
        "TCP_KEEPINTVL": KEEPALIVE_INTERVAL_S,
        "TCP_KEEPCNT": KEEPALIVE_PROBES,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


def client_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """redelay's defaults for a client of ``url``, with ``options`` over them."""
    defaults: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT_S,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }
    if url.split("://", 1)[0].lower() in _TCP_SCHEMES:
        defaults["socket_keepalive"] = True
        defaults["socket_keepalive_options"] = keepalive_options()
    return {**defaults, **options}


def without_timeout(client: Any) -> bool:
    """Whether a client's reads can wait forever on a dead TCP connection: no socket timeout
    (a Unix socket's server cannot be partitioned away; a cluster client is not looked into)."""
    get_kwargs = getattr(client, "get_connection_kwargs", None)
    if get_kwargs is None or getattr(client, "connection_pool", None) is None:
        return False
    kwargs = get_kwargs()
    return kwargs.get("socket_timeout") is None and not kwargs.get("path")
