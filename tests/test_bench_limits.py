"""The "where the time goes" figures: each side's CPU per job and the ceiling it allows, from a
run's records (simulations/bench/limits_report.py)."""

from __future__ import annotations

from typing import Any

from simulations.bench import limits_report
from simulations.bench.formatting import MISSING


def record(system: str, scenario: str, **fields: float) -> dict[str, Any]:
    return {"system": system, "scenario": scenario, **fields}


def run(records: list[dict[str, Any]], transitions: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"records": records, "redis_limit": {"scripts": {"transitions": transitions or {}}}}


def test_delivery_figures_are_the_faster_entrys_less_the_fill() -> None:
    records = [
        record("redelay", "immediate", delivered_jobs_per_s=10_000),
        record(
            "redelay-tuned",
            "immediate",
            delivered_jobs_per_s=20_000,
            client_cpu_ms_per_1k_jobs=45.0,
            redis_cpu_ms_per_1k_jobs=30.0,
        ),
        record(
            "redelay",
            "enqueue-batch",
            client_cpu_ms_per_1k_jobs=5.0,
            redis_cpu_ms_per_1k_jobs=10.0,
        ),
    ]
    found = limits_report.values(run(records))
    assert found["best_own"] == "redelay-tuned"
    assert found["best_own_delivered"] == "20,000"
    # 45 - 5 µs of worker CPU per job: one core's worth is 25,000 jobs/s.
    assert (found["best_own_client_usec"], found["best_own_client_ceiling"]) == ("40.0", "25,000")
    assert (found["best_own_redis_usec"], found["best_own_redis_ceiling"]) == ("20.0", "50,000")
    assert found["tuned_delivered"] == "20,000"


def test_single_adds_add_both_sides_since_a_thread_waits_for_each_reply() -> None:
    records = [
        record(
            "redelay",
            "enqueue-single",
            client_cpu_ms_per_1k_jobs=60.0,
            redis_cpu_ms_per_1k_jobs=40.0,
        )
    ]
    transitions = {"add (1 job per call)": {"usec_per_call": 25.0}}
    found = limits_report.values(run(records, transitions))
    assert found["one_add_ceiling"] == "10,000"
    assert found["one_add_script_usec"] == "25.0"


def test_audit_cost_sums_the_xadds_of_a_delayed_jobs_life() -> None:
    def transition(xadd: float) -> dict[str, Any]:
        return {"usec_per_job": 5.0, "inner_usec_per_job": {"xadd": xadd, "zadd": 1.0}}

    names = ("add (100 per call)", "carry (1,000 per call)", "lease (100 per call)")
    transitions = {name: transition(0.5) for name in (*names, "ack (100 per call)")}
    found = limits_report.values(run([], transitions))
    assert found["audit_xadd_usec"] == "2.0"


def test_a_run_without_the_figures_shows_them_missing_not_zero() -> None:
    found = limits_report.values(run([]))
    for name in (
        "best_own_delivered",
        "best_own_client_ceiling",
        "one_add_ceiling",
        "batched_add_redis_ceiling",
        "audit_xadd_usec",
        "bullmq_tuned_delivered",
    ):
        assert found[name] == MISSING, name
