"""actors.storage.topology.connect: which client a URL opens, and what it refuses."""

from __future__ import annotations

import pytest
import redis

from actors.errors import ConfigError
from actors.server.embedded import RedisProcess
from actors.storage.topology import connect, describe, is_cluster


def test_a_unix_socket_url_opens_one_server(redis_server: RedisProcess) -> None:
    client = connect(redis_server.url)
    assert isinstance(client, redis.Redis) and not is_cluster(client)
    assert client.ping()
    assert describe(client) == f"Redis at {redis_server.socket_path}"
    client.close()


def test_a_ready_client_is_used_as_it_is_unless_it_decodes(redis_server: RedisProcess) -> None:
    mine = redis_server.client()
    assert connect(mine) is mine
    with pytest.raises(ConfigError, match="decode_responses=False"):
        connect(redis_server.client(decode_responses=True))
    mine.close()


def test_a_sentinel_url_names_its_sentinels_service_and_options() -> None:
    # Nothing connects until the first command, so the URL can be checked offline.
    client = connect("redis+sentinel://:secret@s1:26380,s2/orders?db=2&sentinel_password=x")
    assert isinstance(client, redis.Redis)
    pool = client.connection_pool
    assert getattr(pool, "service_name", None) == "orders"
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    hosts = [s.connection_pool.connection_kwargs for s in sentinels]
    assert [(h["host"], h["port"], h.get("password")) for h in hosts] == [
        ("s1", 26380, "x"),
        ("s2", 26379, "x"),
    ]
    assert pool.connection_kwargs["db"] == 2
    assert pool.connection_kwargs["password"] == "secret"
    assert describe(client) == "Sentinel service 'orders'"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://s1:26379", "name the Sentinel service"),
        ("redis+sentinel://s1:26379/svc?color=blue", "unknown options"),
        ("redis+sentinel://s1:port/svc", "bad host:port"),
        ("redis+cluster://", "names no host"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        connect(url)


def test_anything_else_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected a Redis URL or client"):
        connect(42)  # type: ignore[arg-type]
