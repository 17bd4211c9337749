"""The per-job audit index: one job's history without reading the whole stream.

Each test compares what the index returns with a full scan of the stream (the reference:
``actors.replay.history``), for jobs that are delayed, dead, acked, cancelled and added again,
and checks that the index follows the stream's trimming instead of growing without bound. On
every Redis the suite has. The index keeps two generations (lua/_lib.lua): the scripts that end
jobs drop the previous one whole once the stream has trimmed every entry in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
from _binaries import redis_binaries
from _wait import wait_until

from actors.clock import FakeClock
from actors.replay import history as scanned_history
from actors.server.embedded import RedisProcess
from actors.storage import codec
from actors.storage.calls import decoded
from actors.storage.store import Store
from actors.values import AuditRetention, TopicConfig

SCHEDULE = TopicConfig(retry_ms=(1_000,), lease_ms=2_000)


@pytest.fixture(params=redis_binaries())
def redis_client(
    request: pytest.FixtureRequest, redis_factory: Callable[..., RedisProcess]
) -> Iterator[redis.Redis]:
    client = redis_factory(binary=request.param).client()
    yield client
    client.close()


@pytest.fixture
def store(redis_client: redis.Redis, fake_clock: FakeClock) -> Store:
    return Store(redis_client, "test", fake_clock)


def scanned(store: Store, topic: str, job_id: str) -> list[tuple[str, dict[str, str]]]:
    return scanned_history(store.iter_audit(), topic, job_id)


def indexed_ids(store: Store, topic: str, job_id: str) -> list[str]:
    """The job's ids in both generations of the index, the previous one's first."""
    found: list[str] = []
    for key in (store.keys.history_previous, store.keys.history):
        raw = store.client.hget(key, f"{topic}|{job_id}")
        found += [] if raw is None else decoded(raw).split()
    return found


def kept_id(store: Store, topic: str, job_id: str) -> str | None:
    """The id of its `added` entry a stored job's record keeps (field h, lua/_lib.lua): the
    add script writes it there, not to the index, until the record goes."""
    blob = store.client.hget(store.keys.jobs, f"{topic}|{job_id}")
    assert blob is None or isinstance(blob, bytes)
    kept = None if blob is None else codec.unpack(blob).get("h")
    return None if kept is None else str(kept)


def in_stream_order(ids: list[str]) -> list[str]:
    return sorted(ids, key=lambda entry_id: tuple(map(int, entry_id.split("-"))))


def indexed_jobs(client: redis.Redis, store: Store) -> int:
    """Fields of both generations, less each one's start field."""
    keys = (store.keys.history_previous, store.keys.history)
    return sum(int(client.hlen(k)) - int(client.hexists(k, "")) for k in keys)


def trim_before(store: Store, topic: str, job_id: str) -> None:
    """Trims the stream exactly up to the job's first entry, then lets the server's clock tick,
    so the next ending call sees the stream's oldest entry past everything written before."""
    store.client.xtrim(
        store.keys.audit, minid=store.job_entries(topic, job_id)[0][0], approximate=False
    )
    next_server_ms(store.client)


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def next_server_ms(client: redis.Redis) -> None:
    """Waits for the server's clock to pass its current millisecond: entry ids are server ms,
    and the index drops only entries strictly older than the stream's oldest."""
    start = server_ms(client)
    wait_until(lambda: server_ms(client) > start, what="the server clock to tick")


def run_to_ack(store: Store, topic: str, job_id: str) -> None:
    store.add(store.new_job(topic, job_id, {"n": 1}))
    (lease,) = [x for x in store.lease(topic, 10) if x.id == job_id]
    assert store.ack(topic, job_id, lease.token) == 0


def test_history_of_a_delayed_job_comes_from_its_record(
    store: Store, fake_clock: FakeClock
) -> None:
    store.add(store.new_job("t", "later", {"n": 1}, delay_ms=60_000))
    store.add(store.new_job("t", "other", {"n": 2}, delay_ms=60_000))
    entries = store.job_entries("t", "later")
    assert [f["e"] for _, f in entries] == ["added"]
    assert entries == scanned(store, "t", "later")
    # A pending job holds no field in the index: its record keeps the id (lua/_lib.lua).
    assert kept_id(store, "t", "later") == entries[0][0]
    assert indexed_ids(store, "t", "later") == []


