"""Recurring schedules on a real Redis: the schedule, unschedule, refill and carry scripts.

A FakeClock drives time. Each test checks where the occurrences are (one pending per schedule,
never two for one slot) and what the scripts wrote to the audit stream.
"""

from __future__ import annotations

import msgpack
import pytest
import redis
from _audit import AuditCursor, structure_problems

from actors import schedules
from actors.clock import FakeClock
from actors.errors import ValidationError
from actors.schedules import ScheduleSpec
from actors.storage import calls
from actors.storage import schedules as schedule_calls
from actors.storage.keys import schedule_shard, shard_of
from actors.storage.store import Store

START_MS = 1_700_000_000_000


def every(seconds: float, *, misfire: str = "run_once", body: object = None) -> ScheduleSpec:
    return schedules.spec(
        "tick",
        "t",
        cron=None,
        every=seconds,
        tz="UTC",
        body=body,
        start_at_ms=None,
        misfire_policy=misfire,
    )


def clock_of(store: Store) -> FakeClock:
    assert isinstance(store.clock, FakeClock)
    return store.clock


def occurrences(store: Store, state: str | None = None) -> dict[str, str]:
    """Every job of the schedule "tick": id -> state."""
    return {
        job_id: info.state
        for (_, job_id), info in store.snapshot().jobs.items()
        if schedules.schedule_of(job_id) == "tick" and (state is None or info.state == state)
    }


def carry_to(store: Store, at_ms: int) -> int:
    clock = clock_of(store)
    clock.advance(at_ms - clock.now_ms())
    return store.carry()[0]


def test_scheduling_makes_one_pending_occurrence(store: Store) -> None:
    audit = AuditCursor(store)
    assert store.schedule(every(10, body={"n": 1})) == (
        "created",
        schedules.occurrence_id("tick", START_MS + 10_000),
    )
    assert occurrences(store) == {f"@schedule:tick:{START_MS + 10_000}": "delayed"}
    added = audit.one("added")
    assert added["schedule"] == "tick" and added["due"] == str(START_MS + 10_000)
    (info,) = store.schedules()
    assert info.spec == every(10, body={"n": 1})
    assert info.next_ms == START_MS + 10_000
    assert len(info.upcoming_ms) == schedules.OCCURRENCES_AHEAD - 1
    assert store.get("t", info.pending_id or "") is not None
    assert structure_problems(store) == []


def test_scheduling_the_same_thing_again_changes_nothing(store: Store) -> None:
    store.schedule(every(10))
    audit = AuditCursor(store)
    audit.new()
    clock_of(store).advance(3_000)  # a later start would move an `every` grid: it must not
    assert store.schedule(every(10))[0] == "unchanged"
    assert audit.new() == []
    assert list(occurrences(store)) == [f"@schedule:tick:{START_MS + 10_000}"]


def test_carrying_an_occurrence_makes_the_next_in_the_same_call(store: Store) -> None:
    store.schedule(every(10))
    audit = AuditCursor(store)
    audit.new()
    assert carry_to(store, START_MS + 10_000) == 1
    assert occurrences(store) == {
        f"@schedule:tick:{START_MS + 10_000}": "ready",
        f"@schedule:tick:{START_MS + 20_000}": "delayed",
    }
    assert sorted(audit.events()) == ["added", "ready"]
    assert store.carry() == (0, START_MS + 20_000)  # a second carrier finds nothing to make


def test_occurrences_keep_coming_past_the_stored_times(store: Store) -> None:
    store.schedule(every(1))
    runs = schedules.OCCURRENCES_AHEAD * 3
    for n in range(1, runs + 1):
        assert carry_to(store, START_MS + n * 1_000) == 1
        assert len(occurrences(store, "delayed")) == 1
        (lease,) = store.lease("t", 1)
        assert lease.id == schedules.occurrence_id("tick", START_MS + n * 1_000)
        store.ack("t", lease.id, lease.token)
    (info,) = store.schedules()
    assert info.next_ms == START_MS + (runs + 1) * 1_000
    assert len(info.upcoming_ms) >= schedules.REFILL_BELOW - 1
    assert structure_problems(store) == []


def test_after_downtime_run_once_runs_one_late_occurrence(store: Store) -> None:
    store.schedule(every(10))
    late_ms = START_MS + 10 * 60_000 + 5_000  # ten minutes of nothing carried
    assert carry_to(store, late_ms) == 1
    assert occurrences(store) == {
        f"@schedule:tick:{START_MS + 10_000}": "ready",
        f"@schedule:tick:{START_MS + 10 * 60_000 + 10_000}": "delayed",
    }


