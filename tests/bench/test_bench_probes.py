"""`python -m simulations.bench probe NAME`: one harness for the hand-run measurements, with one
argument shape and one JSON shape (simulations/bench/probes/__init__.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulations.bench import probes
from simulations.bench.__main__ import main

PROBES_DIR = Path(probes.__file__).parent


def test_every_probe_module_is_listed_and_every_listed_probe_exists() -> None:
    modules = {p.stem for p in PROBES_DIR.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(probes.PROBES)
    text = probes.listing()
    assert all(name in text for name in probes.PROBES)


def test_an_unknown_probe_or_none_is_refused_with_the_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["probe", "call_overhead"]) == 2  # retired: docs/benchmarks.md says so
    assert "unknown probe 'call_overhead'" in capsys.readouterr().err
    assert main(["probe"]) == 2
    assert "measure_memory" in capsys.readouterr().out


def test_a_probe_writes_its_result_in_the_harness_json_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "memory.json"
    argv = ["--jobs", "300", "--lifecycle-jobs", "0", "--json-out", str(out)]
    assert main(["probe", "measure_memory", *argv]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    document = json.loads(out.read_text())
    assert set(document) == {"probe", "argv", "generated_at", "machine", "code", "result"}
    assert document["probe"] == "measure_memory"
    assert document["argv"] == ["--jobs", "300", "--lifecycle-jobs", "0"]
    assert document["result"]["jobs"] == 300
    # --json prints the same shape on stdout.
    assert (
        main(["probe", "measure_memory", "--jobs", "200", "--lifecycle-jobs", "0", "--json"]) == 0
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["probe"] == "measure_memory" and printed["result"]["jobs"] == 200


def test_the_last_json_a_probe_printed_is_found_after_progress_lines() -> None:
    assert probes.last_json('filling...\n{"a": 1}\n') == {"a": 1}
    assert probes.last_json('progress\n[\n  {"b": 2}\n]\n') == [{"b": 2}]
    assert probes.last_json("no json here") is None
