"""A full run refuses to rewrite the page on a host much slower than the page's own
(simulations/bench/speed_reference.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulations.bench.speed_reference import (
    SLOW_HOST_RATIO,
    costlier_by,
    costly_run_refusal,
    slow_host_refusal,
    slower_by,
)


def run_json(client_ms: list[float], redis_ms: list[float]) -> dict[str, object]:
    points = [
        {"before": f"system {n}", "client_ms": c, "redis_ms": r}
        for n, (c, r) in enumerate(zip(client_ms, redis_ms, strict=True))
    ]
    return {"generated_at": "2026-11-29 13:45 UTC", "load": {"speed_reference": points}}


def test_the_slower_side_against_the_runs_median_is_the_ratio() -> None:
    previous = run_json([47.0, 50.0, 53.0], [33.0, 30.0, 34.0])
    assert slower_by({"client_ms": 150.0, "redis_ms": 66.0}, previous) == pytest.approx(3.0)
    assert slower_by({"client_ms": 50.0, "redis_ms": 99.0}, previous) == pytest.approx(3.0)
    assert slower_by({"client_ms": 25.0, "redis_ms": 16.5}, previous) == pytest.approx(0.5)
    assert slower_by({"client_ms": 25.0, "redis_ms": 16.5}, {"load": {}}) is None


def test_a_page_made_on_a_similar_host_or_no_page_is_no_reason_to_refuse(tmp_path: Path) -> None:
    page_json = tmp_path / "benchmarks.json"
    point = {"client_ms": 50.0 * SLOW_HOST_RATIO, "redis_ms": 30.0}
    assert slow_host_refusal(point, page_json) is None
    page_json.write_text(json.dumps(run_json([50.0], [30.0])))
    assert slow_host_refusal(point, page_json) is None


def test_a_much_slower_host_is_refused_with_both_references(tmp_path: Path) -> None:
    page_json = tmp_path / "benchmarks.json"
    page_json.write_text(json.dumps(run_json([47.0, 50.0, 53.0], [33.0, 30.0, 34.0])))
    why = slow_host_refusal({"client_ms": 145.4, "redis_ms": 88.9}, page_json)
    assert why is not None
    assert "2.9 times slower" in why
    assert "client 145.4 ms against 50.0, Redis 88.9 ms against 33.0" in why
    assert "--slow-host" in why


def test_a_full_run_on_a_slower_host_stops_before_it_measures_anything(tmp_path: Path) -> None:
    # A page made by an impossibly fast host: this one is slower, whatever it is.
    (tmp_path / "benchmarks.json").write_text(json.dumps(run_json([0.001], [0.001])))
    before = sorted(p.name for p in tmp_path.iterdir())
    # A subprocess, as the run pins its process to one core.
    command = [sys.executable, "-m", "simulations.bench", "--full", "--out-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "refused: this host is" in done.stdout
    assert "scenario" not in done.stdout.split("refused:", 1)[1]  # nothing ran after it
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def page_with_run(client_cpu: float, redis_cpu: float) -> dict[str, object]:
    """A page that passes any host's speed reference, with one redelay-store immediate run."""
    page = run_json([1e9], [1e9])
    run = {"system": "redelay-store", "scenario": "immediate"}
    page["records"] = [
        run | {"client_cpu_ms_per_1k_jobs": client_cpu, "redis_cpu_ms_per_1k_jobs": redis_cpu}
    ]
    page["code"] = {"commit": "5431f10"}
    return page


def test_a_run_is_held_to_the_cpu_per_job_of_the_same_run_on_the_page(tmp_path: Path) -> None:
    page_json = tmp_path / "benchmarks.json"
    page_json.write_text(json.dumps(page_with_run(16.1, 23.8)))
    run = {"system": "redelay-store", "scenario": "immediate"}
    # This host on 2026-12-02: client 27.1, Redis 37.9 ms per 1k jobs (1.7 times).
    slower = run | {"client_cpu_ms_per_1k_jobs": 27.1, "redis_cpu_ms_per_1k_jobs": 37.9}
    assert costlier_by(slower, json.loads(page_json.read_text())) == pytest.approx(27.1 / 16.1)
    why = costly_run_refusal(slower, page_json)
    assert why is not None
    assert "1.7 times the CPU per job" in why
    assert "client_cpu_ms_per_1k_jobs 27.1 against 16.1" in why
    assert "5431f10" in why and "--slow-host" in why
    near = run | {
        "client_cpu_ms_per_1k_jobs": 20.0,
        "redis_cpu_ms_per_1k_jobs": 23.8 * SLOW_HOST_RATIO,
    }
    assert costly_run_refusal(near, page_json) is None
    other = slower | {"system": "redelay"}
    assert costlier_by(other, json.loads(page_json.read_text())) is None
    assert costly_run_refusal(other, page_json) is None
    assert costly_run_refusal(slower, tmp_path / "none.json") is None


def test_a_full_run_that_costs_far_more_per_job_than_the_page_stops_after_that_run(
    tmp_path: Path,
) -> None:
    # A page whose run cost next to nothing: this host's run costs more, whatever it is.
    (tmp_path / "benchmarks.json").write_text(json.dumps(page_with_run(0.001, 0.001)))
    before = sorted(p.name for p in tmp_path.iterdir())
    command = [sys.executable, "-m", "simulations.bench", "--full", "--out-dir", str(tmp_path)]
    command += ["--systems", "redelay-store", "--scenarios", "immediate,burst"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stdout + done.stderr
    ran, refusal = done.stdout.split("refused: ", 1)
    assert "redelay-store immediate" in ran
    assert refusal.startswith("redelay-store's immediate run cost")
    assert "burst" not in ran.split("code:", 1)[1]  # the run stopped before its next scenario
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
