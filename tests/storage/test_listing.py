"""Store.jobs on real Redis: pages of one topic's jobs in one state, across 3 shards."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from actors import _constants as c
from actors.clock import FakeClock
from actors.errors import ValidationError
from actors.lifecycle import State
from actors.queue import DelayQueue
from actors.server.embedded import RedisProcess
from actors.storage import calls, listing, reads
from actors.storage.calls import CallTime, ShardPage, decoded
from actors.storage.keys import member, split_member
from actors.storage.script_batch import ScriptBatch
from actors.storage.store import Store
from actors.values import JobInfo, JobPage

SHARDS = 3


@pytest.fixture
def sharded(redis_client: redis.Redis, fake_clock: FakeClock) -> Store:
    return Store(redis_client, "shop", fake_clock, shards=SHARDS)


def every_page(store: Store, topic: str, state: str, limit: int) -> list[JobPage]:
    pages = [store.jobs(topic, state, limit=limit)]
    while pages[-1].next_after is not None:
        assert len(pages) < 1_000, "the cursor does not move on"
        pages.append(store.jobs(topic, state, after=pages[-1].next_after, limit=limit))
    return pages


def listed(pages: list[JobPage]) -> list[JobInfo]:
    return [info for page in pages for info in page.jobs]


def add_delayed(store: Store, topic: str, count: int, fake_clock: FakeClock) -> None:
    """``count`` jobs due at 7 distinct times (so equal due times are common), ids not in due
    order, with a job of another topic between each."""
    jobs = []
    for n in range(count):
        delay_ms = 1_000 * (1 + (n * 5) % 7)
        jobs.append(store.new_job(topic, f"job-{n:03}", {"n": n}, delay_ms=delay_ms))
        jobs.append(store.new_job("other", f"job-{n:03}", None, delay_ms=delay_ms))
    store.add_many(jobs)


@pytest.mark.parametrize("limit", [1, 7, 100])
def test_delayed_pages_visit_every_job_once_in_due_order(
    sharded: Store, fake_clock: FakeClock, limit: int
) -> None:
    add_delayed(sharded, "mail", 40, fake_clock)
    jobs = listed(every_page(sharded, "mail", "delayed", limit))
    assert sorted(info.id for info in jobs) == [f"job-{n:03}" for n in range(40)]
    assert [(info.due_ms, info.id) for info in jobs] == sorted((i.due_ms, i.id) for i in jobs)
    assert {info.state for info in jobs} == {State.DELAYED}
    assert {info.topic for info in jobs} == {"mail"}
    assert jobs[0].body == {"n": int(jobs[0].id[4:])}


def test_the_jobs_are_spread_over_every_shard(sharded: Store, fake_clock: FakeClock) -> None:
    add_delayed(sharded, "mail", 40, fake_clock)
    per_shard = [
        len(reads.delayed_entries(sharded.client, keys)) for keys in sharded.shard_keys
    ]  # 80 jobs, both topics
    assert sum(per_shard) == 80 and all(per_shard), per_shard


def test_ready_pages_keep_each_shards_list_order(sharded: Store, fake_clock: FakeClock) -> None:
    add_delayed(sharded, "mail", 30, fake_clock)
    fake_clock.advance(10_000)
    sharded.carry()
    jobs = listed(every_page(sharded, "mail", "ready", 4))
    assert sorted(info.id for info in jobs) == [f"job-{n:03}" for n in range(30)]
    assert {info.state for info in jobs} == {State.READY}
    for keys in sharded.shard_keys:
        in_list = [
            split_member(decoded(m))[1] for m in sharded.client.lrange(keys.ready("mail"), 0, -1)
        ]
        assert [info.id for info in jobs if info.id in set(in_list)] == in_list
    assert [info.due_ms for info in jobs] == sorted(info.due_ms for info in jobs)


def test_a_ready_page_resumes_after_its_last_job_when_earlier_ones_were_leased(
    sharded: Store, fake_clock: FakeClock
) -> None:
    add_delayed(sharded, "mail", 30, fake_clock)
    fake_clock.advance(10_000)
    sharded.carry()
    first = sharded.jobs("mail", "ready", limit=10)
    leased = {lease.id for lease in sharded.lease("mail", 6)}
    rest = listed(every_page_after(sharded, first))
    seen = [info.id for info in first.jobs] + [info.id for info in rest]
    assert len(seen) == len(set(seen)), "no job is listed twice"
    assert set(seen) | leased == {f"job-{n:03}" for n in range(30)}


def every_page_after(store: Store, page: JobPage) -> list[JobPage]:
    pages: list[JobPage] = []
    after = page.next_after
    while after is not None:
        pages.append(store.jobs("mail", "ready", after=after, limit=10))
        after = pages[-1].next_after
    return pages


def test_leased_pages_are_in_deadline_order_with_their_tokens(
    sharded: Store, fake_clock: FakeClock
) -> None:
    add_delayed(sharded, "mail", 20, fake_clock)
    fake_clock.advance(10_000)
    sharded.carry()
    leases = {}
    for step in range(4):  # four deadlines, 5 jobs each
        for lease in sharded.lease("mail", 5):
            leases[lease.id] = lease
        fake_clock.advance(1_000 + step)
    jobs = listed(every_page(sharded, "mail", "leased", 3))
    assert sorted(info.id for info in jobs) == sorted(leases)
    assert [(i.lease_deadline_ms, i.id) for i in jobs] == sorted(
        (i.lease_deadline_ms or 0, i.id) for i in jobs
    )
    for info in jobs:
        assert info.state == State.LEASED
        assert info.token == leases[info.id].token
        assert info.lease_deadline_ms == leases[info.id].deadline_ms


def test_dead_pages_are_in_order_of_death(sharded: Store, fake_clock: FakeClock) -> None:
    died: dict[str, int] = {}
    for n in range(12):  # one job at a time: each retried once, then dead
        sharded.add(sharded.new_job("mail", f"d{n}", None, retry_ms=[0]))
        outcome = ""
        while outcome != "dead":
            (lease,) = sharded.lease("mail", 1)
            outcome = str(sharded.fail("mail", lease.id, lease.token, "boom"))
        died[lease.id] = fake_clock.now_ms()
        fake_clock.advance(1_000 if n % 3 else 0)  # some die in the same millisecond
    pages = every_page(sharded, "mail", "dead", 5)
    infos = listed(pages)
    assert [(i.dead_since_ms, i.id) for i in infos] == sorted((ms, i) for i, ms in died.items())
    assert {i.id: i.dead_since_ms for i in infos} == died
    assert all(i.state == State.DEAD for i in infos)


def test_an_empty_state_is_one_last_page(sharded: Store) -> None:
    assert sharded.jobs("mail", "delayed") == JobPage((), None)
    assert sharded.jobs("mail", "ready") == JobPage((), None)


def test_a_page_that_holds_the_last_job_has_no_cursor(
    sharded: Store, fake_clock: FakeClock
) -> None:
    add_delayed(sharded, "mail", 5, fake_clock)
    page = sharded.jobs("mail", "delayed", limit=5)
    assert len(page.jobs) == 5 and page.next_after is None
    first = sharded.jobs("mail", "delayed", limit=4)
    assert first.next_after is not None
    last = sharded.jobs("mail", "delayed", after=first.next_after, limit=4)
    assert len(last.jobs) == 1 and last.next_after is None


# -- one round trip per shard ---------------------------------------------------------------


class CountingConnection(redis.UnixDomainSocketConnection):
    """A real connection that counts what it sends: one send is one round trip."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("state", ["delayed", "ready"])
