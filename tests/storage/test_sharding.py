"""A sharded Store on one private redis-server: routing, grouping, fairness, merged reads."""

from __future__ import annotations

from collections import Counter

import pytest
import redis
from _wait import WAIT_S

from actors.clock import FakeClock
from actors.errors import ConfigError, ErrorCode, JobExistsError, PartialAddError, ValidationError
from actors.replay import compare, fold
from actors.storage import codec
from actors.storage.keys import ShardKeys, config_key, member, shard_of
from actors.storage.namespace_config import ensure_shards, stored_shards
from actors.storage.store import Store, open_store
from actors.values import AuditRetention, TopicConfig

SHARDS = 3


@pytest.fixture
def sharded(redis_client: redis.Redis, fake_clock: FakeClock) -> Store:
    return Store(redis_client, "shop", fake_clock, shards=SHARDS)


def ids_per_shard(count: int, topic: str = "t") -> dict[int, list[str]]:
    """``count`` job ids for each shard, found by hashing candidates."""
    found: dict[int, list[str]] = {s: [] for s in range(SHARDS)}
    n = 0
    while any(len(v) < count for v in found.values()):
        shard = shard_of(topic, f"job-{n}", SHARDS)
        if len(found[shard]) < count:
            found[shard].append(f"job-{n}")
        n += 1
    return found


def shard_index(topic: str, job_id: str) -> int:
    return shard_of(topic, job_id, SHARDS)


def test_jobs_land_in_their_shard_and_get_cancel_go_straight_there(
    sharded: Store,
) -> None:
    ids = [f"order-{n}" for n in range(30)]
    sharded.add_many([sharded.new_job("t", i, {"n": i}, delay_ms=1000) for i in ids])
    for job_id in ids:
        home = shard_of("t", job_id, SHARDS)
        for s in range(SHARDS):
            stored = sharded.client.hexists(ShardKeys("shop", s).jobs, member("t", job_id))
            assert stored == (s == home)
        info = sharded.get("t", job_id)
        assert info is not None and info.state == "delayed"
    assert len({shard_of("t", i, SHARDS) for i in ids}) == SHARDS  # the test spans shards
    assert sharded.cancel("t", ids[0]) == "removed"
    assert sharded.get("t", ids[0]) is None
    assert sharded.cancel("t", ids[0]) == "missing"


def test_add_many_keeps_order_and_replace_reports_previous_states(
    sharded: Store, fake_clock: FakeClock
) -> None:
    ids = [f"j{n}" for n in range(12)]
    assert sharded.add_many([sharded.new_job("t", i, delay_ms=500) for i in ids]) == ["new"] * 12
    again = [sharded.new_job("t", i, delay_ms=0) for i in [*ids[:3], "fresh"]]
    assert sharded.add_many(again, replace=True) == ["delayed", "delayed", "delayed", "new"]
    for job_id in [*ids[:3], "fresh"]:
        info = sharded.get("t", job_id)
        assert info is not None and info.state == "ready"


def test_an_existing_job_in_one_shard_blocks_only_that_shard(sharded: Store) -> None:
    ids = ids_per_shard(2)
    existing = ids[0][0]
    sharded.add(sharded.new_job("t", existing, delay_ms=100))
    batch = [existing, ids[0][1], ids[1][0], ids[2][0]]
    with pytest.raises(PartialAddError) as caught:
        sharded.add_many([sharded.new_job("t", i, delay_ms=100) for i in batch])
    assert caught.value.jobs == [("t", existing)]
    assert sorted(caught.value.added) == sorted([("t", ids[1][0]), ("t", ids[2][0])])
    assert "2 jobs in other shards were added" in str(caught.value)
    assert sharded.get("t", ids[0][1]) is None  # same shard as the existing job: not added
    assert sharded.get("t", ids[1][0]) is not None
    assert sharded.get("t", ids[2][0]) is not None


def test_a_batch_within_one_shard_is_still_all_or_nothing(sharded: Store) -> None:
    ids = ids_per_shard(3)[1]
    sharded.add(sharded.new_job("t", ids[0]))
    with pytest.raises(JobExistsError) as caught:
        sharded.add_many([sharded.new_job("t", i) for i in ids])
    assert not isinstance(caught.value, PartialAddError)
    assert sharded.get("t", ids[1]) is None and sharded.get("t", ids[2]) is None


