"""Issue 15's targets, written as ratios, judged from records: each verdict follows the figures
it is given, against BullMQ's in the same run or the floor of its round."""

from __future__ import annotations

from typing import Any

from simulations.bench import scale_report, targets
from simulations.bench.probes import producer_speed


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
    assert verdict.measured.startswith("1.02x (redelay-tuned 45,000")
    assert "bullmq-tuned 44,000" in verdict.measured
    records[3] = immediate("bullmq-tuned", 46_000)
    assert targets.delivered(records).met is False


def test_delivery_without_bullmq_in_the_run_is_not_measured() -> None:
    verdict = targets.delivered([immediate("redelay", 50_000)])
    assert verdict.met is None
    assert "BullMQ did not run" in verdict.measured


def steady(rate: int, p99: float, early: int = 0, system: str = "redelay") -> dict[str, Any]:
    return {
        "system": system,
        "scenario": f"steady-{rate}",
        "lateness_ms_p99": p99,
        "early_deliveries": early,
    }


BULLMQ_STEADY = [steady(1000, 2.5, system="bullmq"), steady(5000, 3.0, system="bullmq")]


def test_lateness_is_held_to_bullmqs_p99_at_both_rates_with_no_early_delivery() -> None:
    assert targets.lateness([steady(1000, 2.5), steady(5000, 3.0), *BULLMQ_STEADY]).met is True
    assert targets.lateness([steady(1000, 2.5), steady(5000, 3.1), *BULLMQ_STEADY]).met is False
    early = [steady(1000, 2.5), steady(5000, 1.0, early=1), *BULLMQ_STEADY]
    assert targets.lateness(early).met is False
    assert targets.lateness([steady(1000, 2.5), *BULLMQ_STEADY]).met is False
    alone = targets.lateness([steady(1000, 2.5), steady(5000, 3.0)])
    assert alone.met is False
    assert "(no BullMQ run delivered every job on time)" in alone.measured
    assert targets.lateness([]).met is None


def test_lateness_is_held_to_bullmqs_best_clean_entry() -> None:
    """BullMQ tuned with a lower p99 sets the bar; an entry of BullMQ's that delivered early is
    no bar at all."""
    tuned = [steady(1000, 2.0, system="bullmq-tuned"), steady(5000, 2.0, system="bullmq-tuned")]
    ours = [steady(1000, 2.4), steady(5000, 2.9)]
    assert targets.lateness([*ours, *BULLMQ_STEADY]).met is True
    assert targets.lateness([*ours, *BULLMQ_STEADY, *tuned]).met is False
    tuned_early = [{**record, "early_deliveries": 3} for record in tuned]
    assert targets.lateness([*ours, *BULLMQ_STEADY, *tuned_early]).met is True


def test_lateness_is_met_by_one_entry_at_both_rates_and_shows_each() -> None:
    tuned = "redelay-tuned"
    split = [steady(1000, 2.5), steady(5000, 9.0), steady(1000, 9.0, system=tuned)]
    split += [steady(5000, 2.0, system=tuned), *BULLMQ_STEADY]
    verdict = targets.lateness(split)
    assert verdict.met is False  # each entry misses one rate: no entry meets both
    assert "redelay: steady-1000: p99 2.50 ms (1.00x BullMQ's best)" in verdict.measured
    assert "redelay-tuned: steady-1000: p99 9.00 ms (3.60x BullMQ's best)" in verdict.measured
    both = [steady(1000, 4.6), steady(5000, 10.1), steady(1000, 2.0, system=tuned)]
    both += [steady(5000, 2.9, system=tuned), *BULLMQ_STEADY]
    assert targets.lateness(both).met is True


def burst(system: str, micros: float) -> dict[str, Any]:
    return {"system": system, "scenario": "burst", "redis_cpu_ms_per_1k_jobs": micros}


def test_redis_cpu_is_held_to_bullmqs_lowest_entry() -> None:
    bullmq = [burst("bullmq", 60.0), burst("bullmq-tuned", 50.0)]
    assert targets.redis_cpu([burst("redelay", 49.0), *bullmq]).met is True
    verdict = targets.redis_cpu([burst("redelay", 55.0), *bullmq])
    assert verdict.met is False
    assert verdict.measured == "1.10x (redelay 55.0 µs; bullmq-tuned 50.0 µs)"
    both = targets.redis_cpu([burst("redelay", 55.0), burst("redelay-tuned", 40.0), *bullmq])
    assert both.met is True and both.measured.startswith("0.80x (redelay-tuned 40.0 µs")
    alone = targets.redis_cpu([burst("redelay", 5.0)])
    assert alone.met is None and "BullMQ did not run" in alone.measured


