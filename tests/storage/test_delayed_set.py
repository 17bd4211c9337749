"""The delayed set kept as small buckets under an index (lua/_delayed.lua), against a real Redis.

Each test checks what users see (due order, listing, cancel, inspect, carry) and the layout
itself: every bucket a listpack of at most DUE_BUCKET_MAX jobs, the snapshot free of problems
(reads.py checks the buckets' invariants and each record's due time against its place).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from _delayed_layout import (
    assert_compact,
    buckets,
    delayed_order,
    expected_order,
    listed_delayed,
    mixed_ids,
)

from actors import _constants as c
from actors.clock import FakeClock
from actors.lifecycle import State
from actors.storage.scripts import lua_dir
from actors.storage.store import Store
from simulations.bench.probes.script_instructions import use_scripts

HOUR_MS = 3_600_000


def add_due(store: Store, dues: dict[str, int], batch: int = 200) -> None:
    jobs = [store.new_job("t", job_id, due_ms=due) for job_id, due in dues.items()]
    for start in range(0, len(jobs), batch):
        store.add_many(jobs[start : start + batch])


def carried_and_leased(store: Store, limit: int) -> list[str]:
    """Carries every due job, ``limit`` a call, leasing each call's jobs: the order they came."""
    moved: list[str] = []
    while (count := store.carry(limit=limit)[0]) > 0:
        moved.extend(f"t|{lease.id}" for lease in store.lease("t", count))
    return moved


def test_jobs_added_in_random_order_stay_in_due_order_in_small_listpack_buckets(
    store: Store, fake_clock: FakeClock
) -> None:
    rng = random.Random(7)
    now = fake_clock.now_ms()
    dues = {f"j{n:05d}": now + rng.randrange(1, 30 * 24 * HOUR_MS) for n in range(3_000)}
    add_due(store, dues)
    assert delayed_order(store) == expected_order(dues)
    # Calls of a few jobs each into many buckets (one lookup per job), and of one job.
    more = {f"k{n:05d}": now + rng.randrange(1, 30 * 24 * HOUR_MS) for n in range(300)}
    add_due(store, more, batch=7)
    store.add(store.new_job("t", "single", due_ms=now + 5))
    dues |= more | {"single": now + 5}
    assert delayed_order(store) == expected_order(dues)
    assert len(buckets(store)) >= 3_000 // c.DUE_BUCKET_MAX
    assert_compact(store)
    assert store.earliest_due_ms() == min(dues.values())


def test_jobs_added_in_due_order_fill_their_buckets_without_rewriting_them(
    store: Store, fake_clock: FakeClock
) -> None:
    now = fake_clock.now_ms()
    dues = {f"j{n:05d}": now + 1_000 + n for n in range(1_000)}
    add_due(store, dues, batch=10)
    sizes = [len(entries) for _, _, entries in buckets(store)]
    # Appends start a new bucket only when the last one is full: every bucket but the last is.
    assert sizes[:-1] == [c.DUE_BUCKET_MAX] * (len(sizes) - 1), sizes
    assert delayed_order(store) == expected_order(dues)
    assert_compact(store)


