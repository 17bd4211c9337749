"""Nothing connects until the first call: a queue made while Redis is down is made, and its
first call raises redis-py's ConnectionError (the next one tries again)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import redis

from actors import AsyncDelayQueue, DelayQueue, ValidationError
from actors.server.embedded import RedisProcess
from actors.storage.keys import config_key


@pytest.fixture
def dead_url() -> str:
    """A TCP address where nothing listens (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def test_a_queue_is_made_with_redis_down_and_its_first_call_raises(dead_url: str) -> None:
    queue = DelayQueue(dead_url, namespace="shop", producer_only=True)
    assert queue.namespace == "shop"
    for _ in range(2):  # not cached as a broken state: each call tries again
        with pytest.raises(redis.ConnectionError):
            queue.add("mail.send", "welcome-1")
    queue.close()


def test_closing_a_queue_that_never_connected_connects_nothing(dead_url: str) -> None:
    queue = DelayQueue(dead_url)
    queue.close()  # would raise ConnectionError if it synced a clock or opened a store


def test_the_constructor_still_checks_its_arguments(dead_url: str) -> None:
    with pytest.raises(ValidationError) as bad:
        DelayQueue(dead_url, namespace="no spaces")
    assert bad.value.field == "namespace"
    with pytest.raises(ValidationError) as bad:
        DelayQueue(dead_url, shards=0)
    assert bad.value.field == "shards"
    with pytest.raises(ValidationError) as bad:
        DelayQueue(dead_url, default_lease=-1)
    assert bad.value.field == "default_lease"


def test_the_namespace_is_recorded_on_first_use_not_on_construction(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    queue = DelayQueue(redis_server.url, namespace="lazy", shards=2, producer_only=True)
    assert not redis_client.exists(config_key("lazy"))
    assert queue.add("t", "j", delay=60) == "new"
    assert redis_client.hget(config_key("lazy"), "shards") == b"2"
    info = queue.get("t", "j")
    assert info is not None and info.state == "delayed"
    queue.close()


def test_the_async_queue_is_made_with_redis_down_and_its_first_call_raises(
    dead_url: str,
) -> None:
    async def scenario() -> None:
        queue = AsyncDelayQueue(dead_url, namespace="shop")
        assert queue.namespace == "shop"
        for _ in range(2):
            with pytest.raises(redis.ConnectionError):
                await queue.add("mail.send", "welcome-1")
        await queue.aclose()

    asyncio.run(scenario())


def test_the_async_constructor_checks_its_arguments_without_io(dead_url: str) -> None:
    with pytest.raises(ValidationError) as bad:
        AsyncDelayQueue(dead_url, namespace="no spaces")
    assert bad.value.field == "namespace"
    with pytest.raises(ValidationError) as bad:
        AsyncDelayQueue(dead_url, default_retry=["soon"])  # type: ignore[list-item]
    assert bad.value.field == "default_retry[0]"


def test_bad_input_is_refused_before_the_first_connection(dead_url: str) -> None:
    """A ValidationError, not a ConnectionError, whether Redis is up or not: a caller that
    retries on connection errors would retry bad input forever."""
    queue = DelayQueue(dead_url, namespace="shop", producer_only=True)
    calls: list[tuple[str, Any]] = [
        ("topic", lambda: queue.add("bad topic", "x")),
        ("delay", lambda: queue.add("t", "x", delay=-5)),
        ("body.n", lambda: queue.add("t", "x", {"n": float("nan")})),
        ("jobs[1]", lambda: queue.add_many([{"topic": "t", "id": "a"}, {"topic": "t"}])),
        ("jobs[0].lease", lambda: queue.add_many(iter([{"topic": "t", "id": "a", "lease": 0}]))),
        ("topic", lambda: queue.cancel("a|b", "x")),
        ("id", lambda: queue.get("t", "x y")),
    ]
    for field, call in calls:
        with pytest.raises(ValidationError) as bad:
            call()
        assert bad.value.field == field, bad.value
    with pytest.raises(redis.ConnectionError):  # good input still tries, and fails
        queue.add_many(iter([{"topic": "t", "id": "a"}]))
    queue.close()