def test_bad_input_in_one_shard_writes_nothing_in_any_shard(sharded: Store) -> None:
    ids = ids_per_shard(1)
    sharded.add_many([sharded.new_job("t", ids[s][0]) for s in range(SHARDS)])
    leases = sharded.lease("t", 10)
    assert len(leases) == SHARDS
    acks: list[tuple[str, str, str]] = [(x.topic, x.id, x.token) for x in leases]
    with pytest.raises(ValidationError):
        sharded.ack_many([*acks, ("bad topic", "x", "tok")])
    assert sharded.stats()["t"]["leased"] == SHARDS
    with pytest.raises(ValidationError):
        sharded.add_many([sharded.new_job("t", "dup"), sharded.new_job("t", "dup")])
    assert sharded.get("t", "dup") is None


def test_lease_starts_at_a_different_shard_each_call_so_none_starves(
    sharded: Store,
) -> None:
    ids = ids_per_shard(6)
    sharded.add_many([sharded.new_job("t", i) for s in range(SHARDS) for i in ids[s]])
    first_shards = []
    for _ in range(SHARDS):
        leases = sharded.lease("t", 2)
        assert len(leases) == 2
        assert len({shard_index(x.topic, x.id) for x in leases}) == 1
        first_shards.append(shard_index(leases[0].topic, leases[0].id))
    assert sorted(first_shards) == list(range(SHARDS))
    # A limit larger than one shard's backlog is filled from the next shards.
    leases = sharded.lease("t", 10)
    assert len(leases) == 10
    assert len({shard_index(x.topic, x.id) for x in leases}) >= 2


def test_lease_skips_empty_shards_and_returns_nothing_when_all_are_empty(
    sharded: Store,
) -> None:
    assert sharded.lease("t", 5) == []
    only = ids_per_shard(3)[2]
    sharded.add_many([sharded.new_job("t", i) for i in only])
    for _ in range(SHARDS):  # whichever shard the rotation starts at
        leases = sharded.lease("t", 1)
        assert [x.id for x in leases] in ([only[0]], [only[1]], [only[2]])
    assert sharded.lease("t", 1) == []


def test_per_job_results_come_back_in_input_order_across_shards(
    sharded: Store, fake_clock: FakeClock
) -> None:
    ids = ids_per_shard(2)
    sharded.add_many([sharded.new_job("t", i) for s in range(SHARDS) for i in ids[s]])
    leases = sharded.lease("t", 6)
    assert len(leases) == 6
    mixed = sorted(leases, key=lambda x: x.id)
    acks = [(x.topic, x.id, x.token if n % 2 else "stale-token") for n, x in enumerate(mixed)]
    codes = sharded.ack_many(acks)
    expected = [ErrorCode.OK if n % 2 else ErrorCode.STALE_TOKEN for n in range(6)]
    assert codes == expected
    rest = [x for n, x in enumerate(mixed) if n % 2 == 0]
    extended = sharded.extend_many([(x.topic, x.id, x.token, 60_000) for x in rest])
    assert extended == [fake_clock.now_ms() + 60_000] * 3
    failed = sharded.fail_many([(x.topic, x.id, x.token, "boom", 0) for x in rest[:2]])
    assert failed == ["ready", "ready"]
    assert sharded.release_many([(rest[2].topic, rest[2].id, rest[2].token)]) == [0]
    assert sharded.stats()["t"] == {"delayed": 0, "ready": 3, "leased": 0, "dead": 0}


def test_carry_and_expire_cover_every_shard(sharded: Store, fake_clock: FakeClock) -> None:
    ids = ids_per_shard(2)
    due = [sharded.new_job("t", ids[s][0], delay_ms=100 * (s + 1)) for s in range(SHARDS)]
    later = [sharded.new_job("t", ids[s][1], delay_ms=10_000 + s) for s in range(SHARDS)]
    sharded.add_many([*due, *later])
    assert sharded.earliest_due_ms() == fake_clock.now_ms() + 100
    fake_clock.advance(1_000)
    moved, next_due = sharded.carry()
    assert moved == SHARDS
    assert next_due == fake_clock.now_ms() - 1_000 + 10_000
    sharded.configure_topic("t", TopicConfig(retry_ms=(5_000,), lease_ms=1_000))
    leases = sharded.lease("t", 10)
    assert len(leases) == SHARDS
    assert sharded.earliest_deadline_ms() == fake_clock.now_ms() + 1_000
    fake_clock.advance(1_000)
    expired, next_deadline = sharded.expire()
    assert (expired, next_deadline) == (SHARDS, None)
    assert sharded.stats()["t"] == {"delayed": 2 * SHARDS, "ready": 0, "leased": 0, "dead": 0}


