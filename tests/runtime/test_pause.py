"""Pausing a topic: stored in Redis, so every process and every shard obeys; due jobs still become
ready and wait; a resume wakes the listeners; both are audited as topic events of their own.
Real redis-server everywhere (the suite's fixtures)."""

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

from actors import DelayQueue, Job
from actors.clock import FakeClock
from actors.replay import fold
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

SHARDS = 3


def topic_events(store: Store, shard: int) -> list[tuple[str, str, str]]:
    """One shard's topic events (event, topic, id), oldest first."""
    return [
        (f["e"], f["t"], f["i"])
        for _, f in store.iter_shard_audit(shard)
        if f["e"] in ("paused", "resumed")
    ]


def test_a_paused_topic_leases_nothing_while_due_jobs_still_become_ready(
    store: Store, fake_clock: FakeClock
) -> None:
    store.add(store.new_job("t", "now"))
    store.add(store.new_job("t", "later", delay_ms=1_000))
    store.add(store.new_job("other", "x"))
    assert store.pause("t") is True
    batch = store.lease_batch("t", 10, "w")
    assert batch.leases == [] and batch.paused and batch.wait_ms is None
    fake_clock.advance(1_000)
    assert store.carry()[0] == 1  # the pause does not stop time: "later" is ready now
    assert store.lease("t", 10) == []
    assert store.stats(with_paused=True)["t"] == {
        "delayed": 0,
        "ready": 2,
        "leased": 0,
        "dead": 0,
        "paused": 1,
    }
    # Another topic is not affected.
    assert [lease.id for lease in store.lease("other", 10)] == ["x"]
    assert store.stats(with_paused=True)["other"]["paused"] == 0

    assert store.pause("t", False) is True
    batch = store.lease_batch("t", 10, "w")
    assert sorted(lease.id for lease in batch.leases) == ["later", "now"]
    assert batch.wait_ms == 0 and not batch.paused


def test_pause_and_resume_are_audited_once_per_change_and_replay_ignores_them(
    store: Store,
) -> None:
    store.add(store.new_job("t", "a"))
    assert store.pause("t") is True
    assert store.pause("t") is False  # already paused: nothing written
    assert store.pause("t", False) is True
    assert store.pause("t", False) is False
    assert topic_events(store, 0) == [("paused", "t", ""), ("resumed", "t", "")]
    replay = fold(store.iter_audit())
    assert replay.anomalies == []
    assert set(replay.jobs) == {("t", "a")}
    assert replay.topic_events == {"paused": 1, "resumed": 1}


def test_a_resume_publishes_the_topic_on_the_ready_channel(store: Store) -> None:
    pubsub = store.client.pubsub()
    pubsub.subscribe(store.keys.ready_channel)
    wait_until(lambda: pubsub.get_message(timeout=0.1), what="the subscribe confirmation")
    store.pause("t")
    store.pause("t", False)
    message = wait_until(lambda: pubsub.get_message(timeout=0.1), what="the resume notice")
    assert message["data"] == b"t"
    pubsub.close()


