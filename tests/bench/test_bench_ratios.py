"""Every record's figures as ratios: to BullMQ's entry of the same class in the same scenario,
and to the floor of its round (simulations/bench/ratios.py)."""

from __future__ import annotations

from typing import Any

import pytest

from simulations.bench import ratios, report


def record(system: str, scenario: str = "immediate", **fields: Any) -> dict[str, Any]:
    return {"system": system, "scenario": scenario, **fields}


def test_defaults_are_compared_with_bullmqs_defaults_and_tuned_with_tuned() -> None:
    assert ratios.peer_of("redelay") == ratios.peer_of("arq") == "bullmq"
    assert ratios.peer_of("redelay-tuned") == ratios.peer_of("celery-tuned") == "bullmq-tuned"
    records = [
        record("redelay", delivered_jobs_per_s=30_000.0, redis_cpu_ms_per_1k_jobs=20.0),
        record("redelay-tuned", delivered_jobs_per_s=60_000.0),
        record("bullmq", delivered_jobs_per_s=20_000.0, redis_cpu_ms_per_1k_jobs=40.0),
        record("bullmq-tuned", delivered_jobs_per_s=24_000.0),
        record("bullmq", "burst", delivered_jobs_per_s=1.0),  # another scenario: never used
    ]
    assert ratios.versus_bullmq(records[0], records) == {
        "delivered_jobs_per_s": 1.5,
        "redis_cpu_ms_per_1k_jobs": 0.5,
    }
    assert ratios.versus_bullmq(records[1], records) == {"delivered_jobs_per_s": 2.5}
    assert ratios.versus_bullmq(records[2], records)["delivered_jobs_per_s"] == 1.0
    assert ratios.versus_bullmq(record("arq", "steady-1000"), records) == {}


def test_a_job_is_counted_in_empty_calls_of_its_rounds_floor() -> None:
    floor = {"calls_per_s": 10_000.0, "client_us_per_call": 20.0, "redis_us_per_call": 8.0}
    delivered = record(
        "redelay",
        delivered=100,
        delivered_jobs_per_s=5_000.0,
        client_cpu_ms_per_1k_jobs=50.0,
        redis_cpu_ms_per_1k_jobs=20.0,
    )
    assert ratios.versus_floor(delivered, floor) == {
        "client_cpu_per_job": 2.5,
        "redis_cpu_per_job": 2.5,
        "jobs_per_s": 0.5,
    }
    # Enqueue only: the rate is the adds'.
    added = record("redelay", "enqueue-single", enqueue_jobs_per_s=2_500.0)
    assert ratios.versus_floor(added, floor) == {"jobs_per_s": 0.25}
    assert ratios.versus_floor(delivered, {}) == {}


def test_attach_writes_both_and_the_page_shows_them() -> None:
    floor = {"calls_per_s": 10_000.0, "client_us_per_call": 20.0, "redis_us_per_call": 10.0}
    records = [
        record(
            "redelay", delivered_jobs_per_s=30_000.0, client_cpu_ms_per_1k_jobs=60.0, floor=floor
        ),
        record(
            "bullmq", delivered_jobs_per_s=20_000.0, client_cpu_ms_per_1k_jobs=40.0, floor=floor
        ),
    ]
    ratios.attach(records)
    assert records[0]["ratios"]["bullmq"]["delivered_jobs_per_s"] == pytest.approx(1.5)
    assert records[0]["ratios"]["floor"]["client_cpu_per_job"] == pytest.approx(3.0)
    table = report.bullmq_ratio_table(records)
    assert "| **redelay** | `bullmq` | 1.50x |" in table
    assert "bullmq |" not in table.split("\n", 2)[2]  # BullMQ is the base, not a row
    plan = [{"name": "immediate"}]
    assert "| **redelay** | 3.0 / — |" in report.floor_ratio_table(records, plan)


def test_the_floor_spread_is_the_hosts_drift_over_the_run() -> None:
    floors = [{"before": "a", "calls_per_s": 8_000.0}, {"before": "b", "calls_per_s": 10_000.0}]
    assert report.floor_spread(floors) == "8,000 to 10,000 empty calls/s (1.25x)"
    assert report.floor_spread([]) == "not measured"
