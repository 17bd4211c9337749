"""One group per transition script: what it does to the job, what it returns, the event it writes.

Every test reads the audit entries the call wrote (AuditCursor), so a script that forgets its
XADD, or writes the wrong fields, fails here and not only in the stateful test.
"""

from __future__ import annotations

import time

import pytest
import redis
from _audit import AuditCursor, structure_problems
from _wait import WAIT_S

from actors import _constants as c
from actors.clock import FakeClock
from actors.errors import ErrorCode, JobExistsError
from actors.storage import reads
from actors.storage.calls import decoded as _s
from actors.storage.scripts import sources
from actors.storage.store import Store, open_store
from actors.values import Lease, TopicConfig

SCHEDULE = TopicConfig(retry_ms=(1_000, 5_000), lease_ms=2_000)


@pytest.fixture
def audit(store: Store) -> AuditCursor:
    return AuditCursor(store)


@pytest.fixture
def shop(store: Store) -> Store:
    """A store whose topic "t" retries after 1 s, then 5 s, then dies; leases last 2 s."""
    store.configure_topic("t", SCHEDULE)
    return store


def ready_list(store: Store, topic: str = "t") -> list[str]:
    return [_s(m).split("|", 1)[1] for m in store.client.lrange(store.keys.ready(topic), 0, -1)]


def leased_job(
    store: Store, audit: AuditCursor, job_id: str = "j", topic: str = "t", **kwargs: object
) -> Lease:
    """Adds a job that is due now and leases it; the cursor skips the setup's events."""
    store.add(store.new_job(topic, job_id, {"n": 1}, **kwargs))  # type: ignore[arg-type]
    (lease,) = store.lease(topic, 1, "worker-1")
    audit.new()
    return lease


def dead_job(store: Store, audit: AuditCursor, job_id: str = "j") -> None:
    """Fails a job of topic "t" (schedule 1 s, 5 s) three times, so it is dead."""
    lease = leased_job(store, audit, job_id)
    clock = store.clock
    assert isinstance(clock, FakeClock)
    for _ in range(2):
        store.fail("t", job_id, lease.token, "boom")
        clock.advance(5_000)
        store.carry()
        (lease,) = store.lease("t", 1)
    assert store.fail("t", job_id, lease.token, "boom") == "dead"
    audit.new()


def assert_clean(store: Store) -> None:
    assert structure_problems(store) == []


# -- add ------------------------------------------------------------------------------------


def test_add_of_a_later_job_puts_it_in_the_delayed_set(
    store: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    now = fake_clock.now_ms()
    assert store.add(store.new_job("t", "j", {"x": 1}, delay_ms=5_000)) == "new"
    info = store.get("t", "j")
    assert info is not None
    assert (info.state, info.due_ms, info.attempt, info.attempts_failed) == (
        "delayed",
        now + 5_000,
        1,
        0,
    )
    assert info.body_bytes == b'{"x":1}' and info.body == {"x": 1}  # raw, and decoded as Job's
    assert info.created_ms == now
    event = audit.one("added")
    assert event == {
        "e": "added",
        "t": "t",
        "i": "j",
        "a": "1",
        "ms": str(now),
        "due": str(now + 5_000),
        "to": "delayed",
    }
    assert_clean(store)


def test_add_of_a_due_job_puts_it_straight_on_the_ready_list(
    store: Store, audit: AuditCursor
) -> None:
    store.add(store.new_job("t", "j"))
    assert ready_list(store) == ["j"]
    assert reads.delayed_entries(store.client, store.keys) == []
    assert audit.one("added")["to"] == "ready"
    assert_clean(store)


def test_add_of_an_existing_job_raises_and_writes_nothing(store: Store, audit: AuditCursor) -> None:
    store.add(store.new_job("t", "j", {"v": 1}, delay_ms=1_000))
    audit.new()
    with pytest.raises(JobExistsError) as caught:
        store.add(store.new_job("t", "j", {"v": 2}))
    assert caught.value.jobs == [("t", "j")]
    info = store.get("t", "j")
    assert info is not None and info.body_bytes == b'{"v":1}' and info.state == "delayed"
    assert audit.new() == []


def test_add_stores_the_topic_defaults_only_once(store: Store) -> None:
    store.default_topic_config = TopicConfig(retry_ms=(7,), lease_ms=700)
    store.add(store.new_job("t", "a"))
    store.default_topic_config = TopicConfig(retry_ms=(9,), lease_ms=900)
    store.add(store.new_job("t", "b"))
    assert store.stored_topic_config("t") == TopicConfig(retry_ms=(7,), lease_ms=700)


def test_add_publishes_the_due_time_when_a_job_becomes_the_earliest(
    store: Store, fake_clock: FakeClock
) -> None:
    now = fake_clock.now_ms()
    pubsub = store.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.wake_channel)
    try:
        assert pubsub.get_message(timeout=1.0) is None  # consumes the subscribe confirmation
        store.add(store.new_job("t", "a", delay_ms=5_000))
        store.add(store.new_job("t", "b", delay_ms=9_000))  # not the earliest: no message
        store.add(store.new_job("t", "c", delay_ms=1_000))
        received: list[int] = []
        deadline = time.monotonic() + WAIT_S
        while len(received) < 2 and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.5)
            if message is not None:
                received.append(int(message["data"]))
        assert received == [now + 5_000, now + 1_000]
        assert pubsub.get_message(timeout=0.2) is None
    finally:
        pubsub.close()


