"""Fixtures: a Redis Cluster (3 masters, 3 replicas) and a Sentinel deployment (1 master,
1 replica, 3 sentinels), started by the suite on free loopback TCP ports and killed after.

Test modules import the fixtures they use from here. When the machine cannot run them (no
redis-cli, no free ports, no loopback TCP), the tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from _wait import wait_until

from actors.errors import ConfigError
from actors.storage.topology import check_cluster_support
from simulations.crash.local_redis import LocalCluster, LocalSentinel

# A failover and the old master's return, on a loaded 2-core machine: quiet, a Sentinel
# failover takes about 4 s and the sentinels take 10 to 20 s to turn the restarted master into
# a replica (they wait 8 s after it reports its role, and look at replicas every 10 s).
FAILOVER_S = 90.0
# Sentinel's down-after-milliseconds (simulations.crash.local_redis uses 1 s). With 1 s, a sentinel
# that had just switched to the promoted replica sometimes missed its first PING reply on a
# busy machine, marked it down, and failed over again, to the restarted, empty old master:
# every job was lost and the old master never became a replica.
SENTINEL_DOWN_AFTER_MS = 3_000


def _start_cluster(directory: Path) -> LocalCluster:
    try:
        check_cluster_support()
    except ConfigError as exc:  # make oldest: the refusal itself is tested in test_cluster_redis_py
        pytest.skip(str(exc))
    return start_unchecked_cluster(directory)


def start_unchecked_cluster(directory: Path) -> LocalCluster:
    """A cluster whatever the redis-py version (to test that an old one is refused)."""
    try:
        return LocalCluster(directory).start()
    except (OSError, RuntimeError, TimeoutError) as exc:
        pytest.skip(f"cannot start a local Redis Cluster here: {exc}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Shared by a module's tests that do not break it; flushed before each use."""
    started = _start_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield started
    finally:
        started.kill()


@pytest.fixture
def clean_cluster(cluster: LocalCluster) -> LocalCluster:
    cluster.flushall()
    return cluster


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of its own, for a test that kills or reshapes it."""
    started = _start_cluster(tmp_path / "cluster")
    try:
        yield started
    finally:
        started.kill()


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[LocalSentinel]:
    try:
        sentinel = LocalSentinel(tmp_path / "sentinel", down_after_ms=SENTINEL_DOWN_AFTER_MS)
        started = sentinel.start()
    except (OSError, RuntimeError, TimeoutError) as exc:
        pytest.skip(f"cannot start a local Sentinel deployment here: {exc}")
    try:
        yield started
    finally:
        started.kill()


def fail_over(setup: LocalSentinel) -> tuple[int, int]:
    """Kills the master; once every sentinel names the promoted replica (none still following
    the old master could fail back to it), restarts the old master, empty, and waits until the
    sentinels made it the new master's replica, in sync. Returns (old port, new port)."""
    old = setup.master_port()
    setup.server_by_port(old).kill()
    new = setup.wait_for_new_master(old, timeout_s=FAILOVER_S)

    agreed_since: list[float] = []

    def every_sentinel_follows_the_new_master_steadily() -> bool:
        for process in setup.sentinel_processes:
            with contextlib.closing(process.client(socket_timeout=1)) as client:
                master: Any = client.sentinel_master(setup.service)
            if int(master["port"]) != new or master["is_sdown"] or master["is_odown"]:
                agreed_since.clear()
                return False
        agreed_since[:] = agreed_since or [time.monotonic()]
        # A sentinel that will wrongly mark the new master down does so within down-after.
        return time.monotonic() - agreed_since[0] >= SENTINEL_DOWN_AFTER_MS / 1000

    wait_until(
        every_sentinel_follows_the_new_master_steadily,
        what=f"every sentinel to follow the new master {new} for {SENTINEL_DOWN_AFTER_MS} ms",
        timeout_s=FAILOVER_S,
        retry_on=(redis.RedisError,),
    )
    setup.server_by_port(old).start()
    setup.wait_for_replica(old, timeout_s=FAILOVER_S)
    return old, new