def test_a_page_is_one_script_call_per_shard_in_one_round_trip(
    redis_server: RedisProcess, redis_client: redis.Redis, fake_clock: FakeClock, state: str
) -> None:
    pool = redis.ConnectionPool(connection_class=CountingConnection, path=redis_server.socket_path)
    store = Store(redis.Redis(connection_pool=pool), "shop", fake_clock, shards=SHARDS)
    add_delayed(store, "mail", 30, fake_clock)
    if state == "ready":
        fake_clock.advance(10_000)
        store.carry()
    first = store.jobs("mail", state, limit=4)  # loads the script
    redis_client.config_resetstat()
    CountingConnection.sends = 0
    page = store.jobs("mail", state, after=first.next_after, limit=4)
    assert CountingConnection.sends == 1
    stats = redis_client.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == SHARDS
    assert "cmdstat_eval" not in stats
    assert len(page.jobs) == 4


# -- a shard that stops early -----------------------------------------------------------------


def test_a_shard_that_ran_out_of_scan_ends_the_page_where_it_stopped(
    sharded: Store, fake_clock: FakeClock
) -> None:
    """Scripts run with a scan of 3 entries: each shard's page stops early, and the merged page
    never passes the earliest position an unfinished shard reached."""
    add_delayed(sharded, "mail", 30, fake_clock)
    batch = ScriptBatch(sharded.client)
    at = CallTime(fake_clock.now_ms(), "NONE", "0")
    seen: list[str] = []
    position = None
    for _ in range(200):
        replies = batch.run(
            [
                calls.list_page(k, at, "mail", State.DELAYED, 4, 3, position)
                for k in sharded.shard_keys
            ]
        )
        pages = [calls.listed("mail", State.DELAYED, reply) for reply in replies]
        assert all(len(p.jobs) <= 3 for p in pages)
        page = listing.zset_page("mail", State.DELAYED, pages, 4)
        seen += [info.id for info in page.jobs]
        if page.next_after is None:
            break
        position = listing.zset_after(page.next_after, "mail", State.DELAYED)
    assert sorted(seen) == [f"job-{n:03}" for n in range(30)]
    assert len(seen) == len(set(seen))


