"""The PNG charts of docs/benchmarks.md (matplotlib, from the run's records)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .scenarios import Scenario
from .systems import SYSTEMS


def _systems_in(records: Sequence[dict[str, Any]]) -> list[str]:
    present = {r["system"] for r in records}
    return [s.name for s in SYSTEMS if s.name in present]


def lateness_chart(
    records: Sequence[dict[str, Any]], scenarios: Sequence[Scenario], path: Path
) -> bool:
    """Lateness percentiles of every system in the steady scenarios (one panel per rate).

    Returns False when matplotlib is missing (the page then says so instead of linking it).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steady = [s for s in scenarios if s.kind == "steady"]
    if not steady:
        return False
    figure, axes = plt.subplots(1, len(steady), figsize=(6 * len(steady), 4.5), squeeze=False)
    for axis, scenario in zip(axes[0], steady, strict=True):
        for system in _systems_in(records):
            record = next(
                (r for r in records if r["system"] == system and r["scenario"] == scenario.name),
                None,
            )
            points = (record or {}).get("lateness_ms_quantiles") or []
            if not points:
                continue
            percents = [100 * k / (len(points) - 1) for k in range(len(points))]
            axis.plot(points, percents, label=system, linewidth=1.6)
        axis.set_xscale("symlog", linthresh=1.0)
        axis.set_xlabel("lateness: delivery minus due time (ms, log scale)")
        axis.set_ylabel("% of jobs delivered at most this late")
        delays = f"{scenario.delay_min_ms / 1000:g}-{scenario.delay_max_ms / 1000:g} s"
        axis.set_title(f"steady: {scenario.rate_per_s:,} jobs/s, delays {delays}")
        axis.axvline(5.0, color="grey", linestyle=":", linewidth=1)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def throughput_chart(records: Sequence[dict[str, Any]], path: Path) -> bool:
    """Delivered jobs/s (immediate, burst) and enqueue jobs/s (single, batched) per system."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    systems = _systems_in(records)
    if not systems:
        return False
    panels = (
        ("delivered jobs/s", "delivered_jobs_per_s", ("immediate", "burst")),
        ("enqueue jobs/s", "enqueue_jobs_per_s", ("enqueue-single", "enqueue-batch")),
    )
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for axis, (title, field, scenarios) in zip(axes, panels, strict=True):
        width = 0.8 / len(scenarios)
        highest = 0.0
        for n, scenario in enumerate(scenarios):
            values = []
            for system in systems:
                record = next(
                    (r for r in records if r["system"] == system and r["scenario"] == scenario),
                    None,
                )
                values.append(float((record or {}).get(field) or 0))
            highest = max(highest, *values)
            positions = [x + (n - (len(scenarios) - 1) / 2) * width for x in range(len(systems))]
            axis.bar(positions, values, width=width, label=scenario)
        axis.set_xticks(range(len(systems)), systems, rotation=30, ha="right")
        # A log axis needs a positive value to scale to; a run without these scenarios has none.
        if highest > 0:
            axis.set_yscale("log")
            axis.set_ylabel(title + " (log scale)")
        else:
            axis.set_ylabel(title)
            axis.text(0.5, 0.5, "not measured in this run", transform=axis.transAxes, ha="center")
        axis.set_title(title)
        axis.grid(True, axis="y", which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
