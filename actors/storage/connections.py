"""Extra connections shaped like the user's client (same server, auth, TLS, socket type)."""

from __future__ import annotations

from typing import Any

import redis


def dedicated_client(client: redis.Redis, **overrides: Any) -> redis.Redis:
    """A client with at most one connection of its own, e.g. for a blocking command.

    It connects on first use, not here, so building an actor never fails because Redis is
    down. redis-py's own retries are left out: the actors retry with their own backoff.
    """
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, **overrides}
    kwargs.pop("retry", None)
    own_pool = redis.ConnectionPool(
        connection_class=pool.connection_class, max_connections=1, **kwargs
    )
    return redis.Redis(connection_pool=own_pool)