def test_single_add_is_held_to_the_floor_of_its_round() -> None:
    single: dict[str, Any] = {"system": "redelay", "scenario": "enqueue-single"}
    single |= {"enqueue_jobs_per_s": 6_000.0, "floor": {"calls_per_s": 10_000.0}}
    verdict = targets.single_add([single])
    assert verdict.met is True and verdict.measured.startswith("0.60x (6,000 adds/s")
    assert targets.single_add([{**single, "floor": {"calls_per_s": 13_000.0}}]).met is False
    assert targets.single_add([{**single, "floor": {}}]).met is None
    assert targets.single_add([]).met is None


def pending_jobs(system: str, without: float | None, with_audit: float) -> dict[str, Any]:
    record: dict[str, Any] = {"system": system, "scenario": "enqueue-batch"}
    record["redis_memory_bytes_per_pending_job"] = with_audit
    if without is not None:
        record["redis_memory_bytes_per_pending_job_without_audit"] = without
    return record


def test_memory_is_held_to_bullmqs_and_shows_the_largest_pending_size() -> None:
    bullmq = pending_jobs("bullmq", None, 800.0)
    ours = pending_jobs("redelay", 290.0, 400.0)

    def at_scale(per_job: float) -> dict[str, Any]:
        memory = {"bytes_per_pending_job_without_stream": per_job}
        return {"runs": [{"pending": n, "memory": memory} for n in (10_000, 10_000_000)]}

    verdict = targets.memory([ours, bullmq], at_scale(497))
    assert verdict.met is True
    assert "497 B without it at 10,000,000 pending" in verdict.measured
    assert verdict.measured.startswith("0.36x (290 B without the audit stream, 400 B with it")
    assert targets.memory([pending_jobs("redelay", 801.0, 900.0), bullmq]).met is False
    assert targets.memory([ours]).met is None
    assert targets.memory([bullmq]).met is None


def test_every_target_is_not_measured_on_an_empty_run() -> None:
    assert {verdict.met for verdict in targets.judge([])} == {None}


def worker_row(k: int, rate: float, redis: float, clients: float, machine: float) -> dict[str, Any]:
    return {
        "workers": k,
        "delivered_jobs_per_s": rate,
        "redis_cpu_utilisation": redis,
        "workers_cpu_utilisation": clients,
        "machine_cpu_busy": machine,
        "missing": 0,
        "duplicates": 0,
    }


def test_worker_steps_must_rise_until_a_named_cpu_is_the_ceiling() -> None:
    rising = [worker_row(1, 20_000, 0.4, 0.6, 0.5), worker_row(2, 30_000, 0.6, 0.8, 0.7)]
    four_more = worker_row(4, 35_000, 0.7, 0.85, 0.8)
    assert targets.workers({"pinned": True, "summary": [*rising, four_more]}).met is True
    # 4 slower than 2 with no side saturated at 2: not met.
    four_fewer = worker_row(4, 25_000, 0.5, 0.85, 0.7)
    flat = targets.workers({"pinned": True, "summary": [*rising, four_fewer]})
    assert flat.met is False and "ceiling" not in flat.measured
    # The same fall after the workers' core was full at 2 processes: the ceiling is theirs.
    full_core = [rising[0], {**rising[1], "workers_cpu_utilisation": 0.97}, four_fewer]
    pinned = targets.workers({"pinned": True, "summary": full_core})
    assert pinned.met is True
    assert "ceiling: the workers' core from 2 process(es) on" in pinned.measured
    # Not pinned, one process's busy core is not a ceiling: the machine had room left.
    assert targets.workers({"pinned": False, "summary": full_core}).met is False
    # Redis's own core full at 1 process: every later step may fall.
    two_fewer = worker_row(2, 15_000, 0.5, 0.6, 0.6)
    redis_full = [{**rising[0], "redis_cpu_utilisation": 0.95}, two_fewer, four_fewer]
    redis_first = targets.workers({"pinned": True, "summary": redis_full})
    assert redis_first.met is True and "ceiling: Redis's core from 1" in redis_first.measured
    # 2 -> 4 falls, but Redis was already 90% busy at 2: Redis is the limit.
    saturated = [rising[0], {**rising[1], "redis_cpu_utilisation": 0.90}, four_fewer]
    assert targets.workers({"pinned": True, "summary": saturated}).met is True
    # Fewer than three steps, or no section: not measured.
    assert targets.workers({"pinned": True, "summary": rising}).met is None
    assert targets.workers({}).met is None