def test_after_downtime_skip_runs_none(store: Store) -> None:
    store.schedule(every(10, misfire="skip"))
    audit = AuditCursor(store)
    audit.new()
    late_ms = START_MS + 10_000 + schedules.MISFIRE_GRACE_MS + 1
    assert carry_to(store, late_ms) == 0
    assert occurrences(store) == {f"@schedule:tick:{START_MS + 80_000}": "delayed"}
    events = {f["e"]: f for _, f in audit.new()}
    assert events["cancelled"]["why"] == "misfire"
    assert structure_problems(store) == []


def test_skip_still_runs_an_occurrence_carried_within_the_grace(store: Store) -> None:
    store.schedule(every(600, misfire="skip"))
    assert carry_to(store, START_MS + 600_000 + schedules.MISFIRE_GRACE_MS) == 1


def test_an_update_replaces_the_pending_occurrence(store: Store) -> None:
    store.schedule(every(10))
    audit = AuditCursor(store)
    audit.new()
    assert store.schedule(every(30))[0] == "updated"
    assert occurrences(store) == {f"@schedule:tick:{START_MS + 30_000}": "delayed"}
    events = [(f["e"], f.get("why")) for _, f in audit.new()]
    assert events == [("cancelled", "rescheduled"), ("added", None)]
    assert structure_problems(store) == []


def test_an_occurrence_already_ready_runs_after_an_update(store: Store) -> None:
    store.schedule(every(10))
    carry_to(store, START_MS + 10_000)
    store.schedule(every(30))
    assert occurrences(store) == {
        f"@schedule:tick:{START_MS + 10_000}": "ready",
        f"@schedule:tick:{START_MS + 40_000}": "delayed",
    }


def test_unschedule_removes_the_schedule_and_its_pending_occurrence(store: Store) -> None:
    store.schedule(every(10))
    assert store.unschedule("tick") is True
    assert store.unschedule("tick") is False
    assert store.schedules() == []
    assert occurrences(store) == {}
    assert structure_problems(store) == []


def test_a_refill_computed_before_an_update_is_refused(store: Store) -> None:
    store.schedule(every(10))
    keys = store.shard_keys[0]
    stale = schedule_calls.refill(keys, store._now(), "tick", 1, [START_MS + 10_000_000])
    store.schedule(every(20))
    (reply,) = store._batch.run([stale])
    assert reply == -1
    (info,) = store.schedules()
    assert START_MS + 10_000_000 not in info.upcoming_ms


def test_a_schedule_that_ran_dry_is_armed_again_by_a_refill(store: Store) -> None:
    store.schedule(every(1))
    keys = store.shard_keys[0]
    # Empty the stored times, as if every refill of the last 16 carries had failed.
    blob = store.client.hget(keys.schedules, "tick")
    assert isinstance(blob, bytes)
    record = msgpack.unpackb(blob, raw=True)
    record[b"q"] = []
    store.client.hset(keys.schedules, "tick", msgpack.packb(record, use_bin_type=False))
    assert carry_to(store, START_MS + 1_000) == 1
    # The carry asked for a refill, which made the next occurrence.
    assert occurrences(store, "delayed") == {f"@schedule:tick:{START_MS + 2_000}": "delayed"}


def test_occurrences_live_with_their_schedule_on_many_shards(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store = Store(redis_client, "sharded", fake_clock, shards=8)
    store.schedule(every(10))
    shard = schedule_shard("tick", 8)
    for n in range(1, 6):
        job_id = schedules.occurrence_id("tick", START_MS + n * 10_000)
        assert shard_of("t", job_id, 8) == shard
    info = store.get("t", schedules.occurrence_id("tick", START_MS + 10_000))
    assert info is not None and info.state == "delayed"
    carry_to(store, START_MS + 20_000)
    assert store.get("t", schedules.occurrence_id("tick", START_MS + 30_000)) is not None


def test_ids_with_the_occurrence_prefix_are_reserved(store: Store) -> None:
    with pytest.raises(ValidationError) as caught:
        store.new_job("t", "@schedule:fake:1")
    assert caught.value.field == "id"


def test_a_cron_schedule_whose_times_all_passed_is_tended_back(store: Store) -> None:
    hourly = schedules.spec(
        "tick",
        "t",
        cron="0 * * * *",
        tz="UTC",
        every=None,
        body=None,
        start_at_ms=None,
        misfire_policy="run_once",
    )
    store.schedule(hourly)
    # Two days without a carry, then a carry whose process dies before it refills.
    clock_of(store).advance(48 * 3_600_000)
    store._batch.run([calls.carry(store.keys, store._now(), 100)])
    (info,) = store.schedules()
    assert info.pending_id is None and info.upcoming_ms == ()
    assert store.tend_schedules() == schedules.OCCURRENCES_AHEAD
    (info,) = store.schedules()
    assert info.next_ms is not None and info.next_ms > clock_of(store).now_ms()
    assert occurrences(store, "delayed") == {info.pending_id: "delayed"}
