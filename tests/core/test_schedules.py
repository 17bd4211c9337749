"""actors/schedules.py: checking a schedule and computing its occurrence times (no Redis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from actors import schedules
from actors.errors import ValidationError

BERLIN = ZoneInfo("Europe/Berlin")


def ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def spec(**kwargs: object) -> schedules.ScheduleSpec:
    args: dict[str, object] = {
        "cron": None,
        "every": None,
        "tz": "UTC",
        "body": None,
        "start_at_ms": None,
        "misfire_policy": "run_once",
    }
    args.update(kwargs)
    return schedules.spec("nightly", "reports", **args)  # type: ignore[arg-type]


def test_cron_in_a_time_zone() -> None:
    nightly = spec(cron="0 3 * * *", tz="Europe/Berlin")
    after = ms(datetime(2026, 1, 10, 12, 0, tzinfo=BERLIN))
    times = schedules.occurrences(nightly, after, 3, 0)
    assert [datetime.fromtimestamp(t / 1000, BERLIN).isoformat() for t in times] == [
        "2026-01-11T03:00:00+01:00",
        "2026-01-12T03:00:00+01:00",
        "2026-01-13T03:00:00+01:00",
    ]


def test_a_wall_time_that_does_not_exist_runs_once_at_the_next_valid_instant() -> None:
    # 2026-03-29: Berlin's clocks jump from 02:00 to 03:00, so 02:30 does not exist that day.
    at_half_two = spec(cron="30 2 * * *", tz="Europe/Berlin")
    after = ms(datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN))
    times = schedules.occurrences(at_half_two, after, 3, 0)
    local = [datetime.fromtimestamp(t / 1000, BERLIN).isoformat() for t in times]
    assert local == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_a_repeated_hour_runs_once() -> None:
    # 2026-10-25: Berlin's 02:00-03:00 happens twice; a daily 02:30 job runs in the first one only.
    at_half_two = spec(cron="30 2 * * *", tz="Europe/Berlin")
    after = ms(datetime(2026, 10, 24, 12, 0, tzinfo=BERLIN))
    times = schedules.occurrences(at_half_two, after, 2, 0)
    assert times[1] - times[0] == 25 * 3600 * 1000  # the day is 25 hours long
    local = [datetime.fromtimestamp(t / 1000, BERLIN).isoformat() for t in times]
    assert local == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]


def test_every_keeps_its_grid_and_starts_strictly_after() -> None:
    five = spec(every=timedelta(seconds=5))
    assert schedules.occurrences(five, 10_000, 3, 1_000) == [11_000, 16_000, 21_000]
    assert schedules.occurrences(five, 11_000, 2, 1_000) == [16_000, 21_000]
    assert schedules.first_anchor_ms(five, 50_000) == 55_000


def test_start_at_is_the_first_possible_occurrence() -> None:
    later = spec(every=60, start_at_ms=1_000_000)
    assert schedules.occurrences(later, 0, 2, 1_000_000) == [1_000_000, 1_060_000]
    hourly = spec(cron="0 * * * *", start_at_ms=ms(datetime(2026, 1, 1, 5, 30, tzinfo=UTC)))
    (first,) = schedules.occurrences(hourly, 0, 1, 0)
    assert first == ms(datetime(2026, 1, 1, 6, 0, tzinfo=UTC))


def test_occurrence_ids_name_their_schedule() -> None:
    job_id = schedules.occurrence_id("db:vacuum", 1_700_000_000_000)
    assert job_id == "@schedule:db:vacuum:1700000000000"
    assert schedules.schedule_of(job_id) == "db:vacuum"
    assert schedules.schedule_of("order-17") is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "cron"),
        ({"cron": "0 3 * * *", "every": 60}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"every": 0.5}, "every"),
        ({"every": "soon"}, "every"),
        ({"every": 60, "tz": "Mars/Olympus"}, "tz"),
        ({"every": 60, "misfire_policy": "twice"}, "misfire"),
        ({"every": 60, "body": {1, 2}}, "body"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(**kwargs)
    assert caught.value.field == field


def test_bad_names_are_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        schedules.spec(
            "has space",
            "t",
            cron=None,
            every=60,
            tz="UTC",
            body=None,
            start_at_ms=None,
            misfire_policy="skip",
        )
    assert caught.value.field == "name"
