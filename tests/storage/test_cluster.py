"""Sharded namespaces on a real Redis Cluster (3 masters + 3 replicas) started by the suite."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from _audit import structure_problems
from _cluster_flow import TOPIC, Flow
from _wait import wait_until
from cluster import FAILOVER_S
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterError, TryAgainError

from actors.clock import FakeClock, SystemClock
from actors.storage.keys import ShardKeys, member, shard_of
from actors.storage.store import Store
from actors.storage.topology import connect, describe
from actors.values import Durability, TopicConfig
from simulations.crash.local_redis import LocalCluster

SHARDS = 6
FLOW_CONFIG = TopicConfig(retry_ms=(100,) * 20, lease_ms=1_000)


def sharded(client: RedisCluster, clock: SystemClock | FakeClock, **kwargs: object) -> Store:
    store = Store(client, "flow", clock, shards=SHARDS, **kwargs)  # type: ignore[arg-type]
    store.configure_topic(TOPIC, FLOW_CONFIG)
    return store


def test_a_plain_url_to_a_cluster_node_opens_a_cluster_client(
    clean_cluster: LocalCluster,
) -> None:
    client = connect(clean_cluster.url())
    try:
        assert isinstance(client, RedisCluster)
        assert describe(client).startswith("Redis Cluster, masters 127.0.0.1:")
    finally:
        client.close()


def test_the_shards_spread_over_the_masters(clean_cluster: LocalCluster) -> None:
    client = clean_cluster.client()
    store = sharded(client, FakeClock())
    owners = {clean_cluster.master_of_slot(key_slot(k.jobs.encode())) for k in store.shard_keys}
    assert len(owners) >= 2  # six hash tags over three masters' slot ranges
    client.close()


def test_the_snapshot_names_a_job_in_two_structures_on_any_shard(
    clean_cluster: LocalCluster,
) -> None:
    """verify and the chaos checker read ``problems``: a sharded snapshot must keep them."""
    client = clean_cluster.client()
    store = sharded(client, FakeClock())
    ids = [f"j{n}" for n in range(SHARDS * 4)]
    store.add_many([store.new_job(TOPIC, i, delay_ms=1_000) for i in ids])
    broken = {i for i in ids if shard_of(TOPIC, i, SHARDS) in (1, SHARDS - 1)}
    for job_id in broken:  # behind the scripts' back: also in its shard's dead set
        keys = ShardKeys("flow", shard_of(TOPIC, job_id, SHARDS))
        client.zadd(keys.dead, {member(TOPIC, job_id): 1})
    problems = store.snapshot().problems
    assert set(problems) == {(TOPIC, i) for i in broken}
    assert all(texts == ["in delayed and dead"] for texts in problems.values())
    client.close()


def test_pages_of_jobs_are_read_from_every_master(clean_cluster: LocalCluster) -> None:
    client = clean_cluster.client()
    clock = FakeClock()
    store = sharded(client, clock)
    ids = [f"j{n:02}" for n in range(SHARDS * 5)]
    store.add_many(
        [store.new_job(TOPIC, i, delay_ms=1_000 * (1 + n % 3)) for n, i in enumerate(ids)]
    )
    for state in ("delayed", "ready"):
        seen: list[str] = []
        page = store.jobs(TOPIC, state, limit=7)
        seen += [info.id for info in page.jobs]
        while page.next_after is not None:
            page = store.jobs(TOPIC, state, after=page.next_after, limit=7)
            seen += [info.id for info in page.jobs]
        assert sorted(seen) == ids and len(seen) == len(ids), state
        if state == "delayed":  # now make them all ready
            clock.advance(5_000)
            assert store.carry()[0] == len(ids)
    client.close()


def test_a_migrating_slot_refuses_scripts_before_writing_anything(
    fresh_cluster: LocalCluster,
) -> None:
    """Without the slot probe in _lib.lua, carry pushed onto a ready list the node lacked and
    failed after removing the jobs from the delayed set: they were in no structure."""
    client = fresh_cluster.client()
    clock = FakeClock()
    store = Store(client, "mig", clock)
    store.add_many([store.new_job("t", f"j{n}", n, delay_ms=1_000) for n in range(5)])
    slot = key_slot(store.keys.jobs.encode())
    source = fresh_cluster.master_of_slot(slot)
    target = next(p for p in fresh_cluster.master_ports() if p != source)
    source_client = fresh_cluster.node_by_port(source).client()
    target_client = fresh_cluster.node_by_port(target).client()
    target_client.execute_command(  # type: ignore[no-untyped-call]
        "CLUSTER", "SETSLOT", slot, "IMPORTING", fresh_cluster.node_id(source)
    )
    source_client.execute_command(  # type: ignore[no-untyped-call]
        "CLUSTER", "SETSLOT", slot, "MIGRATING", fresh_cluster.node_id(target)
    )
    audit_before = source_client.xlen(store.keys.audit)
    clock.advance(2_000)
    # redis-py retries TRYAGAIN for a while, then gives up ("TTL exhausted").
    with pytest.raises((TryAgainError, ClusterError)):
        store.carry()
    buckets: Any = source_client.zrange(store.keys.delayed, 0, -1)  # see lua/_delayed.lua
    still_delayed = sum(
        int(source_client.zcard(store.keys.due_bucket(b.decode()))) for b in buckets
    )
    assert still_delayed == 5  # nothing was moved half-way
    assert source_client.xlen(store.keys.audit) == audit_before
    # Finish the move: the jobs carry normally from the new owner.
    keys = source_client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)  # type: ignore[no-untyped-call]
    source_client.execute_command(  # type: ignore[no-untyped-call]
        "MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys
    )
    for port in fresh_cluster.master_ports():
        with fresh_cluster.node_by_port(port).client() as node:
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", fresh_cluster.node_id(target))
    assert store.carry() == (5, None)
    assert structure_problems(store) == []
    assert fresh_cluster.master_of_slot(slot) == target
    for c in (client, source_client, target_client):
        c.close()


def test_jobs_flow_on_the_cluster(clean_cluster: LocalCluster) -> None:
    client = clean_cluster.client()
    clock = SystemClock()
    store = sharded(client, clock)
    flow = Flow(store, clock, jobs=300, add_interval_s=0.002).start()
    flow.finish()
    assert flow.problems() == []
    assert flow.log.errors == {}
    assert structure_problems(store) == []
    client.close()
    clock.close()


@pytest.mark.slow
def test_slots_migrated_while_jobs_flow_lose_nothing(
    fresh_cluster: LocalCluster,
) -> None:
    client = fresh_cluster.client()
    clock = SystemClock()
    store = sharded(client, clock)
    flow = Flow(store, clock, jobs=500, add_interval_s=0.004).start()
    slots = [key_slot(k.jobs.encode()) for k in store.shard_keys]
    moves = 0
    deadline = time.monotonic() + 20
    while flow.producer.is_alive() and time.monotonic() < deadline:
        for slot in slots:
            owner = fresh_cluster.master_of_slot(slot)
            others = [p for p in fresh_cluster.master_ports() if p != owner]
            fresh_cluster.migrate_slot(slot, others[moves % len(others)], pause_s=0.02)
            moves += 1
    flow.finish()
    assert moves >= len(slots)
    assert flow.problems() == []
    assert structure_problems(store) == []
    client.close()
    clock.close()


@pytest.mark.slow
def test_a_master_killed_while_jobs_flow_loses_no_confirmed_job(
    fresh_cluster: LocalCluster,
) -> None:
    client = fresh_cluster.client()
    clock = SystemClock()
    # Durable adds: a confirmed add is on a replica too, so the promoted replica has it.
    store = sharded(client, clock, durability=Durability(replicas=1, timeout_ms=2_000))
    flow = Flow(store, clock, jobs=400, add_interval_s=0.005).start()
    wait_until(lambda: flow.added() >= 150, what="jobs to be flowing before the crash")
    victim = fresh_cluster.master_of_slot(key_slot(store.shard_keys[0].jobs.encode()))
    fresh_cluster.node_by_port(victim).kill()
    fresh_cluster.wait_healthy(timeout_s=FAILOVER_S)  # its replica took over
    assert victim not in fresh_cluster.master_ports()
    # The operator restarts it: it rejoins as the new master's replica, so durable adds to that
    # master's shards (which failed meanwhile: no replica to acknowledge) succeed again.
    fresh_cluster.node_by_port(victim).start()
    fresh_cluster.wait_healthy(timeout_s=FAILOVER_S)
    flow.finish()
    assert flow.problems() == []
    assert sum(flow.log.errors.values()) > 0  # the crash was felt, and survived
    client.close()
    clock.close()


@pytest.mark.slow
def test_redis_cli_reshard_while_jobs_flow_loses_nothing(
    fresh_cluster: LocalCluster,
) -> None:
    """The operator's tool: every slot of the master holding shard 0 moves to another master."""
    client = fresh_cluster.client()
    clock = SystemClock()
    store = sharded(client, clock)
    flow = Flow(store, clock, jobs=400, add_interval_s=0.004).start()
    source = fresh_cluster.master_of_slot(key_slot(store.shard_keys[0].jobs.encode()))
    target = next(p for p in fresh_cluster.master_ports() if p != source)
    done = subprocess.run(
        [
            fresh_cluster.redis_cli, "--cluster", "reshard", f"127.0.0.1:{source}",
            "--cluster-from", fresh_cluster.node_id(source),
            "--cluster-to", fresh_cluster.node_id(target),
            "--cluster-slots", "16384", "--cluster-yes",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-500:] + done.stderr[-500:]
    assert fresh_cluster.master_of_slot(key_slot(store.shard_keys[0].jobs.encode())) == target
    flow.finish()
    assert flow.problems() == []
    assert structure_problems(store) == []
    client.close()
    clock.close()