def test_topic_defaults_reach_every_shard(sharded: Store) -> None:
    sharded.configure_topic("mail", TopicConfig(retry_ms=(1, 2), lease_ms=2_000))
    for s in range(SHARDS):
        blob = sharded.client.hget(ShardKeys("shop", s).topics, "mail")
        assert blob is not None
        assert codec.unpack_topic_config(blob) == ((1, 2), 2_000, 3)  # type: ignore[arg-type]
    assert sharded.stored_topic_config("mail") == TopicConfig((1, 2), 2_000)


def test_reads_merge_the_shards(sharded: Store, fake_clock: FakeClock) -> None:
    ids = ids_per_shard(2)
    sharded.configure_topic("t", TopicConfig(retry_ms=(1,), lease_ms=1_000))
    sharded.add_many([sharded.new_job("t", i) for s in range(SHARDS) for i in ids[s]])
    sharded.add(sharded.new_job("other", "x", delay_ms=50))
    leases = sharded.lease("t", 6)
    for attempt in range(2):
        results = sharded.fail_many([(x.topic, x.id, x.token, "no", None) for x in leases])
        if attempt == 0:
            assert results == ["delayed"] * 6
            fake_clock.advance(10)
            sharded.carry()
            leases = sharded.lease("t", 6)
        else:
            assert results == ["dead"] * 6
    assert sharded.topics() == ["other", "t"]
    assert sharded.stats() == {
        "t": {"delayed": 0, "ready": 0, "leased": 0, "dead": 6},
        "other": {"delayed": 1, "ready": 0, "leased": 0, "dead": 0},
    }
    dead = sharded.dead("t", limit=4)
    assert len(dead) == 4 and all(d.state == "dead" for d in dead)
    assert len(sharded.snapshot().jobs) == 7
    assert sharded.requeue_dead([(d.topic, d.id) for d in dead]) == 4
    assert sharded.purge_dead([(x.topic, x.id) for x in sharded.dead("t")]) == 2
    assert sharded.stats()["t"] == {"delayed": 0, "ready": 4, "leased": 0, "dead": 0}


def test_audit_merges_in_time_order_and_replays_to_the_live_state(
    sharded: Store, fake_clock: FakeClock
) -> None:
    ids = ids_per_shard(3)
    for step in range(3):
        sharded.add_many([sharded.new_job("t", ids[s][step], delay_ms=5) for s in range(SHARDS)])
        fake_clock.advance(7)
        sharded.carry()
    leases = sharded.lease("t", 4)
    sharded.ack_many([(x.topic, x.id, x.token) for x in leases[:2]])
    entries = list(sharded.iter_audit(chunk=2))
    times = [int(fields["ms"]) for _, fields in entries]
    assert times == sorted(times)
    per_shard = [list(sharded.iter_shard_audit(s)) for s in range(SHARDS)]
    assert sum(len(p) for p in per_shard) == len(entries)
    for shard_entries in per_shard:  # each shard's own order survives the merge
        positions = [entries.index(e) for e in shard_entries]
        assert positions == sorted(positions)
    replay = fold(entries)
    assert replay.anomalies == []
    assert compare(replay, sharded.snapshot()) == []


