"""The benchmark page's charts draw from whatever records a run has, without matplotlib warnings."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from simulations.bench import chart


def test_a_throughput_panel_with_no_measured_value_is_drawn_without_a_log_scale(
    tmp_path: Path,
) -> None:
    """A run without the enqueue scenarios has nothing to put on that panel's log axis, which
    matplotlib warns about; the panel is drawn linear and says it was not measured."""
    pytest.importorskip("matplotlib")
    records = [
        {"system": "redelay", "scenario": "immediate", "delivered_jobs_per_s": 10_000.0},
        {"system": "redelay", "scenario": "burst", "delivered_jobs_per_s": 9_000.0},
    ]
    path = tmp_path / "throughput.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert chart.throughput_chart(records, path)
    assert path.read_bytes().startswith(b"\x89PNG")
