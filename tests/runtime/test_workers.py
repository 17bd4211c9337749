"""Worker heartbeats: a started queue is listed with its topics and busy slots, a stopped one
disappears at once, a crashed one when its key expires; `redelay workers` shows the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import redis
from _wait import wait_until

from actors import DelayQueue, Job, WorkerInfo
from actors.clock import SystemClock
from actors.server.embedded import RedisProcess
from actors.storage import heartbeats
from actors.storage.keys import worker_key, workers_key
from actors.storage.store import Store

NS = "beats"


@pytest.fixture
def queue(redis_client: redis.Redis, redis_server: RedisProcess) -> Iterator[DelayQueue]:
    q = DelayQueue(redis_server.url, namespace=NS, consumer_name="worker-a")
    yield q
    q.stop(grace=1)


def info(name: str, beat_ms: int = 1) -> WorkerInfo:
    return WorkerInfo(name, "host-1", 42, ("mail",), 1, 4, 0, beat_ms)


@pytest.mark.slow
def test_a_started_queue_is_listed_with_its_topics_and_busy_slots(queue: DelayQueue) -> None:
    release = threading.Event()

    @queue.handler("mail", concurrency=3)
    def handle(job: Job) -> None:
        release.wait(20)

    @queue.handler("sms", concurrency=2)
    def handle_sms(job: Job) -> None:
        pass

    assert queue.workers() == []
    queue.start()
    (found,) = queue.workers()  # the first beat is written before start() returns
    assert (found.name, found.pid, found.topics) == ("worker-a", os.getpid(), ("mail", "sms"))
    assert (found.busy_slots, found.slots) == (0, 5)
    queue.add("mail", "m1")
    try:
        # The next beats report the running handler.
        wait_until(lambda: queue.workers()[0].busy_slots == 1, what="a busy slot in a beat")
    finally:
        release.set()


def test_a_stopped_queue_is_gone_at_once(queue: DelayQueue, redis_client: redis.Redis) -> None:
    queue.handler("mail")(lambda job: None)
    queue.start()
    assert [w.name for w in queue.workers()] == ["worker-a"]
    queue.stop(grace=1)
    assert Store(redis_client, NS, SystemClock()).workers() == []
    assert redis_client.smembers(workers_key(NS)) == set()


def test_a_worker_that_stops_beating_drops_out_when_its_key_expires(
    redis_client: redis.Redis,
) -> None:
    heartbeats.beat(redis_client, NS, info("crashed"), ttl_ms=200)
    heartbeats.beat(redis_client, NS, info("alive"), ttl_ms=60_000)
    assert [w.name for w in heartbeats.workers(redis_client, NS)] == ["alive", "crashed"]
    wait_until(
        lambda: [w.name for w in heartbeats.workers(redis_client, NS)] == ["alive"],
        what="the crashed worker's heartbeat to expire",
    )
    # The reader pruned the index: nothing of the crashed worker is left behind.
    assert redis_client.smembers(workers_key(NS)) == {b"alive"}
    assert redis_client.exists(worker_key(NS, "crashed")) == 0


def test_an_unreadable_heartbeat_is_skipped_not_fatal(redis_client: redis.Redis) -> None:
    heartbeats.beat(redis_client, NS, info("good"), ttl_ms=60_000)
    redis_client.sadd(workers_key(NS), "bad")
    redis_client.set(worker_key(NS, "bad"), b"{not json")
    assert [w.name for w in heartbeats.workers(redis_client, NS)] == ["good"]


def test_a_heartbeat_round_trips() -> None:
    original = info("w", beat_ms=123)
    assert heartbeats.decode(heartbeats.encode(original)) == original


def test_the_ttl_is_checked(redis_client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="ttl_ms"):
        heartbeats.beat(redis_client, NS, info("w"), ttl_ms=5)


def redelay(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDELAY_REDIS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", "workers", "--redis", url, "--namespace", NS, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.slow
def test_the_workers_command_lists_heartbeats(
    redis_client: redis.Redis, redis_server: RedisProcess
) -> None:
    assert redelay(redis_server.url).stdout.strip() == "no live workers"
    heartbeats.beat(redis_client, NS, info("w1", beat_ms=1_700_000_000_000), ttl_ms=60_000)
    result = redelay(redis_server.url, "--json")
    assert result.returncode == 0, result.stderr
    (doc,) = json.loads(result.stdout)["workers"]
    assert doc["name"] == "w1" and doc["topics"] == ["mail"]
    assert (doc["busy_slots"], doc["slots"], doc["pid"]) == (1, 4, 42)
    assert doc["beat"] == "2023-11-14T22:13:20.000+00:00"
    table = redelay(redis_server.url).stdout
    assert "w1" in table and "host-1" in table and "1/4" in table
