"""The tokens hash is pinned as a hashtable (actors/_constants.py, TOKENS_PIN_BYTES): as a
listpack every lookup of a member scans it, which cost about 5 µs of Redis CPU per job with a
hundred jobs in flight. The pin is the "" field; nothing that reads the hash sees it as a job."""

from __future__ import annotations

import redis

from actors import _constants as c
from actors.clock import FakeClock
from actors.errors import ErrorCode
from actors.replay import compare, fold
from actors.storage.store import Store


def test_the_first_lease_makes_a_hashtable_that_outlives_its_leases(
    store: Store, redis_client: redis.Redis
) -> None:
    tokens = store.keys.tokens
    store.add_many([store.new_job("t", f"j{n}") for n in range(3)])
    assert redis_client.exists(tokens) == 0  # nothing leased yet: no hash at all
    leases = store.lease("t", 3)
    assert redis_client.object("encoding", tokens) == b"hashtable"
    assert redis_client.hlen(tokens) == 1 + 3
    assert len(redis_client.hget(tokens, "") or b"") == c.TOKENS_PIN_BYTES
    assert store.ack_many([(x.topic, x.id, x.token, "") for x in leases]) == [ErrorCode.OK] * 3
    # Every lease ended, and the pin keeps the key: the next lease does not make a listpack.
    assert redis_client.hkeys(tokens) == [b""]
    store.add(store.new_job("t", "next"))
    store.lease("t", 1)
    assert redis_client.object("encoding", tokens) == b"hashtable"


def test_a_lease_that_takes_nothing_makes_no_hash(store: Store, redis_client: redis.Redis) -> None:
    assert store.lease("t", 10) == []
    assert redis_client.exists(store.keys.tokens) == 0


def test_the_pin_is_no_job_to_the_snapshot_and_the_replay(
    store: Store, fake_clock: FakeClock
) -> None:
    store.add_many([store.new_job("t", "a"), store.new_job("t", "b")])
    (lease,) = store.lease("t", 1)
    snapshot = store.snapshot()
    assert sorted(snapshot.jobs) == [("t", "a"), ("t", "b")]
    assert snapshot.problems == {}
    assert snapshot.jobs[("t", "a")].token == lease.token
    assert compare(fold(store.iter_audit()), snapshot) == []