def test_shard_count_is_recorded_once_and_a_disagreeing_process_is_refused(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    assert stored_shards(redis_client, "shop") is None
    assert ensure_shards(redis_client, "shop", 4) == 4
    assert redis_client.hget(config_key("shop"), "shards") == b"4"
    assert ensure_shards(redis_client, "shop") == 4  # unset: adopts the record
    with pytest.raises(ConfigError) as caught:
        ensure_shards(redis_client, "shop", 2)
    message = str(caught.value)
    assert "stored with 4 shards" in message and "configured with 2" in message
    with pytest.raises(ConfigError, match="stored with 4 shards"):
        open_store(redis_client, "shop", fake_clock, shards=1)
    with pytest.raises(ConfigError, match="from 1 to"):
        ensure_shards(redis_client, "other", 0)


def test_a_namespace_with_unrecorded_jobs_cannot_become_sharded(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    old = Store(redis_client, "legacy", fake_clock)
    old.add(old.new_job("t", "a"))
    with pytest.raises(ConfigError, match="already holds jobs in one shard"):
        ensure_shards(redis_client, "legacy", 3)
    assert ensure_shards(redis_client, "legacy") == 1


def test_open_store_gives_one_store_class_whatever_the_shard_count(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    one = open_store(redis_client, "a", fake_clock)
    three = open_store(redis_client, "b", fake_clock, shards=3)
    assert type(one) is Store and one.shard_count == 1
    assert type(three) is Store and three.shard_count == 3
    assert three.wake_channels == [ShardKeys("b", s).wake_channel for s in range(3)]
    assert three.ready_channels == [ShardKeys("b", s).ready_channel for s in range(3)]
    for store in (one, three):
        store.add(store.new_job("t", "x"))
        assert Counter(s for c in store.stats().values() for s, n in c.items() if n) == {"ready": 1}


def test_scripts_publish_a_ready_notice_when_a_list_fills_or_a_lease_leaves_jobs(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store = Store(redis_client, "notes", fake_clock)
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.ready_channel)
    pubsub.get_message(timeout=1)

    def notices() -> list[str]:
        """What was published since the last call: a marker published now arrives after all
        of it (a channel keeps its order), so nothing late is missed and nothing is waited out."""
        redis_client.publish(store.keys.ready_channel, "end-of-notices")
        found: list[str] = []
        while True:
            message = pubsub.get_message(timeout=WAIT_S)
            assert message is not None, f"the marker did not come back within {WAIT_S}s"
            if message["data"] == b"end-of-notices":
                return found
            found.append(message["data"].decode())

    store.add(store.new_job("t", "a"))  # empty list -> one job
    store.add(store.new_job("t", "b"))  # already had one
    assert notices() == ["t"]
    assert len(store.lease("t", 1)) == 1  # full, and "b" is left behind
    assert notices() == ["t"]
    last = store.lease("t", 5)  # took everything there was
    assert notices() == []
    store.release_many([(x.topic, x.id, x.token) for x in last])  # back onto an empty list
    assert notices() == ["t"]
    store.lease("t", 5)
    store.add(store.new_job("u", "later", delay_ms=10))
    fake_clock.advance(10)
    store.carry()  # onto u's empty list
    assert notices() == ["u"]
    pubsub.close()


def test_audit_retention_is_recorded_for_the_namespace_and_adopted_by_later_processes(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    kept = AuditRetention(kind="MINID", retention_ms=30 * 24 * 3600 * 1000)
    worker = open_store(redis_client, "kept", fake_clock, retention=kept)
    # A process that does not say (a CLI command, a web app) trims as the workers do.
    producer = open_store(redis_client, "kept", fake_clock)
    other = open_store(redis_client, "other", fake_clock)
    assert isinstance(worker, Store) and isinstance(producer, Store) and isinstance(other, Store)
    assert worker.retention == kept
    assert producer.retention == kept
    assert other.retention == AuditRetention()


def test_the_store_reads_the_cli_needs_cover_every_shard(
    sharded: Store, fake_clock: FakeClock
) -> None:
    ids = ids_per_shard(3)
    sharded.configure_topic("t", TopicConfig(retry_ms=(1,), lease_ms=1_000))
    sharded.configure_topic("u", TopicConfig(retry_ms=(1,), lease_ms=1_000))
    sharded.add_many([sharded.new_job("t", i) for s in range(SHARDS) for i in ids[s]])
    sharded.add(sharded.new_job("u", "x"))
    for _ in range(2):  # the second failure is the last
        leases = sharded.lease("t", 9) + sharded.lease("u", 1)
        sharded.fail_many([(x.topic, x.id, x.token, "no", None) for x in leases])
        fake_clock.advance(5)
        sharded.carry()
    every = sorted(("t", i) for s in range(SHARDS) for i in ids[s])
    assert sorted(sharded.dead_keys(chunk=2)) == sorted([*every, ("u", "x")])
    assert sorted(sharded.dead_keys("t", chunk=2)) == every
    entries = list(sharded.iter_audit(chunk=2))
    assert sharded.audit_length() == len(entries) > 10
    for shard in range(SHARDS):
        live, last_id = sharded.snapshot_with_audit_position(shard)
        own = list(sharded.iter_shard_audit(shard, chunk=2))
        assert own and last_id == own[-1][0]
        assert {key for key in live.jobs} == {("t", i) for i in ids[shard]} | (
            {("u", "x")} if shard_of("u", "x", SHARDS) == shard else set()
        )
        assert compare(fold(own), live) == []
        upto = list(sharded.iter_shard_audit(shard, end=own[1][0], chunk=1))
        assert upto == own[:2]


def test_a_one_shard_store_has_the_same_reads(store: Store) -> None:
    store.add_many([store.new_job("t", f"j{n}") for n in range(3)])
    assert store.shard_count == 1 and list(store.dead_keys()) == []
    live, last_id = store.snapshot_with_audit_position(0)
    assert len(live.jobs) == 3 and store.audit_length() == 3
    assert last_id == list(store.iter_shard_audit(0))[-1][0]