def test_a_burst_due_at_one_moment_is_cut_into_small_buckets_and_moves_in_member_order(
    store: Store, fake_clock: FakeClock
) -> None:
    rng = random.Random(11)
    now = fake_clock.now_ms()
    due = now + 1_000
    dues = dict.fromkeys(mixed_ids(rng, 400), due)
    dues |= {"early": due - 1, "late": due + 1}
    # In calls of 50: later calls land in buckets the earlier ones cut at that same due time.
    add_due(store, dues, batch=50)
    holding = [sum(d == due for _, d in entries) for _, _, entries in buckets(store)]
    assert len([h for h in holding if h]) >= 400 // c.DUE_BUCKET_MAX
    assert_compact(store)
    assert delayed_order(store) == expected_order(dues)
    assert listed_delayed(store, page_size=23) == expected_order(dues)
    # Jobs found, and cancelled, among buckets that all start at the same due time: one that
    # starts a bucket (the bucket is renamed) and one inside a later bucket.
    tied = [b for b in buckets(store) if b[1] == due]
    first_of = tied[-1][0]
    inside = next(entries[len(entries) // 2][0] for _, _, entries in tied[1:-1] if len(entries) > 2)
    for member in (first_of, inside):
        job_id = member.split("|", 1)[1]
        assert store.get("t", job_id).state is State.DELAYED  # type: ignore[union-attr]
        assert store.cancel("t", job_id) == "removed"
        del dues[job_id]
    assert_compact(store)
    assert delayed_order(store) == expected_order(dues)
    fake_clock.advance(1_000)
    moved = carried_and_leased(store, limit=150)
    assert moved == [m for m in expected_order(dues) if m != "t|late"]
    assert delayed_order(store) == ["t|late"]
    assert_compact(store)


def zmscore_calls(store: Store) -> int:
    """How many ZMSCORE commands Redis has run: only an add that has Redis find its jobs'
    buckets by rank (lua/_delayed.lua, buckets_by_rank) calls it."""
    stats: Any = store.client.info("commandstats")
    return int(stats.get("cmdstat_zmscore", {}).get("calls", 0))


def test_jobs_falling_between_the_buckets_of_a_long_run_due_at_one_moment_find_their_buckets(
    store: Store, fake_clock: FakeClock
) -> None:
    rng = random.Random(13)
    now = fake_clock.now_ms()
    due = now + 1_000
    ids = mixed_ids(rng, 3_300)
    # A long run due at one moment, cut into many buckets; then jobs that fall between its jobs,
    # in calls far smaller than the buckets the run spans, one job at a time too, and calls that
    # also hold jobs due before and after the run.
    dues = dict.fromkeys(ids[:3_000], due)
    add_due(store, dues, batch=500)
    before = zmscore_calls(store)
    small = dict.fromkeys(ids[3_000:3_200], due)
    add_due(store, small, batch=3)
    single = dict.fromkeys(ids[3_200:3_250], due)
    add_due(store, single, batch=1)
    around = {job_id: due + rng.choice([-1, 0, 0, 1]) for job_id in ids[3_250:]}
    add_due(store, around, batch=5)
    assert zmscore_calls(store) > before  # the calls above went by rank, not by a walk
    dues |= small | single | around
    assert_compact(store)
    assert delayed_order(store) == expected_order(dues)
    assert listed_delayed(store, page_size=97) == expected_order(dues)
    fake_clock.advance(1_001)
    moved = carried_and_leased(store, limit=400)
    assert moved == expected_order(dues)


def compare_bytes_in_lua(store: Store, directory: Path) -> None:
    """Makes ``store`` run scripts that compare members with the byte loop, as on a server whose
    collation is a language's (Lua's < then is not byte order), which no test server here has."""
    copy = directory / "lua"
    shutil.copytree(lua_dir(), copy)
    source = (copy / "_delayed.lua").read_text()
    probed = "local collation_is_bytes = nil\n"
    assert source.count(probed) == 1
    (copy / "_delayed.lua").write_text(source.replace(probed, "local collation_is_bytes = false\n"))
    use_scripts(store, copy)


@pytest.mark.slow
@pytest.mark.parametrize("comparison", ["server's collation", "byte loop"])
def test_adds_cancels_and_carries_in_any_mix_keep_the_set_in_order(
    store: Store, fake_clock: FakeClock, tmp_path: Path, comparison: str
) -> None:
    if comparison == "byte loop":
        compare_bytes_in_lua(store, tmp_path)
    rng = random.Random(5)
    ids = iter(mixed_ids(rng, 6_000))
    dues: dict[str, int] = {}
    for step in range(120):
        # Few distinct due times, so runs of jobs due at one moment span buckets.
        now = fake_clock.now_ms()
        moments = [now + 1_000 * rng.randrange(1, 40) for _ in range(rng.randrange(1, 4))]
        action = rng.random()
        if action < 0.5:
            batch = {next(ids): rng.choice(moments) for _ in range(rng.choice([1, 5, 60, 200]))}
            add_due(store, batch, batch=len(batch))
            dues |= batch
        elif action < 0.8 and dues:
            for job_id in rng.sample(sorted(dues), min(len(dues), rng.randrange(1, 30))):
                assert store.cancel("t", job_id) == "removed", job_id
                del dues[job_id]
        else:
            fake_clock.advance(rng.randrange(0, 3_000))
            due_now = {j: d for j, d in dues.items() if d <= fake_clock.now_ms()}
            count = store.carry(limit=rng.choice([7, 100, 1_000]))[0]
            moved = [f"t|{lease.id}" for lease in store.lease("t", count)] if count else []
            assert moved == expected_order(due_now)[:count], step
            for member in moved:
                del dues[member.split("|", 1)[1]]
        if step % 10 == 0:
            assert delayed_order(store) == expected_order(dues), step
            assert_compact(store)
    assert delayed_order(store) == expected_order(dues)
    assert listed_delayed(store, page_size=41) == expected_order(dues)
    assert_compact(store)


@pytest.mark.parametrize("break_", ["index entry", "order", "size"])
def test_a_snapshot_reports_a_bucket_that_breaks_the_layout(
    store: Store, fake_clock: FakeClock, break_: str
) -> None:
    now = fake_clock.now_ms()
    add_due(store, {f"j{n:04d}": now + 1_000 + n for n in range(200)})
    client, keys = store.client, store.keys
    assert store.snapshot().problems == {}
    (first, first_score, _), (second, _, second_entries) = buckets(store)[:2]
    if break_ == "index entry":
        client.zadd(keys.delayed, {first: first_score + 1})
        expected = "but the index says"
    elif break_ == "order":
        client.zadd(keys.due_bucket(first), {second_entries[-1][0]: second_entries[-1][1]})
        expected = "not after the bucket before it"
    else:
        client.zadd(keys.due_bucket(first), dict(second_entries))
        client.delete(keys.due_bucket(second))
        client.zrem(keys.delayed, second)
        expected = f"more than {c.DUE_BUCKET_MAX}"
    texts = [text for found in store.snapshot().problems.values() for text in found]
    assert any(expected in text for text in texts), texts


@pytest.mark.parametrize("which", ["first", "middle", "only"])
def test_cancel_takes_a_job_out_of_its_bucket_and_keeps_the_index_right(
    store: Store, fake_clock: FakeClock, which: str
) -> None:
    now = fake_clock.now_ms()
    count = 1 if which == "only" else 300
    dues = {f"j{n:04d}": now + 10_000 + 7 * n for n in range(count)}
    add_due(store, dues)
    before = buckets(store)
    _, _, entries = before[0] if which != "middle" else before[1]
    victim = entries[0][0] if which != "middle" else entries[len(entries) // 2][0]
    assert store.get("t", victim.split("|")[1]).state is State.DELAYED  # type: ignore[union-attr]
    assert store.cancel("t", victim.split("|")[1]) == "removed"
    assert store.get("t", victim.split("|")[1]) is None
    del dues[victim.split("|")[1]]
    assert delayed_order(store) == expected_order(dues)
    if which == "only":
        assert buckets(store) == []
        assert store.earliest_due_ms() is None
    else:
        assert store.earliest_due_ms() == min(dues.values())
    assert_compact(store)


def test_listing_pages_through_many_buckets_in_due_order(
    store: Store, fake_clock: FakeClock
) -> None:
    rng = random.Random(3)
    now = fake_clock.now_ms()
    dues = {f"j{n:04d}": now + 1_000 + rng.randrange(0, 400) for n in range(700)}
    add_due(store, dues)
    store.add(store.new_job("other", "x", due_ms=now + 1_200))  # another topic's job, skipped
    assert listed_delayed(store, page_size=37) == expected_order(dues)


def carry_and_ack(store: Store, limit: int) -> list[str]:
    """Carries up to ``limit`` due jobs, leases and acks them; their ids, in the order moved."""
    count = store.carry(limit=limit)[0]
    leases = store.lease("t", count) if count else []
    store.ack_many([(lease.topic, lease.id, lease.token) for lease in leases])
    return [lease.id for lease in leases]


def carried_front(store: Store, fake_clock: FakeClock, jobs: int, carried: int) -> dict[str, int]:
    """Adds ``jobs`` jobs 10 ms apart (j0000, j0001, ...), carries and acks the first
    ``carried``; the dues of the jobs left."""
    now = fake_clock.now_ms()
    dues = {f"j{n:04d}": now + 1_000 + 10 * n for n in range(jobs)}
    add_due(store, dues)
    fake_clock.advance(1_000 + 10 * (carried - 1))
    assert carry_and_ack(store, limit=100) == [f"j{n:04d}" for n in range(carried)]
    for n in range(carried):
        del dues[f"j{n:04d}"]
    return dues


def test_carry_leaves_the_first_bucket_its_name_and_sets_its_due_time(
    store: Store, fake_clock: FakeClock
) -> None:
    dues = carried_front(store, fake_clock, jobs=128, carried=5)
    (name, score, entries), *_ = buckets(store)
    # Not renamed (which copies the bucket): named after a job no longer in the set, scored with
    # its first job's due time, which is what carry and add read as the earliest.
    assert (name, score, entries[0]) == ("t|j0000", dues["j0005"], ("t|j0005", dues["j0005"]))
    assert store.earliest_due_ms() == dues["j0005"]
    assert store.carry(limit=100) == (0, dues["j0005"])
    assert delayed_order(store) == expected_order(dues)
    assert_compact(store)


@pytest.mark.parametrize("where", ["before all", "inside its old bucket", "after all"])
def test_a_job_that_names_the_first_bucket_can_come_back(
    store: Store, fake_clock: FakeClock, where: str
) -> None:
    """The first bucket keeps the name of a job carry took; when that job is added again, it
    must not land in a second bucket under the same key, nor in that bucket still so named."""
    dues = carried_front(store, fake_clock, jobs=128, carried=5)  # two full buckets at first
    assert buckets(store)[0][0] == "t|j0000"
    due = {
        "before all": fake_clock.now_ms() + 1,
        "inside its old bucket": dues["j0030"] + 1,
        "after all": dues["j0127"] + 1,
    }[where]
    add_due(store, {"j0000": due})
    dues["j0000"] = due
    assert delayed_order(store) == expected_order(dues)
    assert store.earliest_due_ms() == min(dues.values())
    assert_compact(store)
    assert store.cancel("t", "j0000") == "removed"
    del dues["j0000"]
    fake_clock.advance(2_000)
    assert carry_and_ack(store, limit=1_000) == [m.split("|")[1] for m in expected_order(dues)]
    assert buckets(store) == []


def test_cancelling_the_first_job_under_a_kept_name_moves_the_earliest_due_time(
    store: Store, fake_clock: FakeClock
) -> None:
    dues = carried_front(store, fake_clock, jobs=100, carried=1)
    for victim in ("j0001", "j0002"):
        assert store.cancel("t", victim) == "removed"
        del dues[victim]
        assert store.earliest_due_ms() == min(dues.values())
        assert buckets(store)[0][:2] == ("t|j0000", min(dues.values()))
        assert_compact(store)
    assert delayed_order(store) == expected_order(dues)


def test_a_snapshot_reports_a_kept_first_bucket_name_whose_job_is_back_in_the_set(
    store: Store, fake_clock: FakeClock
) -> None:
    carried_front(store, fake_clock, jobs=100, carried=1)
    assert store.snapshot().problems == {}
    # What the scripts never do (rename_stale_first): the job back under the bucket's old name.
    (_, _, _), (second, _, entries) = buckets(store)
    store.client.zadd(store.keys.due_bucket(second), {"t|j0000": entries[-1][1]})
    texts = [text for found in store.snapshot().problems.values() for text in found]
    assert any("names the first bucket but is not its first job" in text for text in texts), texts


def kept_name_over_a_run(store: Store, fake_clock: FakeClock) -> tuple[int, dict[str, int], str]:
    """One bucket: j9999, due first, then j0000-j0039 due at one moment (ids that sort before
    it); j9999 carried and leased, so the bucket keeps its name (settle_first_bucket), and then
    j0100-j0139 due at that moment too, after all of the bucket: it fills up and the rest start a
    bucket named j0124, before j9999 in byte order. The moment, the dues of the delayed jobs and
    j9999's lease token."""
    now = fake_clock.now_ms()
    moment = now + 5_000
    dues = {f"j{n:04d}": moment for n in range(40)}
    add_due(store, {"j9999": now + 100} | dues)
    fake_clock.advance(100)
    assert store.carry(limit=100)[0] == 1
    (lease,) = store.lease("t", 1)
    assert lease.id == "j9999"
    assert buckets(store)[0][0] == "t|j9999"  # the kept name
    later = {f"j{n:04d}": moment for n in range(100, 140)}
    add_due(store, later)
    return moment, dues | later, lease.token


def test_a_first_bucket_under_a_kept_name_that_fills_up_at_its_due_time_stays_first(
    store: Store, fake_clock: FakeClock
) -> None:
    """The new bucket at the first one's due time must come after it in the index: ordered by
    the kept name, it came first, and lookups, the listing and carry went by that wrong order."""
    _, dues, _ = kept_name_over_a_run(store, fake_clock)
    assert [name for name, _, _ in buckets(store)] == ["t|j0000", "t|j0124"]
    assert_compact(store)
    assert delayed_order(store) == listed_delayed(store, page_size=17) == expected_order(dues)
    fake_clock.advance(5_000)
    assert carried_and_leased(store, limit=30) == expected_order(dues)


def test_the_kept_names_job_back_at_that_due_time_and_cancels_leave_each_job_once(
    store: Store, fake_clock: FakeClock
) -> None:
    """What the wrong index order led to: the kept name's job, retried to the same due time, went
    into the bucket under its name (65 jobs), cancels looked in the wrong bucket and left jobs
    behind without their records, and a carry failed on one."""
    moment, dues, token = kept_name_over_a_run(store, fake_clock)
    assert store.fail("t", "j9999", token, "retried", moment - fake_clock.now_ms()) == "delayed"
    dues["j9999"] = moment
    for job_id in ("j0000", "j0001", "j0120"):
        assert store.cancel("t", job_id) == "removed"
        del dues[job_id]
    assert_compact(store)
    fake_clock.advance(5_000)
    assert carried_and_leased(store, limit=1_000) == expected_order(dues)
    assert buckets(store) == []
