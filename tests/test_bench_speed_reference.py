"""A full run refuses to rewrite the page on a host much slower than the page's own
(simulations/bench/speed_reference.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulations.bench.speed_reference import SLOW_HOST_RATIO, slow_host_refusal, slower_by


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