def test_a_ready_notice_goes_out_only_when_a_topics_ready_list_was_empty(
    store: Store, fake_clock: FakeClock
) -> None:
    pubsub = store.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.ready_channel)

    def notices_until_marker() -> list[str]:
        """The notices published so far: a marker published last comes after every one."""
        store.client.publish(store.keys.ready_channel, "marker")
        got: list[str] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.5)
            if message is None:
                continue
            if message["data"] == b"marker":
                return got
            got.append(message["data"].decode())
        raise AssertionError(f"no marker after {got}")

    try:
        assert notices_until_marker() == []
        store.add(store.new_job("t", "a"))  # an add into an empty list
        store.add(store.new_job("t", "b"))  # and into one that holds a job
        assert notices_until_marker() == ["t"]
        store.add_many([store.new_job("t", "c", delay_ms=10), store.new_job("u", "d", delay_ms=10)])
        fake_clock.advance(10)
        assert store.carry(100)[0] == 2  # c into t's two-job list, d into u's empty one
        assert notices_until_marker() == ["u"]
        assert len(store.lease("t", 10, "w")) == 3  # t's list is empty again
        store.add(store.new_job("t", "e", delay_ms=10))
        fake_clock.advance(10)
        assert store.carry(100)[0] == 1
        assert notices_until_marker() == ["t"]
    finally:
        pubsub.close()


def test_add_many_is_all_or_nothing(store: Store, audit: AuditCursor) -> None:
    store.add(store.new_job("t", "b", delay_ms=1_000))
    audit.new()
    batch = [store.new_job("t", name, delay_ms=1_000) for name in ("a", "b", "c")]
    with pytest.raises(JobExistsError) as caught:
        store.add_many(batch)
    assert caught.value.jobs == [("t", "b")]
    assert store.get("t", "a") is None and store.get("t", "c") is None
    assert audit.new() == []
    assert_clean(store)


def test_add_many_adds_every_job_in_one_call(store: Store, audit: AuditCursor) -> None:
    batch = [store.new_job("t", "a"), store.new_job("u", "b", delay_ms=10)]
    assert store.add_many(batch) == ["new", "new"]
    entries = audit.new()
    assert [(f["e"], f["t"], f["i"], f["to"]) for _, f in entries] == [
        ("added", "t", "a", "ready"),
        ("added", "u", "b", "delayed"),
    ]
    assert store.stats() == {
        "t": {"delayed": 0, "ready": 1, "leased": 0, "dead": 0},
        "u": {"delayed": 1, "ready": 0, "leased": 0, "dead": 0},
    }
    assert_clean(store)


def test_add_many_finds_an_existing_job_past_the_first_thousand(
    store: Store, audit: AuditCursor
) -> None:
    """The script checks the members in slices of 1,000: one in a later slice refuses the
    batch as one in the first does."""
    store.add(store.new_job("t", "j1500", delay_ms=1_000))
    audit.new()
    batch = [store.new_job("t", f"j{n}", delay_ms=1_000) for n in range(2_001)]
    with pytest.raises(JobExistsError) as caught:
        store.add_many(batch)
    assert caught.value.jobs == [("t", "j1500")]
    assert store.stats()["t"]["delayed"] == 1
    assert audit.new() == []
    del batch[1_500]
    assert store.add_many(batch) == ["new"] * 2_000
    assert store.stats()["t"]["delayed"] == 2_001
    assert_clean(store)


def test_add_loads_its_script_again_after_a_flush(store: Store, audit: AuditCursor) -> None:
    store.add(store.new_job("t", "a"))
    store.client.script_flush()  # as after a restart or a failover: EVALSHA answers NOSCRIPT
    assert store.add(store.new_job("t", "b")) == "new"
    assert [f["i"] for _, f in audit.new()] == ["a", "b"]


# -- replace --------------------------------------------------------------------------------


def test_replace_of_a_new_job_adds_it(store: Store, audit: AuditCursor) -> None:
    assert store.add(store.new_job("t", "j"), replace=True) == "new"
    assert audit.one("added")["to"] == "ready"


@pytest.mark.parametrize("was", ["delayed", "ready", "leased", "dead"])
def test_replace_reschedules_the_job_from_any_state(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock, was: str
) -> None:
    lease = None
    if was == "delayed":
        shop.add(shop.new_job("t", "j", {"old": 1}, delay_ms=60_000))
    elif was == "ready":
        shop.add(shop.new_job("t", "j", {"old": 1}))
    elif was == "leased":
        lease = leased_job(shop, audit, "j")
    else:
        dead_job(shop, audit, "j")
    audit.new()
    now = fake_clock.now_ms()

    assert shop.add(shop.new_job("t", "j", {"new": 1}, delay_ms=3_000), replace=True) == was

    info = shop.get("t", "j")
    assert info is not None
    assert (info.state, info.due_ms, info.attempts_failed, info.body_bytes) == (
        "delayed",
        now + 3_000,
        0,
        b'{"new":1}',
    )
    event = audit.one("replaced")
    assert (event["was"], event["to"], event["due"], event["a"]) == (
        was,
        "delayed",
        str(now + 3_000),
        "1",
    )
    assert_clean(shop)
    if lease is not None:
        # The old consumer's lease was revoked: its ack is refused and recorded.
        assert shop.ack("t", "j", lease.token) is ErrorCode.NOT_LEASED
        rejected = audit.one("rejected")
        assert (rejected["op"], rejected["tok"], rejected["code"]) == ("ack", lease.token, "-4")
        assert shop.get("t", "j") == info


