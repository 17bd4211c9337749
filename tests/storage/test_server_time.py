"""Due times and lease deadlines are judged by the Redis server's clock: a store whose clock is a
minute off either way makes nothing due, expired or deadlined early (issue 51, section 3). The
scripts read TIME unless the clock drives them (a FakeClock: tests/core/test_calls.py), on Redis 7
and on the embedded Redis 6.2, which must replicate such a script by its effects."""

from __future__ import annotations

import pytest
import redis
from _binaries import binary_label, redis_binaries

from actors.clock import SystemClock
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

NS = "servertime"
LEASE_MS = 10_000


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.fixture
def client(binary_server: RedisProcess) -> redis.Redis:
    found = binary_server.client()
    found.flushall()
    return found


def stores(client: redis.Redis, skew_ms: int) -> tuple[Store, Store]:
    """(a store whose clock is right, one whose clock is ``skew_ms`` off)."""
    return Store(client, NS, SystemClock()), Store(client, NS, SystemClock(offset_ms=skew_ms))


@pytest.mark.parametrize("binary_server", redis_binaries(), ids=binary_label, indirect=True)
@pytest.mark.parametrize("skew_ms", [60_000, -60_000], ids=["ahead", "behind"])
def test_a_skewed_clock_carries_and_expires_nothing_early(
    client: redis.Redis, skew_ms: int
) -> None:
    honest, skewed = stores(client, skew_ms)
    honest.add(honest.new_job("t", "later", delay_ms=30_000))
    honest.add(honest.new_job("t", "now"))
    assert skewed.carry_swept().moved == 0  # "now" was ready at once; "later" is not due
    (lease,) = honest.lease("t", 1, "holder")
    assert honest.extend_many([("t", "now", lease.token, LEASE_MS)])[0] > 0
    swept = skewed.expire_swept()
    assert swept.moved == 0
    assert swept.next_in_ms is not None and LEASE_MS - 1_000 < swept.next_in_ms <= LEASE_MS
    info = honest.get("t", "later")
    assert info is not None and info.state == "delayed"


@pytest.mark.parametrize("binary_server", redis_binaries(), ids=binary_label, indirect=True)
@pytest.mark.parametrize("skew_ms", [60_000, -60_000], ids=["ahead", "behind"])
def test_a_skewed_clock_sets_deadlines_and_retries_from_the_servers_time(
    client: redis.Redis, skew_ms: int
) -> None:
    honest, skewed = stores(client, skew_ms)
    honest.add(honest.new_job("t", "a", lease_ms=LEASE_MS, retry_ms=[5_000]))
    before = server_ms(client)
    (lease,) = skewed.lease("t", 1, "skewed")
    (extended,) = skewed.extend_many([("t", "a", lease.token, LEASE_MS)])
    after = server_ms(client)
    for deadline in (lease.deadline_ms, extended):
        assert before + LEASE_MS <= deadline <= after + LEASE_MS
    assert honest.expire_swept().moved == 0  # the lease is live by the server's clock
    assert skewed.fail_many([("t", "a", lease.token, "boom", None)]) == ["delayed"]
    after = server_ms(client)
    info = honest.get("t", "a")
    assert info is not None and info.state == "delayed"
    assert before + 5_000 <= info.due_ms <= after + 5_000
    assert skewed.carry_swept().moved == 0


@pytest.mark.parametrize("binary_server", redis_binaries(), ids=binary_label, indirect=True)
@pytest.mark.parametrize("skew_ms", [60_000, -60_000], ids=["ahead", "behind"])
def test_a_delay_counts_from_the_servers_now_whatever_the_producers_clock(
    client: redis.Redis, skew_ms: int
) -> None:
    _, skewed = stores(client, skew_ms)
    before = server_ms(client)
    # One call, two delays: each counts from the call's now.
    skewed.add_many(
        [skewed.new_job("t", f"j{n}", {"n": n}, delay_ms=2_000) for n in range(3)]
        + [skewed.new_job("t", "k7", {"n": 7}, delay_ms=7_000)]
    )
    skewed.add(skewed.new_job("t", "now", {"n": 9}))
    skewed.add(skewed.new_job("t", "j0", {"n": 0}, delay_ms=5_000), replace=True)
    after = server_ms(client)
    dues = []
    for job_id, delay in (("j0", 5_000), ("j1", 2_000), ("j2", 2_000), ("k7", 7_000)):
        info = skewed.get("t", job_id)
        assert info is not None and info.state == "delayed", info
        assert before + delay <= info.due_ms <= after + delay, (job_id, before, info.due_ms)
        assert info.body == {"n": int(job_id[1])}  # the record around the due time is intact
        dues.append(info.due_ms)
    assert skewed.earliest_due_ms() == min(dues)  # the delayed set holds what the record says
    now = skewed.get("t", "now")
    assert now is not None and now.state == "ready"