def test_history_of_acked_dead_and_cancelled_jobs_matches_a_full_scan(
    store: Store, fake_clock: FakeClock
) -> None:
    store.configure_topic("t", SCHEDULE)
    run_to_ack(store, "t", "acked")
    store.add(store.new_job("t", "dies", {"n": 1}))
    (lease,) = store.lease("t", 1)
    store.fail("t", "dies", lease.token, "boom")
    fake_clock.advance(1_000)
    store.carry()
    (lease,) = store.lease("t", 1)
    assert store.fail("t", "dies", lease.token, "boom again") == "dead"
    store.add(store.new_job("t", "gone", {"n": 1}, delay_ms=5_000))
    store.cancel("t", "gone")
    store.pause("t", True)  # a topic's own event is in no job's history
    for job_id, events in [
        ("acked", ["added", "leased", "acked"]),
        ("dies", ["added", "leased", "failed", "ready", "leased", "dead"]),
        ("gone", ["added", "cancelled"]),
    ]:
        entries = store.job_entries("t", job_id)
        assert [f["e"] for _, f in entries] == events, job_id
        assert entries == scanned(store, "t", job_id), job_id
    assert store.job_entries("t", "never") == []


def test_a_job_added_again_after_its_end_shows_both_lives(store: Store) -> None:
    run_to_ack(store, "t", "again")
    run_to_ack(store, "t", "again")
    entries = store.job_entries("t", "again")
    assert [f["e"] for _, f in entries] == ["added", "leased", "acked"] * 2
    assert entries == scanned(store, "t", "again")


def test_entries_one_call_writes_for_one_job_are_indexed_oldest_first(store: Store) -> None:
    # A script writes its index entries together at its end (lua/_lib.lua): a job acked twice in
    # one call (acked, then rejected) must keep both ids in the stream's order.
    store.add(store.new_job("t", "twice", {"n": 1}))
    (lease,) = store.lease("t", 1)
    assert store.ack_many([("t", "twice", lease.token), ("t", "twice", lease.token)]) == [0, -4]
    entries = store.job_entries("t", "twice")
    assert [f["e"] for _, f in entries] == ["added", "leased", "acked", "rejected"]
    assert entries == scanned(store, "t", "twice")
    # The `added` id the record kept joined the index with the ack, after the `leased` one: the
    # index holds each id once, and history-4.lua puts them in the stream's order.
    assert kept_id(store, "t", "twice") is None
    assert in_stream_order(indexed_ids(store, "t", "twice")) == [e for e, _ in entries]


def test_the_index_of_an_ended_job_goes_once_the_stream_trimmed_its_entries(
    store: Store,
) -> None:
    run_to_ack(store, "t", "old")  # the index's first ending call: everything so far is previous
    store.add(store.new_job("t", "waiting", {"n": 1}, delay_ms=60_000))
    next_server_ms(store.client)
    run_to_ack(store, "t", "new")
    trim_before(store, "t", "new")
    assert scanned(store, "t", "old") == [] and indexed_ids(store, "t", "old") != []
    run_to_ack(store, "t", "trigger")  # a script that ends a job drops the trimmed generation
    assert indexed_ids(store, "t", "old") == []
    # A live job whose entries were all trimmed reads as having none; its record keeps its
    # `added` id (a few bytes of its own record) and it holds no field in any generation.
    assert store.job_entries("t", "waiting") == [] and kept_id(store, "t", "waiting") is not None
    next_server_ms(store.client)
    run_to_ack(store, "t", "later")
    trim_before(store, "t", "later")  # past the end of the generation "waiting" is in
    run_to_ack(store, "t", "second-trigger")
    assert indexed_ids(store, "t", "waiting") == [] and indexed_ids(store, "t", "new") == []
    store.cancel("t", "waiting")
    assert [f["e"] for _, f in store.job_entries("t", "waiting")] == ["cancelled"]
    assert [f["e"] for _, f in store.job_entries("t", "later")] == ["added", "leased", "acked"]


def test_one_ending_call_forgets_every_trimmed_history_at_once(store: Store) -> None:
    # 2,000 leased jobs whose entries the stream trimmed: one ack drops all their fields (a
    # field-by-field sweep would take hundreds of ending calls), and keeps the acked job's.
    # (Leased: a job only added holds no field; its record keeps that id, lua/_lib.lua.)
    store.add_many([store.new_job("t", f"p{n}", {"n": n}) for n in range(2_000)])
    assert len(store.lease("t", 2_000)) == 2_000
    run_to_ack(store, "t", "first")  # the first ending call starts a generation
    next_server_ms(store.client)
    run_to_ack(store, "t", "kept")
    trim_before(store, "t", "kept")
    assert indexed_jobs(store.client, store) == 2_002
    run_to_ack(store, "t", "trigger")
    assert indexed_ids(store, "t", "p0") == [] and indexed_ids(store, "t", "p1999") == []
    assert indexed_jobs(store.client, store) == 2
    assert [f["e"] for _, f in store.job_entries("t", "kept")] == ["added", "leased", "acked"]
    assert store.job_entries("t", "kept") == scanned(store, "t", "kept")