def test_every_shard_obeys_and_writes_its_own_event(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    sharded = Store(redis_client, "shop", fake_clock, shards=SHARDS)
    sharded.add_many([sharded.new_job("t", f"j{n}") for n in range(30)])
    assert sharded.pause("t") is True
    assert sharded.lease("t", 30) == []
    assert sharded.paused_topics() == {"t"}
    # Each shard's stream has its own paused event; no order across shards is promised.
    for shard in range(SHARDS):
        assert topic_events(sharded, shard) == [("paused", "t", "")]
    sharded.pause("t", False)
    for shard in range(SHARDS):
        assert topic_events(sharded, shard) == [("paused", "t", ""), ("resumed", "t", "")]
    leased = sharded.lease("t", 30) + sharded.lease("t", 30)
    assert len({lease.id for lease in leased}) == 30


def test_a_topic_name_is_checked_before_anything_is_written(store: Store) -> None:
    with pytest.raises(ValueError, match="topic"):
        store.pause("a|b")
    assert store.audit_length() == 0


@pytest.fixture
def worker(redis_server: RedisProcess) -> Iterator[tuple[DelayQueue, list[str]]]:
    queue = DelayQueue(redis_server.url, namespace="pausing", sweep_interval_s=0.2)
    handled: list[str] = []
    lock = threading.Lock()

    @queue.handler("t", concurrency=4)
    def handle(job: Job) -> None:
        with lock:
            handled.append(job.id)

    queue.start()
    yield queue, handled
    queue.stop(grace=1)


def test_a_running_worker_stops_leasing_a_paused_topic_and_is_woken_by_the_resume(
    worker: tuple[DelayQueue, list[str]], redis_server: RedisProcess
) -> None:
    queue, handled = worker
    # Another process (a producer, an operator) pauses: the worker learns it from Redis.
    admin = DelayQueue(redis_server.url, namespace="pausing", producer_only=True)
    try:
        admin.add("t", "before")
        wait_until(lambda: handled == ["before"], what="the first job handled")
        assert admin.pause("t") is True

        def paused_waits() -> int:
            listener = queue.actor_stats().get("listener:t") or {}
            return int(listener.get("paused_waits", 0))

        admin.add_many([{"topic": "t", "id": f"j{n}"} for n in range(5)])
        # The add's ready notice makes the listener lease; the script refuses: it now waits.
        wait_until(lambda: paused_waits() >= 1, what="the listener told the topic is paused")
        assert admin.stats()["t"]["ready"] == 5 and admin.stats()["t"]["paused"] == 1
        assert handled == ["before"]

        assert admin.resume("t") is True
        wait_until(lambda: len(handled) == 6, what="the resumed topic's jobs handled")
        assert sorted(handled[1:]) == [f"j{n}" for n in range(5)]
    finally:
        admin.close()


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    if "REDELAY_REDIS_SERVER" in os.environ:
        env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args, "--redis", url, "--namespace", "clipause"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.slow
def test_the_cli_pauses_and_resumes_with_json(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    assert cli(redis_server.url, "add", "mail", "m1", "--delay", "1h").returncode == 0
    paused = cli(redis_server.url, "pause", "mail", "--json")
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout) == {"topic": "mail", "paused": True, "changed": True}
    again = cli(redis_server.url, "pause", "mail")
    assert again.returncode == 0 and "already" in again.stdout
    stats = json.loads(cli(redis_server.url, "stats", "--json").stdout)
    assert stats["topics"]["mail"]["paused"] == 1
    resumed = cli(redis_server.url, "resume", "mail", "--json")
    assert json.loads(resumed.stdout) == {"topic": "mail", "paused": False, "changed": True}
    stats = json.loads(cli(redis_server.url, "stats", "--json").stdout)
    assert "mail" not in stats["topics"] or stats["topics"]["mail"]["paused"] == 0


def test_the_cli_refuses_to_pause_a_topic_no_job_has_used(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    """A typo must not print "paused" while the real topic keeps running."""
    assert cli(redis_server.url, "add", "order.timeout", "o1", "--delay", "1h").returncode == 0
    typo = cli(redis_server.url, "pause", "order.timout", "--json")
    assert typo.returncode == 1, typo.stderr
    error = json.loads(typo.stdout)
    assert error["error"] == "not_found" and error["similar"] == ["order.timeout"]
    assert "did you mean order.timeout?" in error["message"] and "--new" in error["message"]
    stats = json.loads(cli(redis_server.url, "stats", "--json").stdout)
    assert set(stats["topics"]) == {"order.timeout"}  # no phantom topic
    assert cli(redis_server.url, "resume", "order.timout").returncode == 1
    # Meant: paused before its first job, and then it is known.
    new = cli(redis_server.url, "pause", "refunds", "--new", "--json")
    assert new.returncode == 0 and json.loads(new.stdout)["changed"] is True, new.stderr
    assert cli(redis_server.url, "resume", "refunds").returncode == 0
