"""Connecting on ``redis.asyncio``, for the async producer: the same URLs as topology.connect.

Making a client sends nothing: redis-py's asyncio clients connect on their first command. Only a
plain ``redis://`` URL needs a round trip (is the server a cluster node?), so :func:`connect`
is a coroutine that the async producer awaits on its first call, never in its constructor.
The URLs are taken apart by :mod:`actors.storage.topology`, so both producers read them alike.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.sentinel import Sentinel

from actors.errors import ConfigError
from actors.storage.liveness import client_options
from actors.storage.topology import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    check_cluster_support,
    check_cluster_url,
    cluster_settings,
    sentinel_settings,
)

AsyncClient = aredis.Redis | aredis.RedisCluster


def check_source(source: object) -> None:
    """Refuses, before any I/O, what the async producer cannot use."""
    if isinstance(source, redis.Redis | redis.RedisCluster):
        raise ConfigError(
            "AsyncDelayQueue needs a redis.asyncio client (or a URL), got a blocking "
            f"redis.{type(source).__name__}; use DelayQueue with it"
        )
    if isinstance(source, aredis.Redis | aredis.RedisCluster):
        check_client(source)
    elif isinstance(source, str):
        check_cluster_url(source)
    else:
        raise ConfigError(f"expected a Redis URL or client, got {type(source).__name__}")


def check_client(client: AsyncClient) -> None:
    """redelay reads replies as bytes (job bodies are not always text)."""
    if isinstance(client, aredis.RedisCluster):
        check_cluster_support()
        decoding = bool(client.get_encoder().decode_responses)
    else:
        decoding = bool(client.get_connection_kwargs().get("decode_responses"))  # type: ignore[no-untyped-call]
    if decoding:
        raise ConfigError("redelay needs a redis client with decode_responses=False")


def is_cluster(client: object) -> bool:
    return isinstance(client, aredis.RedisCluster)


async def connect(source: str | AsyncClient, **options: Any) -> AsyncClient:
    """A client for ``source``: one server, a cluster or a Sentinel-managed master."""
    check_source(source)
    if not isinstance(source, str):
        return source
    options = client_options(source, options)  # timeouts and keepalive: see liveness
    scheme = source.split("://", 1)[0].lower()
    if scheme in SENTINEL_SCHEMES:
        found = sentinel_settings(source, options)
        sentinel = Sentinel(
            found.hosts, sentinel_kwargs=found.sentinel_kwargs or None, **found.connection
        )
        client: AsyncClient = sentinel.master_for(found.service)
    elif scheme in CLUSTER_SCHEMES:
        hosts, kwargs = cluster_settings(source, options)
        nodes = [ClusterNode(host, port) for host, port in hosts]
        client = aredis.RedisCluster(startup_nodes=nodes, **kwargs)
    else:
        client = aredis.Redis.from_url(source, **options)
        if scheme in ("redis", "rediss") and await _cluster_enabled(client):
            await client.aclose()
            check_cluster_support()
            client = aredis.RedisCluster.from_url(source, **options)
    try:
        check_client(client)
    except ConfigError:
        await client.aclose()
        raise
    return client


async def _cluster_enabled(client: aredis.Redis) -> bool:
    try:
        info = await client.info("cluster")
    except redis.ResponseError:  # a proxy or an old server without the section
        return False
    return bool(info.get("cluster_enabled"))
