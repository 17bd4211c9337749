"""Issue 15's targets judged from records: each verdict follows the figures it is given."""

from __future__ import annotations

from typing import Any

from simulations.bench import targets


def immediate(system: str, rate: float) -> dict[str, Any]:
    return {"system": system, "scenario": "immediate", "delivered_jobs_per_s": rate}


def test_delivery_is_judged_on_each_sides_best_entry_against_bullmq() -> None:
    records = [
        immediate("redelay", 30_000),
        immediate("redelay-tuned", 45_000),
        immediate("bullmq", 20_000),
        immediate("bullmq-tuned", 44_000),
    ]
    verdict = targets.delivered(records)
    assert verdict.met is True
    assert "redelay-tuned 45,000" in verdict.measured
    assert "bullmq-tuned 44,000" in verdict.measured
    records[3] = immediate("bullmq-tuned", 46_000)
    assert targets.delivered(records).met is False


def test_delivery_without_bullmq_in_the_run_is_not_measured() -> None:
    verdict = targets.delivered([immediate("redelay", 50_000)])
    assert verdict.met is None
    assert "BullMQ did not run" in verdict.measured


def test_lateness_needs_both_rates_and_no_early_delivery() -> None:
    def steady(rate: int, p99: float, early: int = 0) -> dict[str, Any]:
        return {
            "system": "redelay",
            "scenario": f"steady-{rate}",
            "lateness_ms_p99": p99,
            "early_deliveries": early,
        }

    assert targets.lateness([steady(1000, 2.5), steady(5000, 3.0)]).met is True
    assert targets.lateness([steady(1000, 2.5), steady(5000, 3.1)]).met is False
    assert targets.lateness([steady(1000, 2.5), steady(5000, 1.0, early=1)]).met is False
    assert targets.lateness([steady(1000, 2.5)]).met is False
    assert targets.lateness([]).met is None


def test_redis_cpu_adds_and_memory_follow_their_thresholds() -> None:
    burst = {"system": "redelay", "scenario": "burst", "redis_cpu_ms_per_1k_jobs": 11.9}
    assert targets.redis_cpu([burst]).met is True
    assert targets.redis_cpu([{**burst, "redis_cpu_ms_per_1k_jobs": 27.0}]).met is False
    tuned = {**burst, "system": "redelay-tuned", "redis_cpu_ms_per_1k_jobs": 11.0}
    both = targets.redis_cpu([{**burst, "redis_cpu_ms_per_1k_jobs": 27.0}, tuned])
    assert both.met is True
    assert both.measured == "redelay 27.0 µs; redelay-tuned 11.0 µs"
    single = {"system": "redelay", "scenario": "enqueue-single", "enqueue_jobs_per_s": 6_600}
    assert targets.single_add([single]).met is False
    batch = {
        "system": "redelay",
        "scenario": "enqueue-batch",
        "enqueue_jobs_per_s": 151_000,
        "redis_memory_bytes_per_pending_job_without_audit": 290,
        "redis_memory_bytes_per_pending_job": 520,
    }
    assert targets.batched_add([batch]).met is True
    assert targets.memory([batch]).met is True
    assert (
        targets.memory([{**batch, "redis_memory_bytes_per_pending_job_without_audit": 301}]).met
        is False
    )


def test_every_target_is_not_measured_on_an_empty_run() -> None:
    assert {verdict.met for verdict in targets.judge([])} == {None}
