"""Failover with Sentinel (1 master, 1 replica, 3 sentinels started by the suite)."""

from __future__ import annotations

import os
import signal

import pytest
import redis
from _cluster_flow import TOPIC, Flow
from _wait import wait_until
from cluster import FAILOVER_S, fail_over

from actors.clock import FakeClock, SystemClock
from actors.errors import NotReplicatedError
from actors.storage.store import Store, open_store
from actors.storage.topology import connect, describe
from actors.values import Durability, TopicConfig
from simulations.crash.local_redis import LocalSentinel

FLOW_CONFIG = TopicConfig(retry_ms=(100,) * 20, lease_ms=1_000)
# Replication data the replica cannot take while it is stopped: more than the loopback socket
# buffers hold, so the adds queued behind it stay in the master's memory and die with it.
_STALL_BYTES = 48 * 1024 * 1024


def test_a_sentinel_url_reaches_the_master(sentinel_setup: LocalSentinel) -> None:
    client = connect(sentinel_setup.url())
    assert isinstance(client, redis.Redis)
    assert describe(client) == f"Sentinel service {sentinel_setup.service!r}"
    assert client.info("server")["tcp_port"] == sentinel_setup.master_port()
    client.close()


@pytest.mark.slow
def test_jobs_flow_while_sentinel_fails_over(sentinel_setup: LocalSentinel) -> None:
    client = connect(sentinel_setup.url(), socket_timeout=2)
    assert isinstance(client, redis.Redis)
    clock = SystemClock()
    store = open_store(client, "flow", clock, durability=Durability(replicas=1, timeout_ms=2_000))
    store.configure_topic(TOPIC, FLOW_CONFIG)
    flow = Flow(store, clock, jobs=300, add_interval_s=0.005).start()
    wait_until(lambda: flow.added() >= 100, what="jobs to be flowing before the crash")
    # Back as an empty server, the old master is turned into the new one's replica.
    old, new = fail_over(sentinel_setup)
    flow.finish()
    assert new != old
    assert flow.problems() == []
    assert sum(flow.log.errors.values()) > 0  # the failover was felt, and survived
    client.close()
    clock.close()


def lose_the_master_behind_a_stalled_replica(
    setup: LocalSentinel, store: Store, count: int
) -> tuple[list[str], list[str]]:
    """Adds ``count`` jobs while the replica cannot keep up, kills the master, lets the replica
    take over. Returns (ids whose add returned, ids whose add raised NotReplicatedError)."""
    old = setup.master_port()
    replica = next(s for s in setup.servers if s.port != old)
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)
    confirmed: list[str] = []
    reported: list[str] = []
    try:
        store.client.set("stall", b"x" * _STALL_BYTES)
        for n in range(count):
            try:
                store.add(store.new_job(TOPIC, f"job-{n}", n))
                confirmed.append(f"job-{n}")
            except NotReplicatedError:
                reported.append(f"job-{n}")
        setup.server_by_port(old).kill()
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
    setup.wait_for_new_master(old, timeout_s=FAILOVER_S)
    return confirmed, reported


@pytest.mark.slow
def test_without_wait_a_failover_loses_adds_the_master_acknowledged(
    sentinel_setup: LocalSentinel,
) -> None:
    client = connect(sentinel_setup.url(), socket_timeout=5)
    assert isinstance(client, redis.Redis)
    store = open_store(client, "loss", FakeClock())
    assert isinstance(store, Store)
    confirmed, reported = lose_the_master_behind_a_stalled_replica(sentinel_setup, store, 20)
    assert (len(confirmed), reported) == (20, [])
    survivors = [i for i in confirmed if store.get(TOPIC, i) is not None]
    assert survivors == []  # every acknowledged add was lost with the master
    client.close()


@pytest.mark.slow
def test_with_wait_no_acknowledged_add_is_lost(sentinel_setup: LocalSentinel) -> None:
    client = connect(sentinel_setup.url(), socket_timeout=5)
    assert isinstance(client, redis.Redis)
    store = open_store(client, "loss", FakeClock(), durability=Durability(1, timeout_ms=100))
    assert store.durability is not None
    confirmed, reported = lose_the_master_behind_a_stalled_replica(sentinel_setup, store, 20)
    # The replica could not acknowledge: every add said so instead of returning, and rightly:
    # none of them survived. Nothing the caller was told is safe was lost.
    assert (confirmed, len(reported)) == ([], 20)
    assert [i for i in reported if store.get(TOPIC, i) is not None] == []
    client.close()