def test_a_history_that_spans_two_generations_reads_oldest_first(store: Store) -> None:
    store.add(store.new_job("t", "long", {"n": 1}))
    (lease,) = store.lease("t", 1)
    run_to_ack(store, "t", "first")  # starts a generation: `leased` of "long" is in the previous
    # The ack moves the `added` id its record kept to the current generation, with `acked`:
    # the oldest id is then in the newer generation, and the reader must sort.
    assert store.ack("t", "long", lease.token) == 0
    entries = store.job_entries("t", "long")
    assert [f["e"] for _, f in entries] == ["added", "leased", "acked"]
    assert entries == scanned(store, "t", "long")
    previous = store.client.hget(store.keys.history_previous, "t|long")
    assert previous is not None and decoded(previous).split() == [entries[1][0]]
    current = store.client.hget(store.keys.history, "t|long")
    assert current is not None and decoded(current).split() == [entries[0][0], entries[2][0]]


def test_the_start_of_a_generation_reads_as_the_old_sweep_between_passes(store: Store) -> None:
    # A worker from before the generations, running beside this one, parses "" as its sweep's
    # "<cursor> <ms>": cursor 0 is between passes, and its sweep only ever raises the ms.
    run_to_ack(store, "t", "first")
    start = decoded(store.client.hget(store.keys.history, "") or b"")
    acked_ms = int(store.job_entries("t", "first")[-1][0].split("-")[0])
    assert start == f"0 {acked_ms}"


def test_a_lost_start_never_drops_the_previous_generation_early(store: Store) -> None:
    store.add(store.new_job("t", "kept", {"n": 1}))
    assert len(store.lease("t", 1)) == 1  # a field in the index (`added` is in its record)
    run_to_ack(store, "t", "first")  # "kept" is in the previous generation, still in the stream
    store.client.hdel(store.keys.history, "")
    run_to_ack(store, "t", "second")
    assert store.client.hget(store.keys.history_previous, "t|kept") is not None
    assert [f["e"] for _, f in store.job_entries("t", "kept")] == ["added", "leased"]
    assert store.client.hexists(store.keys.history, "")


def test_an_index_swept_field_by_field_becomes_the_previous_generation(store: Store) -> None:
    # An index a redelay before the generations wrote: "" held the sweep's "<cursor> <ms>".
    store.add(store.new_job("t", "before", {"n": 1}))
    assert len(store.lease("t", 1)) == 1  # a field in the index (`added` is in its record)
    store.client.hset(store.keys.history, "", "0 1")
    next_server_ms(store.client)
    run_to_ack(store, "t", "after")
    assert store.client.hget(store.keys.history_previous, "t|before") is not None
    assert [f["e"] for _, f in store.job_entries("t", "before")] == ["added", "leased"]
    next_server_ms(store.client)
    run_to_ack(store, "t", "later")
    trim_before(store, "t", "later")
    run_to_ack(store, "t", "trigger")
    assert indexed_ids(store, "t", "before") == [] and indexed_ids(store, "t", "after") == []
    assert [f["e"] for _, f in store.job_entries("t", "later")] == ["added", "leased", "acked"]


def test_a_job_added_again_keeps_its_index_while_its_new_life_is_in_the_stream(
    store: Store,
) -> None:
    run_to_ack(store, "t", "phoenix")
    next_server_ms(store.client)
    store.add(store.new_job("t", "phoenix", {"n": 2}, delay_ms=60_000))
    new_life = store.job_entries("t", "phoenix")[-1][0]
    store.client.xtrim(store.keys.audit, minid=new_life, approximate=False)
    next_server_ms(store.client)
    run_to_ack(store, "t", "trigger")
    # The old life's ids went with their generation; the new life's stays, in its record.
    assert indexed_ids(store, "t", "phoenix") == [] and kept_id(store, "t", "phoenix") == new_life
    assert [f["e"] for _, f in store.job_entries("t", "phoenix")] == ["added"]


def test_the_index_stays_bounded_by_retention_not_by_jobs_run(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store = Store(redis_client, "bounded", fake_clock, retention=AuditRetention("MAXLEN", 50))
    for batch in range(15):
        for j in range(20):
            run_to_ack(store, "t", f"b{batch}-{j}")
        next_server_ms(redis_client)
    jobs_run = 15 * 20
    indexed = indexed_jobs(redis_client, store)
    # The stream keeps its newest ~50 to ~150 entries (whole nodes of 100), 3 per job: at most
    # 50 jobs. The index keeps two generations, the previous one until the stream has trimmed
    # past its end: each at most the jobs of a full stream and of the batch the call ends in.
    most_in_stream = (50 + 100) // 3
    assert indexed <= 2 * (most_in_stream + 20) < jobs_run, indexed
    assert redis_client.exists(store.keys.history_previous)
