"""Connecting to Redis as it is deployed: one server, a Redis Cluster, or a Sentinel-managed master.

:func:`connect` takes a URL or a ready client:

- ``redis://host:port/db``, ``rediss://...``, ``unix:///path.sock``: one server. A TCP URL whose
  server says ``cluster_enabled:1`` is opened as a Redis Cluster instead (one extra round trip
  at start), so the same URL works whichever way the server was deployed.
- ``redis+cluster://host:port,host:port``: a Redis Cluster, naming one or more startup nodes;
  redis-py's cluster client discovers the rest and keeps one connection pool per node.
- ``redis+sentinel://[:password@]host:port,host:port/<service>[?db=N&sentinel_password=...]``:
  the master Sentinel names for ``<service>``. redis-py asks the sentinels for the master's
  address on every new connection and drops connections to a master that was demoted, so after a
  failover the next command reaches the new master.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from actors.errors import ConfigError
from actors.storage.liveness import client_options

RedisClient = redis.Redis | RedisCluster

SENTINEL_SCHEMES = ("redis+sentinel", "sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

# The oldest redis-py whose cluster client redelay runs on. Found by running the cluster tests on
# each release: before 6.1 the cluster client refuses the MULTI a snapshot is read in; from 6.1
# to 7.1 a cluster client shared by threads fails calls while a slot migrates (the slot-migration
# flow test confirmed 9 to 74 of 500 adds; the rest raised AttributeError inside redis-py's
# reply parser); 7.2.0 raised AttributeError in its new command-metrics code when a node was
# killed, which stopped the master-kill flow test's workers. 7.2.1 passed every cluster test.
# The plain client works from 5.3 (pyproject, which also leaves out 7.2.0 for that release's
# Unix socket bug).
CLUSTER_MIN_REDIS_PY = (7, 2, 1)


def connect(source: str | RedisClient, **options: Any) -> RedisClient:
    """A client for ``source`` (see the module docstring); ``options`` go to redis-py, over
    redelay's timeouts and keepalive for a URL (:mod:`actors.storage.liveness`). A client given
    is used as it is."""
    if isinstance(source, redis.Redis | RedisCluster):
        check_client(source)
        return source
    if not isinstance(source, str):
        raise ConfigError(f"expected a Redis URL or client, got {type(source).__name__}")
    options = client_options(source, options)  # timeouts and keepalive: see liveness
    scheme = source.split("://", 1)[0].lower()
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_master(source, options)
    if scheme in CLUSTER_SCHEMES:
        return _cluster(source, options)
    client = redis.Redis.from_url(source, **options)
    if scheme in ("redis", "rediss") and _cluster_enabled(client):
        client.close()
        check_cluster_support()
        cluster = RedisCluster.from_url(source, **options)
        try:
            check_client(cluster)
        except ConfigError:
            cluster.close()
            raise
        return cluster
    check_client(client)
    return client


def check_source(source: object) -> None:
    """Refuses, before any I/O, a client or a cluster URL that :func:`connect` would refuse."""
    if isinstance(source, redis.Redis | RedisCluster):
        check_client(source)
    elif isinstance(source, str):
        check_cluster_url(source)


def check_cluster_url(url: str) -> None:
    """Refuses a bad ``redis+cluster://`` URL, then any such URL on too old a redis-py (the
    sync and the async producer alike); other URLs are left to :func:`connect`."""
    if url.split("://", 1)[0].lower() in CLUSTER_SCHEMES:
        cluster_settings(url, {})  # a bad URL is named first: it is wrong on any redis-py
        check_cluster_support()


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


def check_cluster_support(version: str = redis.__version__) -> None:
    """Refuses a Redis Cluster on a redis-py older than :data:`CLUSTER_MIN_REDIS_PY`."""
    if _release(version) < CLUSTER_MIN_REDIS_PY:
        needed = ".".join(map(str, CLUSTER_MIN_REDIS_PY))
        raise ConfigError(
            f"a Redis Cluster needs redis-py {needed} or newer; this is redis-py {version} "
            f"(pip install 'redis>={needed}'). One server and Sentinel work from 5.3."
        )


def _release(version: str) -> tuple[int, int, int]:
    """(7, 2, 1) from "7.2.1", "7.2.1rc1" or "7.2.1.post1"; (7, 2, 0) from "7.2"."""
    numbers = [0, 0, 0]
    for place, part in enumerate(version.split(".")[:3]):
        numbers[place] = int("".join(itertools.takewhile(str.isdigit, part)) or 0)
    return numbers[0], numbers[1], numbers[2]


def check_client(client: RedisClient) -> None:
    """redelay reads replies as bytes (job bodies are not always text)."""
    if isinstance(client, RedisCluster):
        check_cluster_support()
        decoding = bool(client.get_encoder().decode_responses)  # type: ignore[no-untyped-call]
    else:
        decoding = bool(client.get_connection_kwargs().get("decode_responses"))
    if decoding:
        raise ConfigError("redelay needs a redis client with decode_responses=False")


def describe(client: RedisClient) -> str:
    """A line for logs: what kind of deployment, and where."""
    if isinstance(client, RedisCluster):
        primaries = sorted(n.name for n in client.get_primaries())  # type: ignore[no-untyped-call]
        return f"Redis Cluster, masters {', '.join(primaries)}"
    pool = client.connection_pool
    service = getattr(pool, "service_name", None)
    if service is not None:
        return f"Sentinel service {service!r}"
    kwargs = pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
    return f"Redis at {where}"


def _cluster_enabled(client: redis.Redis) -> bool:
    try:
        info = client.info("cluster")
    except redis.ResponseError:  # a proxy or an old server without the section
        return False
    return bool(info.get("cluster_enabled"))


def _hosts(netloc: str, default_port: int) -> tuple[str | None, str | None, list[tuple[str, int]]]:
    """(username, password, [(host, port)...]) from ``user:pass@h1:p1,h2:p2``."""
    userinfo, _, hostlist = netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, _, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) or None
    hosts = []
    for part in hostlist.split(","):
        if not part:
            continue
        host, colon, port = part.rpartition(":")
        if not colon:
            host, port = part, ""
        try:
            hosts.append((host, int(port) if port else default_port))
        except ValueError:
            raise ConfigError(f"bad host:port {part!r} in Redis URL") from None
    if not hosts:
        raise ConfigError("the Redis URL names no host")
    return username, password, hosts


@dataclass(frozen=True, slots=True)
class SentinelSettings:
    """A ``redis+sentinel://`` URL taken apart: the sync and the async client are made from it."""

    hosts: list[tuple[str, int]]
    service: str
    sentinel_kwargs: dict[str, Any]
    connection: dict[str, Any]


