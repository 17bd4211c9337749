"""The benchmark harness end to end on a tiny scenario, so it cannot rot between benchmark runs.

Runs redelay (the DelayQueue, in producer and worker processes of its own) against a private
redis-server, then checks the record's fields and that the docs page renders from it. No speed is
asserted: speed claims come from `make bench`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulations.bench import report, scale, targets
from simulations.bench.runner import RunContext, run_scenario
from simulations.bench.scenarios import Scenario, tiny_plan
from simulations.bench.server import can_pin
from simulations.bench.systems import BY_NAME

JOBS = 200

DELIVERY_FIELDS = (
    "enqueue_jobs_per_s",
    "delivered_jobs_per_s",
    "lateness_ms_p50",
    "lateness_ms_p99",
    "lateness_ms_max",
    "early_deliveries",
    "redis_commands_per_delivered_job",
    "redis_memory_bytes_per_pending_job",
    "redis_memory_bytes_per_pending_job_without_audit",
    "client_cpu_ms_per_1k_jobs",
    "redis_cpu_ms_per_1k_jobs",
)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    context = RunContext(tmp_path_factory.mktemp("bench"), seed=1)
    plan = {s.name: s for s in tiny_plan(JOBS)}
    return [
        run_scenario(BY_NAME["redelay"], plan["immediate"], context),
        run_scenario(BY_NAME["redelay"], plan["enqueue-batch"], context),
    ]


@pytest.mark.slow
def test_immediate_record_has_every_field_and_every_job(records: list[dict[str, Any]]) -> None:
    record = records[0]
    assert (record["system"], record["scenario"], record["jobs"]) == ("redelay", "immediate", JOBS)
    missing = [name for name in DELIVERY_FIELDS if record.get(name) is None]
    assert missing == []
    assert (record["delivered"], record["missing"], record["duplicates"]) == (JOBS, 0, 0)
    assert record["early_deliveries"] == 0  # due at enqueue time, delivered after the worker starts
    assert record["lateness_ms_p50"] <= record["lateness_ms_p99"] <= record["lateness_ms_max"]
    assert len(record["lateness_ms_quantiles"]) == 101
    # Every job's life runs several commands inside scripts, but only a few script calls.
    trips = record["redis_round_trips_per_delivered_job"]
    assert record["redis_commands_per_delivered_job"] > trips > 0
    assert record["redis_calls_by_command"]["evalsha"] > 0
    without = record["redis_memory_bytes_per_pending_job_without_audit"]
    assert 0 < without < record["redis_memory_bytes_per_pending_job"]


def test_enqueue_record_counts_per_enqueued_job(records: list[dict[str, Any]]) -> None:
    record = records[1]
    assert record["scenario"] == "enqueue-batch"
    assert "delivered" not in record
    assert record["enqueue_batch_api"] == BY_NAME["redelay"].batch_api
    assert record["redis_commands_per_enqueued_job"] > 1
    assert record["redis_memory_bytes_per_pending_job"] > 0


def test_page_and_json_render_from_the_records(
    records: list[dict[str, Any]], tmp_path: Path
) -> None:
    plan: list[Scenario] = tiny_plan(JOBS)
    results: dict[str, Any] = {
        "generated_at": "now",
        "mode": "tiny",
        "command": "pytest",
        "machine": report.machine(),
        "versions": {},
        "load": {"start": [0.0], "end": [0.0], "max_1m": 0.0},
        "plan": [s.to_json() for s in plan],
        "records": records,
        "skipped": [{"system": "arq", "scenario": "immediate", "reason": "not installed"}],
        "redis_limit": {},
        "profiles": [],
        "concurrency_sweep": [],
        "targets": [v.to_json() for v in targets.judge(records)],
        "charts": {},
    }
    json_path, page_path = tmp_path / "b.json", tmp_path / "b.md"
    report.write(results, json_path, page_path)
    assert json.loads(json_path.read_text())["records"][0]["delivered"] == JOBS
    page = page_path.read_text()
    assert "| **redelay** |" in page
    assert "$" not in page  # every placeholder of the template was filled
    assert "arq / immediate: not installed" in page


def test_a_peer_that_did_not_run_is_an_error_and_a_missing_api_is_not() -> None:
    from simulations.bench.__main__ import report_errors

    not_applicable: dict[str, Any] = {"system": "rq", "scenario": "enqueue-batch", "reason": "x"}
    not_applicable["error"] = False
    missing: dict[str, Any] = {"system": "bullmq", "scenario": "immediate", "reason": "npm failed"}
    missing["error"] = True
    assert report_errors([not_applicable]) == 0
    assert report_errors([not_applicable, missing]) == 1
    # A record from before the flag existed counts as an error: never a silent gap.
    assert report_errors([{"system": "arq", "scenario": "immediate", "reason": "x"}]) == 1
    section = report.skipped_section([not_applicable, missing])
    assert "**ERROR, did not run**: bullmq / immediate: npm failed" in section
    assert "not applicable: rq / enqueue-batch" in section


def _headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("## ", "### "))]


def test_every_section_of_the_page_comes_from_the_template() -> None:
    """`make bench` rewrites docs/benchmarks.md from the template: a section written into the page
    alone (a hand-run simulator's figures) would be dropped by the next run."""
    page = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
    assert _headings(page.read_text()) == _headings(report.TEMPLATE_PATH.read_text())


def _sections(text: str) -> dict[str, str]:
    """Heading -> its text, for the page's ## and ### headings alike."""
    parts = re.split(r"\n#{2,3} ", "\n" + text)[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def test_the_sections_the_template_fills_nothing_in_read_the_same_on_the_page() -> None:
    """A hand-run simulator's section lives in the template as text: edited on the page alone,
    the edit would be lost to the next run."""
    page = _sections((Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text())
    for heading, text in _sections(report.TEMPLATE_PATH.read_text()).items():
        if "$" not in text.replace("$$", ""):
            assert page[heading].strip() == text.replace("$$", "$").strip(), heading


# -- the scale sections (10M pending, worker processes) as part of a run -----------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """`python -m simulations.bench --tiny` with both scale sections and nothing else but one
    scenario: a subprocess, as it pins its process to one core."""
    out = tmp_path_factory.mktemp("tiny-run")
    command = [sys.executable, "-m", "simulations.bench", "--tiny", "--systems", "redelay"]
    command += ["--scenarios", "immediate", "--no-limit", "--no-profile", "--no-sweep"]
    command += ["--no-instructions"]
    command += ["--out-dir", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    results: dict[str, Any] = json.loads((out / "benchmarks-tiny.json").read_text())
    return results, (out / "benchmarks-tiny.md").read_text()


@pytest.mark.slow
def test_a_tiny_run_measures_pending_jobs_at_two_sizes(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    pending = tiny_run[0]["pending_scale"]
    sizes = [int(n) for n in scale.PENDING_ARGS["tiny"].split("--pending ")[1].split()[:2]]
    assert [run["pending"] for run in pending["runs"]] == sizes
    for run in pending["runs"]:
        assert run["memory"]["bytes_per_pending_job_without_stream"] > 100
        due_now = run["immediate_summary"]
        assert due_now["delivered"] == due_now["jobs"] > 0 and due_now["missing"] == 0
        assert run["steady_summary"]["early_deliveries"] == 0
    assert pending["comparison"]["large_pending"] == sizes[1]
    assert pending["command"] == scale.pending_command("tiny") and pending["wall_s"] > 0


def test_a_tiny_run_measures_one_and_two_worker_processes(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    workers = tiny_run[0]["worker_scale"]
    assert [row["workers"] for row in workers["summary"]] == [1, 2]
    for row in workers["summary"]:
        assert row["delivered"] == row["jobs"] > 0
        assert (row["missing"], row["duplicates"]) == (0, 0)
        assert row["delivered_jobs_per_s"] > 0 and row["redis_cpu_us_per_job"] > 0
    assert workers["pinned"] == can_pin()


def test_the_targets_of_a_tiny_run_show_its_scale_figures_unjudged(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    """Tiny sizes are not the targets' (10,000,000 pending; 4 processes): shown, never "met"."""
    by_target = {t["target"]: t for t in tiny_run[0]["targets"]}
    pending = next(t for name, t in by_target.items() if name.startswith("with 10,000,000"))
    workers = next(t for name, t in by_target.items() if name.startswith("worker processes"))
    assert pending["met"] is None and "not the target's sizes" in pending["measured"]
    assert workers["met"] is None and "1: " in workers["measured"] and "2: " in workers["measured"]


def test_the_page_of_a_tiny_run_shows_its_scale_figures(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    results, page = tiny_run
    sections = _sections(page)
    pending_text = sections["Ten million pending jobs"]
    worker_text = sections["Worker processes on one Redis"]
    for text in (pending_text, worker_text):
        assert "Not measured" not in text
        assert "$" not in text.replace("$$", "")  # every placeholder filled
    for run in results["pending_scale"]["runs"]:
        memory = run["memory"]
        assert f"{run['pending']:,} pending" in pending_text
        assert f"{run['immediate_summary']['delivered_jobs_per_s']:,.0f}" in pending_text
        assert f"{memory['bytes_per_pending_job_without_stream']:,.1f}" in pending_text
        jobs_key = next(k for k in memory["keys"] if k["key"] == "jobs")
        assert f"{jobs_key['bytes_per_pending_job']:,.1f}" in pending_text
    comparison = results["pending_scale"]["comparison"]
    within = "yes" if comparison["within_20_percent"] else "no"
    assert f"at {comparison['large_pending']:,}: {within}.**" in pending_text
    assert f"x{comparison['lateness_p99_ratio']:.2f}" in pending_text
    for row in results["worker_scale"]["summary"]:
        cells = f"| {row['workers']} | {row['delivered_jobs_per_s']:,.0f} |"
        assert cells in worker_text
        assert f"{row['redis_cpu_utilisation'] * 100:,.0f}%" in worker_text


def test_a_tiny_run_measures_every_producer_and_the_page_shows_them(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    results, page = tiny_run
    producers = results["producers"]
    assert producers["command"] == scale.producer_command("tiny")
    modes = [row["mode"] for row in producers["results"]]
    assert modes == [
        "sync add, one thread",
        "async add, one loop, 4 tasks",
        "add_many, 100 per call",
        "add_stream, 100 per batch",
        "async add_stream, 100 per batch",
    ]
    text = _sections(page)["The producers"]
    assert "Not measured" not in text and "$" not in text.replace("$$", "")
    for row in producers["results"]:
        assert row["jobs"] == 300 and row["best_jobs_per_s"] > 0
        assert f"{row['best_jobs_per_s']:,.0f} (rounds: " in text
    assert "| `DelayQueue.add_stream`, 100 jobs per batch |" in text
    assert "- **100 jobs per batch:** `add_stream` " in text
    batched = next(t for t in results["targets"] if t["target"].startswith("`add_many`"))
    assert "add_stream, 100 per batch: " in batched["measured"]


def test_render_redraws_the_same_page_from_a_tiny_runs_json(
    tiny_run: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    from simulations.bench.__main__ import render_only

    results, page = tiny_run
    json_path = tmp_path / "benchmarks-tiny.json"
    json_path.write_text(json.dumps(results))
    assert render_only(json_path) == 0
    assert (tmp_path / "benchmarks-tiny.md").read_text() == page


def test_a_json_from_before_the_scale_sections_renders_them_as_not_measured(
    tmp_path: Path,
) -> None:
    """A JSON from before the sections (the committed one with their keys taken out, as runs
    before 2026-11-24 wrote it): --render must still draw the page."""
    from simulations.bench.__main__ import render_only

    committed = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.json"
    results = json.loads(committed.read_text())
    results.pop("pending_scale", None)
    results.pop("worker_scale", None)
    results.pop("producers", None)
    older = tmp_path / "older" / "benchmarks.json"
    older.parent.mkdir()
    older.write_text(json.dumps(results))
    assert render_only(older, tmp_path) == 0
    sections = _sections((tmp_path / "benchmarks.md").read_text())
    for heading in ("Ten million pending jobs", "Worker processes on one Redis", "The producers"):
        assert "Not measured in this run" in sections[heading], heading
        assert "$" not in sections[heading].replace("$$", ""), heading
    verdicts = targets.judge(results["records"])
    assert [v.met for v in verdicts[-2:]] == [None, None]


def test_a_tiny_run_measures_a_floor_before_each_round_and_holds_its_records_to_it(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    results, page = tiny_run
    floors = results["floors"]
    assert [point["before"] for point in floors] == ["immediate"]
    point = floors[0]
    assert point["calls_per_s"] > 0 and point["client_us_per_call"] > 0
    assert point["redis_us_per_call"] > 0
    record = results["records"][0]
    assert record["floor"] == {k: v for k, v in point.items() if k != "before"}
    by_floor = record["ratios"]["floor"]
    assert by_floor["client_cpu_per_job"] == pytest.approx(
        record["client_cpu_ms_per_1k_jobs"] / point["client_us_per_call"], rel=0.01
    )
    assert record["ratios"]["bullmq"] == {}  # BullMQ did not run in it
    assert f"| immediate | {point['calls_per_s']:,.0f} |" in page
