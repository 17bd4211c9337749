"""The benchmark harness end to end on a tiny scenario, so it cannot rot between benchmark runs.

Runs redelay (the DelayQueue, in producer and worker processes of its own) against a private
redis-server, then checks the record's fields and that the docs page renders from it. No speed is
asserted: speed claims come from `make bench`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulations.bench import report, targets
from simulations.bench.runner import RunContext, run_scenario
from simulations.bench.scenarios import Scenario, tiny_plan
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
    return [line for line in text.splitlines() if line.startswith("## ")]


def test_every_section_of_the_page_comes_from_the_template() -> None:
    """`make bench` rewrites docs/benchmarks.md from the template: a section written into the page
    alone (a hand-run simulator's figures) would be dropped by the next run."""
    page = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
    assert _headings(page.read_text()) == _headings(report.TEMPLATE_PATH.read_text())


def _sections(text: str) -> dict[str, str]:
    parts = ("\n" + text).split("\n## ")[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def test_the_sections_the_template_fills_nothing_in_read_the_same_on_the_page() -> None:
    """A hand-run simulator's section lives in the template as text: edited on the page alone,
    the edit would be lost to the next run."""
    page = _sections((Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md").read_text())
    for heading, text in _sections(report.TEMPLATE_PATH.read_text()).items():
        if "$" not in text.replace("$$", ""):
            assert page[heading].strip() == text.replace("$$", "$").strip(), heading