def test_the_merge_stops_at_the_earliest_unfinished_shard() -> None:
    def info(job_id: str, due_ms: int) -> JobInfo:
        return JobInfo("t", job_id, State.DELAYED, due_ms, 1, 0, b"null", 0)

    done = ShardPage([((5, member("t", "a")), info("a", 5))], True, (5, member("t", "a")))
    stopped = ShardPage([((2, member("t", "b")), info("b", 2))], False, (3, member("x", "z")))
    page = listing.zset_page("t", State.DELAYED, [done, stopped], 10)
    assert [i.id for i in page.jobs] == ["b"]  # a (due 5) may follow jobs the other shard holds
    assert listing.zset_after(page.next_after, "t", State.DELAYED) == (3, member("x", "z"))


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"state": "sleeping"}, "state"),
        ({"state": "acked"}, "state"),
        ({"limit": 0}, "limit"),
        ({"limit": c.LIST_LIMIT_MAX + 1}, "limit"),
        ({"after": "not a cursor!"}, "after"),
        ({"after": "e30"}, "after"),  # "{}"
        ({"topic": "a|b"}, "topic"),
    ],
)
def test_bad_input_names_the_field(sharded: Store, kwargs: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"topic": "mail", "state": "delayed"} | kwargs
    with pytest.raises(ValidationError) as caught:
        sharded.jobs(arguments.pop("topic"), arguments.pop("state"), **arguments)
    assert caught.value.field == field


def test_a_cursor_of_another_listing_is_refused(sharded: Store, fake_clock: FakeClock) -> None:
    add_delayed(sharded, "mail", 10, fake_clock)
    after = sharded.jobs("mail", "delayed", limit=2).next_after
    assert sharded.jobs("mail", "delayed", limit=2, after=after).jobs
    for topic, state in [("mail", "dead"), ("other", "delayed"), ("mail", "ready")]:
        with pytest.raises(ValidationError, match="cursor for the delayed jobs of topic 'mail'"):
            sharded.jobs(topic, state, after=after)


def test_the_queue_pages_through_its_store(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    queue = DelayQueue(redis_client, "facade", clock=fake_clock, producer_only=True, shards=SHARDS)
    for n in range(5):
        queue.add("mail", f"m{n}", {"n": n}, delay=10 - n)
    first = queue.jobs("mail", "delayed", limit=3)
    assert [info.id for info in first.jobs] == ["m4", "m3", "m2"]
    rest = queue.jobs("mail", "delayed", after=first.next_after, limit=3)
    assert ([info.id for info in rest.jobs], rest.next_after) == (["m1", "m0"], None)
    with pytest.raises(ValidationError, match=r"^limit"):
        queue.jobs("mail", "delayed", limit=1_001)


def test_listing_writes_nothing(
    sharded: Store, redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    assert [sharded.jobs("mail", state).jobs for state in listing.LISTED_STATES] == [()] * 4
    assert redis_client.keys("*") == []  # not even a topic or a counter
    add_delayed(sharded, "mail", 10, fake_clock)
    before = {key: redis_client.dump(key) for key in redis_client.keys("*")}
    for state in listing.LISTED_STATES:
        sharded.jobs("mail", state, limit=3)
    assert {key: redis_client.dump(key) for key in redis_client.keys("*")} == before
