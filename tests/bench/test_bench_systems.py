"""The benchmark's systems: each setting is written once (systems/tuning.py), and the list of
systems loads where the peers' packages are not installed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from simulations.bench import report
from simulations.bench.systems import BY_NAME, tuning

NODE_WORKER = Path(__file__).resolve().parents[2] / "simulations" / "bench" / "node" / "bullmq.mjs"


def test_the_node_worker_runs_bullmq_at_the_concurrencies_the_page_names() -> None:
    found = re.search(r"concurrency: [^?]*\? (\d+) : (\d+),", NODE_WORKER.read_text())
    assert found is not None, "bullmq.mjs no longer sets its concurrency in the expected form"
    tuned, default = int(found[1]), int(found[2])
    assert (tuned, default) == (tuning.BULLMQ_TUNED_CONCURRENCY, tuning.BULLMQ_CONCURRENCY)
    assert f"concurrency {default}," in BY_NAME["bullmq"].config
    assert f"concurrency {tuned} " in BY_NAME["bullmq-tuned"].config


def test_the_page_names_the_settings_the_workers_use() -> None:
    named = {
        "redelay": f"concurrency {tuning.REDELAY_CONCURRENCY})",
        "redelay-tuned": f"prefetch {tuning.REDELAY_TUNED_PREFETCH} ",
        "celery-tuned": f"worker_prefetch_multiplier {tuning.CELERY_TUNED_PREFETCH_MULTIPLIER} ",
        "rq-tuned": f"WorkerPool of {tuning.RQ_TUNED_WORKERS} ",
        "dramatiq-tuned": f"Worker with {tuning.DRAMATIQ_TUNED_THREADS} threads",
    }
    for name, text in named.items():
        assert text in BY_NAME[name].config, name
    assert ("gc_freeze=True" in BY_NAME["redelay-tuned"].config) is tuning.REDELAY_TUNED_GC_FREEZE
    assert "gc_freeze" not in BY_NAME["redelay"].config


def test_a_page_rendered_again_describes_the_settings_its_run_recorded() -> None:
    records = [{"system": "redelay-tuned"}, {"system": "redelay"}]
    now = report.configs_section(records)
    assert f"- **redelay-tuned**: {BY_NAME['redelay-tuned'].config}" in now
    recorded = report.configs_section(records, {"redelay-tuned": "as it was then"})
    assert "- **redelay-tuned**: as it was then" in recorded
    assert f"- **redelay**: {BY_NAME['redelay'].config}" in recorded  # not recorded: as now
    assert report.system_configs()["redelay-tuned"] == BY_NAME["redelay-tuned"].config


def test_the_list_of_systems_imports_no_peer() -> None:
    code = (
        "import sys, simulations.bench.systems; "
        "print(sorted(p for p in ('arq', 'celery', 'dramatiq', 'rq', 'saq') if p in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