def test_worker_runs_that_lose_a_job_fail_whatever_the_rates() -> None:
    lost = [worker_row(k, 10_000 * k, 0.5, 0.5, 0.5) for k in (1, 2, 4)]
    lost[1]["missing"] = 3
    verdict = targets.workers({"pinned": True, "summary": lost})
    assert verdict.met is False and "3 jobs missing or run twice" in verdict.measured


def test_the_worker_section_names_the_ceiling_the_verdict_found() -> None:
    summary = [
        worker_row(1, 50_000, 0.6, 0.97, 0.8),
        worker_row(2, 47_000, 0.6, 0.98, 0.8),
        worker_row(4, 44_000, 0.55, 0.99, 0.8),
    ]
    for row in summary:
        row.update(redis_cpu_us_per_job=12.0, jobs=1000)
    pinned = scale_report.worker_findings(summary, pinned=True)
    assert "**The ceiling: the workers' core**, full from 1 process(es) on" in pinned
    loose = scale_report.worker_findings(summary, pinned=False)
    assert "**The ceiling: not reached**" in loose


# -- the scale targets, from hand-made section results --------------------------------------


def _pending_section(large: int, small: int, rate: float, p50: float, p99: float) -> dict[str, Any]:
    comparison = {"large_pending": large, "small_pending": small, "delivery_rate_ratio": rate}
    comparison |= {"lateness_p50_ratio": p50, "lateness_p99_ratio": p99}
    return {"comparison": comparison}


def test_pending_is_met_within_20_percent_at_the_targets_sizes_only() -> None:
    assert targets.pending(_pending_section(10_000_000, 10_000, 0.83, 1.02, 1.06)).met is True
    assert targets.pending(_pending_section(10_000_000, 10_000, 0.79, 1.02, 1.06)).met is False
    assert targets.pending(_pending_section(10_000_000, 10_000, 0.9, 1.21, 1.0)).met is False
    assert targets.pending(_pending_section(100_000, 10_000, 1.0, 1.0, 1.0)).met is None
    failed = targets.pending({"skipped": "failed: boom"})
    assert (failed.met, failed.measured) == (None, "failed: boom")
    assert targets.pending({}).met is None


def _memory_run(pending: int, keys: list[str]) -> dict[str, Any]:
    usage = [
        {"key": key, "bytes_per_pending_job": 10.0 + n, "samples": 0} for n, key in enumerate(keys)
    ]
    return {"pending": pending, "memory": {"bytes_per_pending_job": 500.0, "keys": usage}}


def test_the_memory_table_shows_the_index_previous_generation_only_when_a_run_measured_it() -> None:
    older = [_memory_run(10_000, ["jobs", "delayed", "audit", "history"])]
    assert "previous generation" not in scale_report.memory_table(older)
    newer = [_memory_run(n, ["jobs", "delayed", "audit", "history", "history-previous"])
             for n in (10_000, 10_000_000)]  # fmt: skip
    row = [r for r in scale_report.memory_table(newer).splitlines() if "previous generation" in r]
    assert row == ["| its previous generation | 14.0 | 14.0 |"]


def _producers(*rates: tuple[str, int, float]) -> dict[str, Any]:
    """producer_speed's results for sync add_many / add_stream modes: (call, batch, jobs/s)."""
    rows = []
    for call, batch, rate in rates:
        mode = producer_speed.Producer(call, batch=batch).mode
        rows.append(
            {"mode": mode, "call": call, "is_async": False, "batch": batch, "best_jobs_per_s": rate}
        )
    return {"results": rows}


def enqueue_batch(system: str, rate: float) -> dict[str, Any]:
    return {"system": system, "scenario": "enqueue-batch", "enqueue_jobs_per_s": rate}


def test_batched_add_is_held_to_bullmqs_add_bulk_and_shows_add_stream() -> None:
    bullmq = [enqueue_batch("bullmq", 20_000.0), enqueue_batch("bullmq-tuned", 25_000.0)]
    ours = enqueue_batch("redelay", 50_000.0)
    alone = targets.batched_add([ours, *bullmq])
    assert alone.met is True
    assert alone.measured == "2.00x (redelay 50,000 jobs/s; bullmq-tuned 25,000 jobs/s)"
    stream = _producers(("add_many", 200, 79_000.0), ("add_stream", 200, 151_000.0))
    verdict = targets.batched_add([ours, *bullmq], stream)
    assert "add_stream, 200 per batch: 151,000 jobs/s (the producers section)" in verdict.measured
    assert targets.batched_add([enqueue_batch("redelay", 24_000.0), *bullmq]).met is False
    assert targets.batched_add([ours]).met is None
    assert targets.batched_add(bullmq).met is None