# -- carry ----------------------------------------------------------------------------------


def test_carry_never_moves_a_job_before_its_due_time(
    store: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    due = fake_clock.now_ms() + 1_000
    store.add(store.new_job("t", "j", delay_ms=1_000))
    audit.new()
    fake_clock.advance(999)
    assert store.carry() == (0, due)
    assert ready_list(store) == []
    assert audit.new() == []
    fake_clock.advance(1)
    assert store.carry() == (1, None)
    assert ready_list(store) == ["j"]
    event = audit.one("ready")
    assert (event["due"], event["ms"], event["a"]) == (str(due), str(due), "1")
    assert_clean(store)


def test_carry_moves_at_most_limit_jobs_earliest_first(
    store: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    # Added in reverse order of due time; ties (d1, d2) move in member order.
    for name, delay in [("e", 50), ("d2", 40), ("d1", 40), ("c", 30), ("b", 20), ("a", 10)]:
        store.add(store.new_job("t", name, delay_ms=delay))
    store.add(store.new_job("t", "later", delay_ms=1_000))
    audit.new()
    fake_clock.advance(100)
    assert store.carry(limit=2) == (2, fake_clock.now_ms() - 70)
    assert ready_list(store) == ["a", "b"]
    assert [f["i"] for _, f in audit.new()] == ["a", "b"]
    assert store.carry(limit=10) == (4, fake_clock.now_ms() + 900)
    assert ready_list(store) == ["a", "b", "c", "d1", "d2", "e"]
    assert audit.events() == ["ready"] * 4
    assert_clean(store)


def test_carry_appends_behind_jobs_already_ready_per_topic(
    store: Store, fake_clock: FakeClock
) -> None:
    store.add(store.new_job("t", "first"))
    store.add(store.new_job("t", "x", delay_ms=5))
    store.add(store.new_job("u", "y", delay_ms=5))
    fake_clock.advance(5)
    assert store.carry() == (2, None)
    assert ready_list(store, "t") == ["first", "x"]
    assert ready_list(store, "u") == ["y"]
    assert_clean(store)


def test_carry_and_lease_move_the_largest_batch_in_one_call(
    store: Store, fake_clock: FakeClock
) -> None:
    # Lua's unpack() fails beyond ~8000 values; the script must chunk its ZREM/RPUSH calls.
    store.add_many([store.new_job("t", f"j{n}", delay_ms=1) for n in range(10_000)])
    fake_clock.advance(1)
    assert store.carry(limit=10_000) == (10_000, None)
    assert store.client.llen(store.keys.ready("t")) == 10_000
    assert store.stats()["t"] == {"delayed": 0, "ready": 10_000, "leased": 0, "dead": 0}
    assert len(store.lease("t", 10_000)) == 10_000
    assert store.stats()["t"] == {"delayed": 0, "ready": 0, "leased": 10_000, "dead": 0}


# -- lease ----------------------------------------------------------------------------------


def test_lease_hands_out_the_oldest_ready_jobs_up_to_the_limit(
    store: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    for name in ("a", "b", "c"):
        store.add(store.new_job("t", name, {"name": name}))
    store.add(store.new_job("other", "z"))
    audit.new()
    now = fake_clock.now_ms()
    leases = store.lease("t", 2, "worker-7")
    assert [lease.id for lease in leases] == ["a", "b"]
    assert len({lease.token for lease in leases}) == 2
    for lease in leases:
        assert lease.deadline_ms == now + 30_000  # the default topic lease
        assert lease.attempt == 1
        assert lease.body == f'{{"name":"{lease.id}"}}'.encode()
        assert lease.due_ms == now
    entries = audit.new()
    assert [(f["e"], f["i"], f["tok"], f["dl"], f["by"], f["a"]) for _, f in entries] == [
        ("leased", lease.id, lease.token, str(lease.deadline_ms), "worker-7", "1")
        for lease in leases
    ]
    assert ready_list(store) == ["c"]
    snapshot = store.snapshot()
    assert snapshot.jobs[("t", "a")].token == leases[0].token
    assert snapshot.jobs[("t", "a")].lease_deadline_ms == now + 30_000
    assert_clean(store)


def test_lease_skips_a_ready_member_without_a_record_and_still_leases_the_rest(
    store: Store,
) -> None:
    for name in ("a", "b", "c"):
        store.add(store.new_job("t", name))
    store.client.hdel(store.keys.jobs, "t|b")  # a hand edit (or a bug) behind the scripts' back
    leases = store.lease("t", 3)
    assert [lease.id for lease in leases] == ["a", "c"]
    assert ready_list(store) == []
    assert store.stats()["t"]["leased"] == 2


def test_lease_of_an_empty_topic_returns_nothing_and_writes_nothing(
    store: Store, audit: AuditCursor
) -> None:
    assert store.lease("t", 5) == []
    assert audit.new() == []


def test_lease_lasts_the_jobs_own_lease_else_the_topics(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    now = fake_clock.now_ms()
    shop.add(shop.new_job("t", "own", lease_ms=500))
    shop.add(shop.new_job("t", "topic"))
    own, topic = shop.lease("t", 2)
    assert (own.deadline_ms, own.lease_ms) == (now + 500, 500)
    assert (topic.deadline_ms, topic.lease_ms) == (now + 2_000, None)


# -- ack ------------------------------------------------------------------------------------


def test_ack_many_acks_good_tokens_and_records_the_rejected_ones(
    store: Store, audit: AuditCursor
) -> None:
    for name in ("a", "b"):
        store.add(store.new_job("t", name))
    a, b = store.lease("t", 2)
    audit.new()
    codes = store.ack_many(
        [("t", "a", a.token), ("t", "b", "1-999"), ("t", "gone", "1-1")], detail="HTTP 200"
    )
    assert codes == [ErrorCode.OK, ErrorCode.STALE_TOKEN, ErrorCode.NOT_LEASED]
    entries = [f for _, f in audit.new()]
    assert [(f["e"], f["i"]) for f in entries] == [
        ("acked", "a"),
        ("rejected", "b"),
        ("rejected", "gone"),
    ]
    assert (entries[0]["tok"], entries[0]["detail"], entries[0]["a"]) == (a.token, "HTTP 200", "1")
    assert "cancelled" not in entries[0]
    assert (entries[1]["op"], entries[1]["tok"], entries[1]["code"]) == ("ack", "1-999", "-3")
    assert (entries[2]["op"], entries[2]["code"], entries[2]["a"]) == ("ack", "-4", "0")
    assert store.get("t", "a") is None
    b_info = store.get("t", "b")
    assert b_info is not None and b_info.state == "leased" and b_info.token == b.token
    assert_clean(store)


def test_ack_with_the_token_of_an_expired_lease_is_rejected_after_a_new_lease(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    old = leased_job(shop, audit, "j")
    fake_clock.advance(2_000)
    assert shop.expire() == (1, None)
    fake_clock.advance(1_000)
    shop.carry()
    (new,) = shop.lease("t", 1)
    audit.new()
    assert new.attempt == 1  # a lost lease counts no attempt
    assert shop.ack("t", "j", old.token) is ErrorCode.STALE_TOKEN
    rejected = audit.one("rejected")
    assert (rejected["op"], rejected["tok"], rejected["code"], rejected["a"]) == (
        "ack",
        old.token,
        "-3",
        "1",
    )
    info = shop.get("t", "j")
    assert info is not None and info.state == "leased" and info.token == new.token
    assert shop.ack("t", "j", new.token) is ErrorCode.OK
    assert audit.one("acked")["tok"] == new.token


def test_a_second_ack_of_the_same_lease_is_rejected(store: Store, audit: AuditCursor) -> None:
    lease = leased_job(store, audit)
    assert store.ack("t", "j", lease.token) is ErrorCode.OK
    assert store.ack("t", "j", lease.token) is ErrorCode.NOT_LEASED
    assert audit.events() == ["acked", "rejected"]


def test_a_repeat_of_an_ack_in_the_same_call_is_rejected_as_acking_them_in_turn_would(
    store: Store, audit: AuditCursor
) -> None:
    # ack-7.lua reads every token up front and deletes at the end: a job acked earlier in the
    # call must still count as gone for its repeat.
    lease = leased_job(store, audit)
    codes = store.ack_many([("t", "j", lease.token), ("t", "j", lease.token)])
    assert codes == [ErrorCode.OK, ErrorCode.NOT_LEASED]
    entries = [f for _, f in audit.new()]
    assert [(f["e"], f.get("code"), f["a"]) for f in entries] == [
        ("acked", None, "1"),
        ("rejected", "-4", "0"),
    ]
    assert store.get("t", "j") is None
    assert_clean(store)


def test_one_ack_call_ends_the_jobs_of_several_topics_and_counts_each(store: Store) -> None:
    for topic in ("t", "u"):
        for name in ("a", "b"):
            store.add(store.new_job(topic, name))
    leases = store.lease("t", 2) + store.lease("u", 2)
    assert store.ack_many([(x.topic, x.id, x.token) for x in leases]) == [ErrorCode.OK] * 4
    assert store.stats().get("t", {}).get("leased", 0) == 0
    assert store.stats().get("u", {}).get("leased", 0) == 0
    assert_clean(store)


def test_lease_and_ack_batches_larger_than_one_slice_of_the_scripts(store: Store) -> None:
    # The scripts read and write in slices of 1,000 values (500 pairs): cross several.
    store.add_many([store.new_job("t", str(n)) for n in range(1_250)])
    leases = store.lease("t", 1_250)
    assert sorted(int(x.id) for x in leases) == list(range(1_250))
    assert len({x.token for x in leases}) == 1_250
    assert store.stats()["t"]["leased"] == 1_250
    codes = store.ack_many([(x.topic, x.id, x.token) for x in leases])
    assert codes == [ErrorCode.OK] * 1_250
    assert store.stats().get("t", {}).get("leased", 0) == 0
    assert_clean(store)


def test_ack_and_lease_acks_then_leases_in_one_call(
    store: Store, audit: AuditCursor, redis_client: redis.Redis
) -> None:
    store.add_many([store.new_job("t", name) for name in ("a", "b", "c", "d")])
    a, _ = store.lease("t", 2, "w")
    audit.new()
    for _, source in sources().values():  # so no NOSCRIPT retry adds a call, in any test order
        redis_client.script_load(source)
    before = redis_client.info("commandstats")["cmdstat_evalsha"]["calls"]
    codes, batch = store.ack_and_lease(
        [("t", "a", a.token, ""), ("t", "b", "1-999", "")], "t", 5, "w"
    )
    assert redis_client.info("commandstats")["cmdstat_evalsha"]["calls"] - before == 2
    assert codes == [ErrorCode.OK, ErrorCode.STALE_TOKEN]
    assert not isinstance(batch, Exception)
    assert ([x.id for x in batch.leases], batch.wait_ms) == (["c", "d"], 0)
    # The acks' events come first: the lease ran after them, in the same round trip.
    assert [(f["e"], f["i"]) for _, f in audit.new()] == [
        ("acked", "a"),
        ("rejected", "b"),
        ("leased", "c"),
        ("leased", "d"),
    ]
    assert_clean(store)


def test_ack_and_lease_answers_names_never_leased_not_leased_and_changes_no_job(
    store: Store,
) -> None:
    """Its acks come from the pool's leases, so their names are not checked again; a name
    that is no leased job, even one the checks would refuse, is refused by the script."""
    store.add_many([store.new_job("t", name) for name in ("a", "b")])
    (a,) = store.lease("t", 1, "w")
    before = {name: store.get("t", name) for name in ("a", "b")}
    codes, batch = store.ack_and_lease(
        [("t", "never", "1-1", ""), ("no such topic", "bad id", "1-1", "")], "t", 0 + 1, "w"
    )
    assert codes == [ErrorCode.NOT_LEASED, ErrorCode.NOT_LEASED]
    assert not isinstance(batch, Exception) and [x.id for x in batch.leases] == ["b"]
    assert store.get("t", "a") == before["a"]  # still leased, with its own token
    assert store.stats()["t"] == {"delayed": 0, "ready": 0, "leased": 2, "dead": 0}
    leased_a = before["a"]
    assert leased_a is not None and leased_a.token == a.token


def test_ack_and_lease_on_a_paused_topic_acks_and_says_paused(store: Store) -> None:
    store.add_many([store.new_job("t", name) for name in ("a", "b")])
    (a,) = store.lease("t", 1)
    store.pause("t")
    codes, batch = store.ack_and_lease([("t", "a", a.token, "")], "t", 5, "w")
    assert codes == [ErrorCode.OK]
    assert not isinstance(batch, Exception) and batch.leases == [] and batch.paused
    assert_clean(store)


def test_ack_and_lease_refuses_a_namespace_of_several_shards(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    sharded = Store(redis_client, "several", fake_clock, shards=3)
    with pytest.raises(ValueError, match="one shard"):
        sharded.ack_and_lease([], "t", 1, "w")


# -- fail -----------------------------------------------------------------------------------


def test_fail_follows_the_schedule_then_the_job_is_dead(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    lease = leased_job(shop, audit, "j")
    # Attempts allowed = len(schedule) + 1 = 3; attempt n is retried schedule[n] ms after failing.
    for attempt, delay in [(1, 1_000), (2, 5_000)]:
        assert lease.attempt == attempt
        now = fake_clock.now_ms()
        assert shop.fail("t", "j", lease.token, f"boom {attempt}") == "delayed"
        info = shop.get("t", "j")
        assert info is not None
        assert (info.state, info.due_ms, info.attempts_failed, info.attempt) == (
            "delayed",
            now + delay,
            attempt,
            attempt + 1,
        )
        event = audit.one("failed")
        assert (event["a"], event["due"], event["why"], event["to"]) == (
            str(attempt),
            str(now + delay),
            f"boom {attempt}",
            "delayed",
        )
        fake_clock.advance(delay)
        shop.carry()
        (lease,) = shop.lease("t", 1)
        audit.new()
    assert lease.attempt == 3
    now = fake_clock.now_ms()
    assert shop.fail("t", "j", lease.token, "boom 3") == "dead"
    event = audit.one("dead")
    assert (event["a"], event["why"], event["via"]) == ("3", "boom 3", "failed")
    info = shop.get("t", "j")
    assert info is not None
    assert (info.state, info.attempt, info.attempts_failed, info.dead_since_ms) == (
        "dead",
        3,
        3,
        now,
    )
    assert [job.id for job in shop.dead("t")] == ["j"]
    assert shop.stats()["t"]["dead"] == 1
    assert_clean(shop)


def test_fail_with_a_retry_override_ignores_the_schedule(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    lease = leased_job(shop, audit, "j")
    now = fake_clock.now_ms()
    assert shop.fail("t", "j", lease.token, "rate limited", retry_after_ms=42) == "delayed"
    assert audit.one("failed")["due"] == str(now + 42)
    fake_clock.advance(42)
    shop.carry()
    (lease,) = shop.lease("t", 1)
    audit.new()
    assert shop.fail("t", "j", lease.token, "again", retry_after_ms=0) == "ready"
    assert audit.one("failed")["to"] == "ready"
    assert ready_list(shop) == ["j"]
    (lease,) = shop.lease("t", 1)
    # The override changes when, not whether: the third failure still ends the job.
    assert shop.fail("t", "j", lease.token, "last", retry_after_ms=0) == "dead"
    assert_clean(shop)


def test_fail_uses_the_jobs_own_schedule_over_the_topics(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    lease = leased_job(shop, audit, "j", retry_ms=[77])
    now = fake_clock.now_ms()
    assert shop.fail("t", "j", lease.token, "x") == "delayed"
    info = shop.get("t", "j")
    assert info is not None and info.due_ms == now + 77 and info.retry_ms == (77,)
    fake_clock.advance(77)
    shop.carry()
    (lease,) = shop.lease("t", 1)
    assert shop.fail("t", "j", lease.token, "x") == "dead"


def test_fail_with_a_stale_token_is_rejected_and_changes_nothing(
    shop: Store, audit: AuditCursor
) -> None:
    lease = leased_job(shop, audit, "j")
    before = shop.get("t", "j")
    assert shop.fail("t", "j", "0-0", "x") is ErrorCode.STALE_TOKEN
    assert shop.fail("t", "nope", "0-0", "x") is ErrorCode.NOT_LEASED
    assert [f["op"] for _, f in audit.new()] == ["fail", "fail"]
    assert shop.get("t", "j") == before
    assert shop.ack("t", "j", lease.token) is ErrorCode.OK


def test_fail_cuts_a_huge_reason(shop: Store, audit: AuditCursor) -> None:
    lease = leased_job(shop, audit, "j")
    shop.fail("t", "j", lease.token, "x" * 10_000)
    assert audit.one("failed")["why"] == "x" * 500


# -- extend ---------------------------------------------------------------------------------


def test_extend_pushes_the_deadline_so_the_lease_does_not_expire(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    lease = leased_job(shop, audit, "j")
    fake_clock.advance(1_500)
    now = fake_clock.now_ms()
    assert shop.extend_many([("t", "j", lease.token, 3_000)]) == [now + 3_000]
    event = audit.one("extended")
    assert (event["tok"], event["dl"], event["a"]) == (lease.token, str(now + 3_000), "1")
    fake_clock.advance(2_999)
    assert shop.expire() == (0, now + 3_000)
    info = shop.get("t", "j")
    assert info is not None and info.state == "leased" and info.lease_deadline_ms == now + 3_000
    assert shop.ack("t", "j", lease.token) is ErrorCode.OK


def test_extend_with_a_stale_token_is_rejected(shop: Store, audit: AuditCursor) -> None:
    lease = leased_job(shop, audit, "j")
    assert shop.extend_many([("t", "j", "0-1", 1_000), ("t", "no", "0-1", 1_000)]) == [-3, -4]
    assert [(f["op"], f["code"]) for _, f in audit.new()] == [("extend", "-3"), ("extend", "-4")]
    info = shop.get("t", "j")
    assert info is not None and info.lease_deadline_ms == lease.deadline_ms


# -- release --------------------------------------------------------------------------------


def test_release_puts_the_job_at_the_front_without_counting_an_attempt(
    store: Store, audit: AuditCursor
) -> None:
    for name in ("a", "b", "c"):
        store.add(store.new_job("t", name))
    (lease,) = store.lease("t", 1)
    audit.new()
    assert store.release_many([("t", "a", lease.token)]) == [0]
    event = audit.one("released")
    assert (event["tok"], event["a"]) == (lease.token, "1")
    assert ready_list(store) == ["a", "b", "c"]
    (again,) = store.lease("t", 1)
    assert (again.id, again.attempt) == ("a", 1)
    assert again.token != lease.token
    assert_clean(store)


def test_release_with_a_stale_token_is_rejected(store: Store, audit: AuditCursor) -> None:
    leased_job(store, audit, "j")
    assert store.release_many([("t", "j", "0-1")]) == [ErrorCode.STALE_TOKEN]
    assert audit.one("rejected")["op"] == "release"
    assert ready_list(store) == []


# -- expire ---------------------------------------------------------------------------------


def test_an_expired_lease_is_lost_not_a_failed_attempt(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    lease = leased_job(shop, audit, "j")
    fake_clock.advance(1_999)
    assert shop.expire() == (0, lease.deadline_ms)
    assert audit.new() == []
    fake_clock.advance(1)
    now = fake_clock.now_ms()
    assert shop.expire() == (1, None)
    event = audit.one("lost")
    # Due after the delay the schedule gives after the running attempt; not held against it: it
    # was not leased as a suspect, so it may have died with another job's worker.
    assert (event["a"], event["due"], event["why"], event["to"]) == (
        "1",
        str(now + 1_000),
        "lease-expired",
        "delayed",
    )
    assert (event["lost"], event["counted"]) == ("0", "0")
    info = shop.get("t", "j")
    assert info is not None
    assert (info.state, info.attempts_failed, info.due_ms, info.token) == (
        "delayed",
        0,
        now + 1_000,
        None,
    )
    assert (info.suspect, info.lost, info.quarantined) == (True, 0, False)
    assert shop.ack("t", "j", lease.token) is ErrorCode.NOT_LEASED
    assert_clean(shop)


def test_expire_recovers_at_most_limit_leases_and_ends_exhausted_jobs_dead(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    for name in ("a", "b", "c"):
        shop.add(shop.new_job("t", name, retry_ms=[0]))
    shop.lease("t", 3)
    fake_clock.advance(2_000)
    audit.new()
    now = fake_clock.now_ms()
    assert shop.expire(limit=2) == (2, now)
    # One sweep's jobs come due 100 ms apart (a first at once), so they are not leased together.
    assert [(f["e"], f["i"], f["to"], f["due"]) for _, f in audit.new()] == [
        ("lost", "a", "ready", str(now)),
        ("lost", "b", "delayed", str(now + 100)),
    ]
    assert shop.expire() == (1, None)
    assert [(f["e"], f["i"], f["to"]) for _, f in audit.new()] == [("lost", "c", "ready")]
    assert shop.stats()["t"] == {"delayed": 1, "ready": 2, "leased": 0, "dead": 0}
    assert_clean(shop)


def ids(leases: list[Lease]) -> list[str]:
    return [lease.id for lease in leases]


def test_a_suspect_runs_alone_and_is_quarantined_after_lost_max_losses_as_one(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    shop.configure_topic("t", TopicConfig(retry_ms=(0,), lease_ms=2_000, lost_max=2))
    shop.add_many([shop.new_job("t", name) for name in ("a", "b", "c")])
    assert ids(shop.lease("t", 2, "w1")) == ["a", "b"]
    fake_clock.advance(2_000)
    assert shop.expire() == (2, None)  # w1 died: a and b come back as suspects, none blamed
    fake_clock.advance(100)
    shop.carry()
    assert ready_list(shop) == ["c", "a", "b"]
    # An ordinary job, then not the suspect behind it: that one waits for a lease of its own.
    (ordinary,) = shop.lease("t", 5, "w2")
    assert ordinary.id == "c" and ready_list(shop) == ["a", "b"]
    assert shop.ack("t", "c", ordinary.token) is ErrorCode.OK
    assert ids(shop.lease("t", 5, "w3")) == ["a"]  # alone
    waiting = shop.lease_batch("t", 5, "w3")  # w3 runs a suspect: it is leased nothing else
    assert (waiting.leases, waiting.wait_ms) == ([], c.SUSPECT_POLL_MS)
    (b,) = shop.lease("t", 5, "w2")  # another worker takes the next suspect
    assert shop.ack("t", "b", b.token) is ErrorCode.OK  # b was innocent: gone, nothing held
    audit.new()
    for loss in (1, 2):  # w3 dies while a runs alone; then again
        fake_clock.advance(2_000)
        assert shop.expire() == (1, None)
        entry = audit.new()[-1][1]  # after the lease of the loop before
        info = shop.get("t", "a")
        assert info is not None and info.lost == loss
        if loss == 1:
            assert (entry["e"], entry["lost"], entry["counted"]) == ("lost", "1", "1")
            assert ids(shop.lease("t", 5, "w3")) == ["a"]  # its mark went with the lease
    assert (entry["e"], entry["why"], entry["lost"]) == ("quarantined", "lost", "2")
    assert info is not None
    assert (info.state, info.quarantined, info.attempts_failed) == ("dead", True, 0)
    assert shop.stats()["t"] == {"delayed": 0, "ready": 0, "leased": 0, "dead": 1}
    assert shop.requeue_dead([("t", "a")]) == 1
    info = shop.get("t", "a")
    assert info is not None and (info.lost, info.suspect, info.quarantined) == (0, False, False)
    assert_clean(shop)


# -- cancel ---------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["delayed", "ready", "dead"])
def test_cancel_removes_a_job_that_is_not_leased(
    shop: Store, audit: AuditCursor, state: str
) -> None:
    if state == "delayed":
        shop.add(shop.new_job("t", "j", delay_ms=1_000))
    elif state == "ready":
        shop.add(shop.new_job("t", "j"))
    else:
        dead_job(shop, audit, "j")
    audit.new()
    assert shop.cancel("t", "j") == "removed"
    event = audit.one("cancelled")
    assert event["from"] == state
    assert shop.get("t", "j") is None
    assert shop.stats()["t"] == {"delayed": 0, "ready": 0, "leased": 0, "dead": 0}
    assert_clean(shop)


def test_cancel_of_a_missing_job_says_so_and_writes_nothing(
    store: Store, audit: AuditCursor
) -> None:
    assert store.cancel("t", "nothing") == "missing"
    assert audit.new() == []


@pytest.mark.parametrize("ending", ["ack", "fail", "expire", "release"])
def test_cancel_of_a_leased_job_marks_it_and_its_end_removes_it(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock, ending: str
) -> None:
    lease = leased_job(shop, audit, "j")
    assert shop.cancel("t", "j") == "requested"
    assert audit.one("cancel_requested")["a"] == "1"
    assert shop.cancel("t", "j") == "requested"  # repeated: no second event
    assert audit.new() == []
    info = shop.get("t", "j")
    assert info is not None and info.state == "leased" and info.cancel_requested

    if ending == "ack":
        assert shop.ack("t", "j", lease.token) is ErrorCode.OK
        event = audit.one("acked")
        assert event["cancelled"] == "1"
    elif ending == "fail":
        assert shop.fail("t", "j", lease.token, "boom") == "cancelled"
        event = audit.one("cancelled")
        assert (event["from"], event["why"]) == ("leased", "boom")
    elif ending == "expire":
        fake_clock.advance(2_000)
        assert shop.expire() == (1, None)
        event = audit.one("cancelled")
        assert (event["from"], event["why"]) == ("leased", "lease-expired")
    else:
        assert shop.release_many([("t", "j", lease.token)]) == [1]
        event = audit.one("cancelled")
        assert (event["from"], event["why"]) == ("leased", "released")

    assert shop.get("t", "j") is None
    fake_clock.advance(60_000)
    assert shop.carry() == (0, None)
    assert shop.lease("t", 10) == []
    assert shop.stats()["t"] == {"delayed": 0, "ready": 0, "leased": 0, "dead": 0}
    assert_clean(shop)


# -- requeue and purge ----------------------------------------------------------------------


def test_requeue_gives_a_dead_job_a_fresh_start(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    dead_job(shop, audit, "j")
    shop.add(shop.new_job("t", "alive", delay_ms=1_000))
    audit.new()
    now = fake_clock.now_ms()
    assert shop.requeue_dead([("t", "j"), ("t", "alive"), ("t", "missing")]) == 1
    event = audit.one("requeued")
    assert (event["i"], event["due"], event["a"]) == ("j", str(now), "1")
    info = shop.get("t", "j")
    assert info is not None
    assert (info.state, info.attempts_failed, info.due_ms, info.dead_since_ms) == (
        "ready",
        0,
        now,
        None,
    )
    (lease,) = shop.lease("t", 1)
    assert lease.attempt == 1
    assert_clean(shop)


def test_purge_deletes_only_dead_jobs(shop: Store, audit: AuditCursor) -> None:
    dead_job(shop, audit, "j")
    shop.add(shop.new_job("t", "alive", delay_ms=1_000))
    audit.new()
    assert shop.purge_dead([("t", "j"), ("t", "alive")]) == 1
    event = audit.one("purged")
    assert (event["i"], event["a"]) == ("j", "3")
    assert shop.get("t", "j") is None
    assert shop.get("t", "alive") is not None
    assert shop.dead() == []
    assert_clean(shop)


def test_requeue_and_purge_of_nothing_do_nothing(store: Store, audit: AuditCursor) -> None:
    assert store.requeue_dead([]) == 0
    assert store.purge_dead([]) == 0
    assert audit.new() == []


# -- get, stats, snapshot -------------------------------------------------------------------


def test_get_reads_every_field_of_a_leased_job(
    store: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    now = fake_clock.now_ms()
    store.add(
        store.new_job(
            "t", "j", [1, "two"], retry_ms=[5, 6], lease_ms=900, callback="https://x.test/cb"
        )
    )
    (lease,) = store.lease("t", 1)
    assert audit.events() == ["added", "leased"]
    info = store.get("t", "j")
    assert info is not None
    assert info.state == "leased"
    assert info.body_bytes == b'[1,"two"]' and info.body == [1, "two"]
    assert (info.token, info.lease_deadline_ms) == (lease.token, now + 900)
    assert (info.callback, info.retry_ms, info.created_ms) == ("https://x.test/cb", (5, 6), now)
    assert (info.attempt, info.attempts_failed, info.dead_since_ms) == (1, 0, None)
    assert store.get("t", "other") is None
    assert audit.new() == []  # reads write no event


def test_stats_counters_match_where_the_jobs_really_are(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    dead_job(shop, audit, "dead")
    shop.add_many([shop.new_job("t", f"r{n}") for n in range(4)])
    shop.add_many([shop.new_job("t", f"d{n}", delay_ms=10_000) for n in range(3)])
    shop.add(shop.new_job("u", "other"))
    a, b = shop.lease("t", 2)
    shop.ack("t", a.id, a.token)
    shop.release_many([("t", b.id, b.token)])
    shop.cancel("t", "d0")
    shop.lease("t", 1)
    assert shop.stats() == {
        "t": {"delayed": 2, "ready": 2, "leased": 1, "dead": 1},
        "u": {"delayed": 0, "ready": 1, "leased": 0, "dead": 0},
    }
    assert_clean(shop)


def test_snapshot_agrees_with_get_for_every_job(
    shop: Store, audit: AuditCursor, fake_clock: FakeClock
) -> None:
    dead_job(shop, audit, "dead")
    shop.add(shop.new_job("t", "delayed", delay_ms=5_000))
    shop.add(shop.new_job("t", "ready"))
    shop.add(shop.new_job("t", "leased"))
    shop.lease("t", 1)
    snapshot = shop.snapshot()
    assert {key: info.state for key, info in snapshot.jobs.items()} == {
        ("t", "dead"): "dead",
        ("t", "delayed"): "delayed",
        ("t", "ready"): "leased",  # oldest first: "ready" was added before "leased"
        ("t", "leased"): "ready",
    }
    for (topic, job_id), info in snapshot.jobs.items():
        assert shop.get(topic, job_id) == info


def test_a_store_refuses_a_decoding_client(redis_server: object, fake_clock: FakeClock) -> None:
    from actors.errors import ConfigError
    from actors.server.embedded import RedisProcess

    assert isinstance(redis_server, RedisProcess)
    client: redis.Redis = redis_server.client(decode_responses=True)
    try:
        with pytest.raises(ConfigError):
            Store(client, "test", fake_clock)
    finally:
        client.close()


def test_erase_deletes_every_key_of_the_namespace_and_no_other(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    mine = Store(redis_client, "mine", fake_clock, shards=3)
    other = Store(redis_client, "other", fake_clock)
    for n in range(20):
        mine.add(mine.new_job("t", f"j{n}", {"n": n}, delay_ms=n * 1_000))
    other.add(other.new_job("t", "kept", delay_ms=60_000))
    before = set(redis_client.keys("*"))
    deleted = mine.erase()
    after = set(redis_client.keys("*"))
    assert deleted == len(before - after) > 0
    assert all(b"{mine." in key for key in before - after)
    assert not any(b"{mine." in key for key in after)
    assert other.get("t", "kept") is not None
    assert mine.stats() == {} and mine.audit_length() == 0


def test_open_store_without_recording_reads_the_namespace_and_writes_nothing(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    opened = open_store(redis_client, "fresh", fake_clock, record=False)
    assert opened.shard_count == 1
    assert redis_client.keys("*") == []  # inspecting created no configuration
    open_store(redis_client, "fresh", fake_clock, shards=3)  # a worker records 3 shards
    assert open_store(redis_client, "fresh", fake_clock, record=False).shard_count == 3
