"""AsyncDelayQueue on a Redis Cluster and behind Sentinel, from the same URLs as DelayQueue."""

from __future__ import annotations

import asyncio

import pytest

from actors import AsyncDelayQueue, ConfigError, DelayQueue, Durability
from simulations.crash.local_redis import LocalCluster, LocalSentinel


def test_a_sharded_namespace_on_a_cluster(clean_cluster: LocalCluster) -> None:
    ids = [f"j{n}" for n in range(30)]

    async def scenario() -> dict[str, dict[str, int]]:
        # A plain redis:// URL naming one node: the server says it is a cluster node.
        async with AsyncDelayQueue(clean_cluster.url(), namespace="c", shards=6) as queue:
            assert await queue.add_many([{"topic": "t", "id": i, "delay": 60} for i in ids]) == [
                "new"
            ] * len(ids)
            assert await queue.cancel("t", "j0")
            info = await queue.get("t", "j1")
            assert info is not None and info.state == "delayed"
            assert [e.event for e in await queue.history("t", "j0")] == ["added", "cancelled"]
            page = await queue.jobs("t", "delayed", limit=100)
            assert sorted(i.id for i in page.jobs) == sorted(ids[1:])
            return await queue.stats()

    stats = asyncio.run(scenario())
    sync_queue = DelayQueue(clean_cluster.url(), namespace="c", producer_only=True)
    assert (
        stats
        == sync_queue.stats()
        == {"t": {"delayed": 29, "ready": 0, "leased": 0, "dead": 0, "paused": 0}}
    )
    direct = clean_cluster.client()
    keys = sync_queue.store.shard_keys
    nodes = {direct.get_node_from_key(k.jobs).name for k in keys}  # type: ignore[no-untyped-call]
    direct.close()
    assert len(nodes) > 1  # the shards really are on several masters
    sync_queue.close()


def test_durability_on_a_cluster_is_refused_with_a_reason(
    clean_cluster: LocalCluster,
) -> None:
    async def scenario() -> None:
        async with AsyncDelayQueue(
            clean_cluster.url(), namespace="d", durability=Durability(replicas=1)
        ) as queue:
            with pytest.raises(ConfigError, match="not on Redis Cluster"):
                await queue.add("t", "j")

    asyncio.run(scenario())


def test_behind_sentinel(sentinel_setup: LocalSentinel) -> None:
    async def scenario() -> str:
        async with AsyncDelayQueue(sentinel_setup.url(), namespace="s") as queue:
            return await queue.add("t", "j", {"n": 1})

    assert asyncio.run(scenario()) == "new"
    sync_queue = DelayQueue(sentinel_setup.url(), namespace="s", producer_only=True)
    info = sync_queue.get("t", "j")
    assert info is not None and info.body_bytes == b'{"n":1}'
    sync_queue.close()
