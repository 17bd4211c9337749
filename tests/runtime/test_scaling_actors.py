"""The DelayQueue's actors on a sharded namespace on Redis Cluster, and through a Sentinel
failover: jobs keep flowing, nothing confirmed is lost, nothing runs early, the audit replays."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from _wait import WAIT_S, wait_until
from cluster import FAILOVER_S, fail_over
from redis.crc import key_slot

from actors import DelayQueue, Job
from actors.replay import compare, fold
from actors.values import Durability
from simulations.crash.local_redis import LocalCluster, LocalSentinel

TOPIC = "t"
SHARDS = 6


class Recorder:
    """Per job id, the times (ms) its handler started, and how early any start was."""

    def __init__(self, queue: DelayQueue) -> None:
        self.queue = queue
        self.started: dict[str, list[int]] = {}
        self.early: list[str] = []
        self.lock = threading.Lock()

    def record(self, job: Job) -> None:
        now = self.queue.clock.now_ms()
        with self.lock:
            self.started.setdefault(job.id, []).append(now)
            if now < job.due_ms:
                self.early.append(f"{job.id} started at {now}, due {job.due_ms}")

    def done(self) -> set[str]:
        with self.lock:
            return set(self.started)


def worker(url: str, namespace: str, **kwargs: object) -> tuple[DelayQueue, Recorder]:
    queue = DelayQueue(
        url,
        namespace,
        sweep_interval_s=0.2,
        watchdog_interval_s=1.0,
        default_lease=1.0,
        default_retry=[0.1] * 20,
        **kwargs,  # type: ignore[arg-type]
    )
    recorder = Recorder(queue)
    queue.handler(TOPIC, concurrency=8, timeout=0.4)(recorder.record)
    return queue, recorder


def produce(producer: DelayQueue, ids: list[str], max_delay_s: float, seed: int) -> list[str]:
    """Adds the jobs one by one; returns those whose durable add was confirmed."""
    rng = random.Random(seed)
    confirmed = []
    for job_id in ids:
        try:
            producer.add(TOPIC, job_id, job_id, delay=rng.uniform(0, max_delay_s))
            confirmed.append(job_id)
        except Exception:  # the failover: outcome unknown, not counted as confirmed
            time.sleep(0.05)  # back off as a producer should; not waiting for anything
    return confirmed


def check(queue: DelayQueue, recorder: Recorder, confirmed: list[str]) -> dict[str, Any]:
    """Waits for every confirmed job and for the queue to be empty, then holds the stream to the
    live state; returns health().

    Waiting for the queue to empty matters: a handler is recorded as done before its ack's round
    trip, so reading the stream and then the live state while acks are in flight can see a job
    leased in one and acked in the other.
    """
    wait_until(
        lambda: set(confirmed) <= recorder.done(),
        "every confirmed job to run",
        timeout_s=2 * WAIT_S,
    )
    empty = {"delayed": 0, "ready": 0, "leased": 0, "dead": 0, "paused": 0}
    wait_until(
        lambda: queue.stats().get(TOPIC, empty) == empty, "every ack to land", timeout_s=2 * WAIT_S
    )
    health = queue.health()
    assert recorder.early == []
    replay = fold(queue.store.iter_audit())
    assert replay.anomalies == []
    assert compare(replay, queue.store.snapshot()) == []
    return health


@pytest.fixture
def cleanup() -> Iterator[list[DelayQueue]]:
    queues: list[DelayQueue] = []
    yield queues
    for q in queues:
        q.stop(grace=1)


def clients_per_node(cluster: LocalCluster) -> dict[int, int]:
    found = {}
    for port in cluster.master_ports():
        with cluster.node_by_port(port).client() as client:
            found[port] = int(client.info("clients")["connected_clients"]) - 1  # minus us
    return found


def test_a_sharded_queue_on_the_cluster_runs_every_job_once_on_time(
    cluster: LocalCluster,
    cleanup: list[DelayQueue],
) -> None:
    cluster.flushall()
    before = clients_per_node(cluster)
    queue, recorder = worker(cluster.url(), "shop", shards=SHARDS)
    cleanup.append(queue)
    assert queue.store.shard_count == SHARDS
    queue.start()
    ids = [f"order-{n}" for n in range(300)]
    queue.add_many([{"topic": TOPIC, "id": i, "delay": n % 30 / 100} for n, i in enumerate(ids)])
    wait_until(lambda: set(ids) <= recorder.done(), "every job to run", timeout_s=2 * WAIT_S)
    opened = {p: clients_per_node(cluster)[p] - before[p] for p in before}  # while running
    check(queue, recorder, ids)
    assert all(len(times) == 1 for times in recorder.started.values())  # nothing failed
    assert queue.stats()[TOPIC] == {"delayed": 0, "ready": 0, "leased": 0, "dead": 0, "paused": 0}
    # One pool per node, used by a handful of actor threads, and one pub/sub connection in all.
    assert sum(opened.values()) <= 3 * 6 + 1, opened
    print(f"connections opened per master by one worker process: {opened}")


@pytest.mark.slow
def test_a_cluster_master_killed_while_the_actors_work(
    fresh_cluster: LocalCluster,
    cleanup: list[DelayQueue],
) -> None:
    queue, recorder = worker(fresh_cluster.url(), "shop", shards=SHARDS)
    producer = DelayQueue(
        fresh_cluster.url(),
        "shop",
        producer_only=True,
        durability=Durability(replicas=1, timeout_ms=2_000),
    )
    cleanup += [queue, producer]
    queue.start()
    ids = [f"order-{n}" for n in range(240)]
    confirmed: list[str] = []
    thread = threading.Thread(
        target=lambda: confirmed.extend(produce(producer, ids, 1.0, seed=3)), daemon=True
    )
    thread.start()
    wait_until(lambda: len(recorder.done()) >= 40, "jobs to be flowing")
    assert queue.store.shard_count == SHARDS
    victim = fresh_cluster.master_of_slot(key_slot(queue.store.shard_keys[0].jobs.encode()))
    fresh_cluster.node_by_port(victim).kill()
    fresh_cluster.wait_healthy(timeout_s=FAILOVER_S)
    fresh_cluster.node_by_port(victim).start()  # back as the new master's replica
    fresh_cluster.wait_healthy(timeout_s=FAILOVER_S)
    wait_until(lambda: not thread.is_alive(), what="the producer to finish", timeout_s=FAILOVER_S)
    assert len(confirmed) >= len(ids) // 2
    health = check(queue, recorder, confirmed)
    assert health and all(unit["alive"] for unit in health.values())


@pytest.mark.slow
def test_the_actors_carry_on_through_a_sentinel_failover(
    sentinel_setup: LocalSentinel,
    cleanup: list[DelayQueue],
) -> None:
    url = sentinel_setup.url()
    queue, recorder = worker(url, "shop")  # one shard: blocking listeners, the wake subscriber
    producer = DelayQueue(
        url, "shop", producer_only=True, durability=Durability(replicas=1, timeout_ms=2_000)
    )
    cleanup += [queue, producer]
    queue.start()
    ids = [f"order-{n}" for n in range(200)]
    confirmed: list[str] = []
    thread = threading.Thread(
        target=lambda: confirmed.extend(produce(producer, ids, 1.0, seed=5)), daemon=True
    )
    thread.start()
    wait_until(lambda: len(recorder.done()) >= 40, "jobs to be flowing")
    old, _ = fail_over(sentinel_setup)  # the sentinels make the old master the new replica
    wait_until(lambda: not thread.is_alive(), what="the producer to finish", timeout_s=FAILOVER_S)
    assert len(confirmed) >= len(ids) // 2
    health = check(queue, recorder, confirmed)
    assert health and all(unit["alive"] for unit in health.values())
    client = queue.client
    assert isinstance(client, redis.Redis)
    assert client.info("server")["tcp_port"] != old  # the actors' client follows the master
