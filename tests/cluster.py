"""Fixtures: a Redis Cluster (3 masters, 3 replicas) and a Sentinel deployment (1 master,
1 replica, 3 sentinels), started by the suite on free loopback TCP ports and killed after.

Test modules import the fixtures they use from here. When the machine cannot run them (no
redis-cli, no free ports, no loopback TCP), the tests are skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from simulations.local_redis import LocalCluster, LocalSentinel


def _start_cluster(directory: Path) -> LocalCluster:
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
        started = LocalSentinel(tmp_path / "sentinel").start()
    except (OSError, RuntimeError, TimeoutError) as exc:
        pytest.skip(f"cannot start a local Sentinel deployment here: {exc}")
    try:
        yield started
    finally:
        started.kill()
