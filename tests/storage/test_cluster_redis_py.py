"""A Redis Cluster needs redis-py 7.2.1 or newer (actors.storage.topology.CLUSTER_MIN_REDIS_PY).

The version rule is tested everywhere; the refusal of a real cluster runs where redis-py is
older than that (`make oldest`'s redis-py 5.3.1), and is skipped on a newer one, where the
cluster tests themselves run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aredis
from cluster import start_unchecked_cluster
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

from actors import AsyncDelayQueue, ConfigError, DelayQueue
from actors.storage.store import _cluster_errors
from actors.storage.topology import CLUSTER_MIN_REDIS_PY, _release, check_cluster_support
from simulations.crash.local_redis import HOST, LocalCluster

OLD_REDIS_PY = _release(redis.__version__) < CLUSTER_MIN_REDIS_PY


@pytest.mark.parametrize(
    ("version", "refused"),
    [
        ("5.3.1", True),
        ("6.1.0", True),
        ("7.1.1", True),
        ("7.2.0", True),
        ("7.2", True),
        ("7.2.1", False),
        ("7.2.1rc1", False),
        ("7.3.0", False),
        ("7.10.0", False),
        ("8.1.0", False),
        ("10.0", False),
    ],
)
def test_a_cluster_is_refused_below_redis_py_7_2_1(version: str, refused: bool) -> None:
    if refused:
        with pytest.raises(
            ConfigError, match=rf"needs redis-py 7\.2\.1 or newer; this is redis-py {version}"
        ):
            check_cluster_support(version)
    else:
        check_cluster_support(version)


@pytest.fixture(scope="module")
def old_client_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if not OLD_REDIS_PY:
        pytest.skip(f"redis-py {redis.__version__} runs clusters; the cluster tests cover it")
    started = start_unchecked_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield started
    finally:
        started.kill()


def _keys_written(cluster: LocalCluster) -> int:
    total = 0
    for port in cluster.master_ports():
        with cluster.node_by_port(port).client() as client:
            total += int(client.dbsize())
    return total


def _cluster_url(cluster: LocalCluster) -> str:
    return "redis+cluster://" + ",".join(f"{HOST}:{n.port}" for n in cluster.nodes)


def test_every_way_to_name_a_cluster_is_refused_on_an_old_redis_py(
    old_client_cluster: LocalCluster,
) -> None:
    expected = rf"needs redis-py 7\.2\.1 or newer; this is redis-py {redis.__version__}"
    # A node's redis:// URL: the queue connects on its first call and finds a cluster.
    queue = DelayQueue(old_client_cluster.url(), namespace="old")
    with pytest.raises(ConfigError, match=expected):
        queue.add("t", "j1", delay=60)
    queue.close()
    # A cluster URL and a ready cluster client are refused by the constructor.
    with pytest.raises(ConfigError, match=expected):
        DelayQueue(_cluster_url(old_client_cluster), namespace="old")
    client = old_client_cluster.client()
    try:
        with pytest.raises(ConfigError, match=expected):
            DelayQueue(client, namespace="old")
    finally:
        client.close()
    # The async producer refuses a cluster URL in its constructor, before any I/O...
    with pytest.raises(ConfigError, match=expected):
        AsyncDelayQueue(_cluster_url(old_client_cluster), namespace="old")
    # ...a ready async cluster client too, and a node's URL on its first call.
    nodes = [AsyncClusterNode(HOST, n.port) for n in old_client_cluster.nodes]

    async def async_refusals() -> None:
        async_client = aredis.RedisCluster(startup_nodes=nodes)
        try:
            with pytest.raises(ConfigError, match=expected):
                AsyncDelayQueue(async_client, namespace="old")
        finally:
            await async_client.aclose()
        queue = AsyncDelayQueue(old_client_cluster.url(), namespace="old")
        with pytest.raises(ConfigError, match=expected):
            await queue.add("t", "j1", delay=60)
        await queue.close()

    asyncio.run(async_refusals())
    assert _keys_written(old_client_cluster) == 0


# redis-py 7.2 (the oldest that runs a cluster) hides a refused connection during a failover:
# recording the error's metric, it reads `.db` of the ClusterNode it hung on the error, and the
# AttributeError is what reaches the caller (seen in make oldest's failover test). The Store
# raises the connection error again, so its callers back off and retry as for any other.
def _raising_as_redis_py_7_2_does(refused: redis.RedisError) -> None:
    try:
        raise refused
    except redis.RedisError:
        raise AttributeError("'ClusterNode' object has no attribute 'db'") from None


def test_a_connection_error_redis_py_hid_behind_an_attribute_error_is_raised_again() -> None:
    refused = redis.ConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused.")
    lease = _cluster_errors(_raising_as_redis_py_7_2_does)
    with pytest.raises(redis.ConnectionError) as raised:
        lease(refused)
    assert raised.value is refused


def test_any_other_attribute_error_goes_through_unchanged() -> None:
    @_cluster_errors
    def broken() -> None:
        try:
            raise redis.ConnectionError("refused")
        except redis.ConnectionError:
            raise AttributeError("'NoneType' object has no attribute 'feed'") from None

    with pytest.raises(AttributeError, match="feed"):
        broken()

    @_cluster_errors
    def unhandled() -> None:  # the same text, but not while handling a RedisError
        raise AttributeError("'ClusterNode' object has no attribute 'db'")

    with pytest.raises(AttributeError, match="'ClusterNode'"):
        unhandled()
