"""simulations.bench.probes.worker_scale end to end at a tiny size: its fields, and numbers that
make sense.

Runs it as a subprocess (it pins its process and the workers to one core). No speed is asserted:
the figures in docs/benchmarks.md come from the full run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from simulations.bench.probes.worker_scale import tally

JOBS = 3_000  # enough CPU on each side to span several of the kernel's 10 ms accounting ticks


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    command = [sys.executable, "-m", "simulations.bench.probes.worker_scale", "--json"]
    command += ["--workers", "1", "2", "--jobs", str(JOBS), "--concurrency", "10"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.slow
def test_every_job_delivered_once_by_each_number_of_workers(result: dict[str, Any]) -> None:
    assert [s["workers"] for s in result["summary"]] == [1, 2]
    for summary in result["summary"]:
        assert (summary["jobs"], summary["delivered"], summary["missing"]) == (JOBS, JOBS, 0)
        assert summary["duplicates"] == 0


def test_rates_and_cpu_per_job_are_measured(result: dict[str, Any]) -> None:
    for run in result["runs"]:
        assert run["delivered_jobs_per_s"] > 0
        assert run["redis_cpu_us_per_job"] > 0
        assert run["workers_cpu_us_per_job"] > 0
        # Redis is one thread (plus a little for its background threads).
        assert 0 < run["redis_cpu_utilisation"] <= 1.5
        assert len(run["load_average_before"]) == len(run["load_average_after"]) == 3
    assert result["cpus"] >= 1 and result["pinning"]


def test_tally_counts_missing_and_duplicated_jobs_across_workers() -> None:
    # Job 0 ran once, job 1 in both workers, job 2 twice in one, job 3 never.
    assert tally([bytes([1, 1, 2, 0]), bytes([0, 1, 0, 0])]) == (3, 1, 2)