def sentinel_settings(url: str, options: dict[str, Any]) -> SentinelSettings:
    parts = urlsplit(url)
    username, password, hosts = _hosts(parts.netloc, 26379)
    service = parts.path.strip("/")
    if not service:
        raise ConfigError(
            f"{url!r}: name the Sentinel service, e.g. redis+sentinel://h:26379/mymaster"
        )
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    sentinel_kwargs: dict[str, Any] = {}
    if "sentinel_password" in query:
        sentinel_kwargs["password"] = query.pop("sentinel_password")
    connection: dict[str, Any] = {**options}
    if password is not None:
        connection["password"] = password
    if username is not None:
        connection["username"] = username
    if "db" in query:
        connection["db"] = int(query.pop("db"))
    if query:
        raise ConfigError(f"{url!r}: unknown options {sorted(query)}")
    return SentinelSettings(hosts, service, sentinel_kwargs, connection)


def cluster_settings(
    url: str, options: dict[str, Any]
) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """A ``redis+cluster://`` URL taken apart: (startup nodes, client options)."""
    parts = urlsplit(url)
    username, password, hosts = _hosts(parts.netloc, 6379)
    kwargs: dict[str, Any] = {**options}
    if password is not None:
        kwargs["password"] = password
    if username is not None:
        kwargs["username"] = username
    if parts.scheme.lower().startswith("rediss"):
        kwargs["ssl"] = True
    return hosts, kwargs


def _sentinel_master(url: str, options: dict[str, Any]) -> redis.Redis:
    found = sentinel_settings(url, options)
    sentinel = Sentinel(
        found.hosts, sentinel_kwargs=found.sentinel_kwargs or None, **found.connection
    )
    client: redis.Redis = sentinel.master_for(found.service)
    check_client(client)
    return client


def _cluster(url: str, options: dict[str, Any]) -> RedisCluster:
    hosts, kwargs = cluster_settings(url, options)
    check_cluster_support()
    nodes = [ClusterNode(host, port) for host, port in hosts]  # type: ignore[no-untyped-call]
    client = RedisCluster(startup_nodes=nodes, **kwargs)
    try:
        check_client(client)
    except ConfigError:
        client.close()
        raise
    return client
