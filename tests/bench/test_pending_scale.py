"""simulations.bench.probes.pending_scale end to end at tiny sizes: its fields, and numbers that
make sense.

Runs it as a subprocess (it pins its process to one core, which the test process must not be).
No speed is asserted: the figures in docs/benchmarks.md come from the full run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from simulations.bench.probes.pending_scale import EXACT_USAGE_MAX, USAGE_SAMPLES, usage_samples

# DUE_NOW: enough jobs that their Redis CPU spans several of the kernel's 10 ms accounting ticks.
SMALL, LARGE, DUE_NOW, RATE, SECONDS = 200, 3_000, 3_000, 200, 1.0


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    command = [sys.executable, "-m", "simulations.bench.probes.pending_scale", "--json"]
    command += ["--pending", str(SMALL), str(LARGE), "--deliver-jobs", str(DUE_NOW)]
    command += ["--rate", str(RATE), "--seconds", str(SECONDS), "--delay-ms", "200", "600"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.slow
def test_one_run_per_pending_size_with_memory_per_structure(result: dict[str, Any]) -> None:
    assert [r["pending"] for r in result["runs"]] == [SMALL, LARGE]
    for run in result["runs"]:
        memory = run["memory"]
        total = memory["bytes_per_pending_job"]
        without_stream = memory["bytes_per_pending_job_without_stream"]
        without_index = memory["bytes_per_pending_job_without_stream_and_index"]
        assert total > without_stream >= without_index > 100  # a ~100-byte body at least
        # (>=: pending jobs hold no index field, so the index's share is a key of a field or two
        # spread over every job, which rounded to 0.1 B a job can vanish; its size is checked
        # below.)
        assert memory["bytes_per_pending_job_without_stream_and_index_exact"] > 0
        keys = {k["key"]: k for k in memory["keys"]}
        assert set(keys) == {"jobs", "due", "due:*", "audit", "history", "history-previous"}
        # Every pending job is in the pool and the delayed set's buckets, which the index lists;
        # each has its `added` audit entry.
        assert keys["jobs"]["elements"] == keys["due:*"]["elements"] == run["pending"]
        assert 0 < keys["due"]["elements"] <= run["pending"]
        assert keys["audit"]["elements"] >= run["pending"]
        # A pending job's `added` id is in its record (field h), not in the index: the fill leaves
        # no index field per job, only the warm-up job's and a generation's start.
        assert keys["history"]["elements"] + keys["history-previous"]["elements"] <= 2
        assert (
            keys["history"]["memory_usage_bytes"] + keys["history-previous"]["memory_usage_bytes"]
            < 1024
        )
        written = [k for name, k in keys.items() if name != "history-previous"]
        assert all(k["memory_usage_bytes"] > 0 and k["samples"] == 0 for k in written)
        assert run["fill_jobs_per_s"] > 0


def test_every_job_delivered_once_and_none_early(result: dict[str, Any]) -> None:
    for run in result["runs"]:
        due_now, steady = run["immediate_summary"], run["steady_summary"]
        assert (due_now["jobs"], due_now["delivered"], due_now["missing"]) == (DUE_NOW, DUE_NOW, 0)
        assert due_now["duplicates"] == 0
        assert due_now["delivered_jobs_per_s"] > 0
        assert due_now["redis_cpu_ms_per_1k_jobs"] > 0
        jobs = int(RATE * SECONDS)
        assert (steady["jobs"], steady["delivered"], steady["missing"]) == (jobs, jobs, 0)
        assert (steady["duplicates"], steady["early_deliveries"]) == (0, 0)
        assert 0 <= steady["lateness_ms_p50"] <= steady["lateness_ms_p99"]
        assert steady["lateness_ms_p99"] <= steady["lateness_ms_max"]


def test_comparison_of_the_largest_with_the_smallest(result: dict[str, Any]) -> None:
    comparison = result["comparison"]
    assert (comparison["small_pending"], comparison["large_pending"]) == (SMALL, LARGE)
    assert comparison["delivery_rate_ratio"] > 0
    assert comparison["lateness_p99_ratio"] > 0
    assert isinstance(comparison["within_20_percent"], bool)
    assert result["cpus"] >= 1 and len(result["load_average_start"]) == 3
    assert result["pinning"]


def test_memory_usage_is_exact_on_small_keys_and_sampled_on_big_ones() -> None:
    assert usage_samples(EXACT_USAGE_MAX) == 0
    assert usage_samples(EXACT_USAGE_MAX + 1) == USAGE_SAMPLES
