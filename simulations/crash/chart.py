"""A PNG of lateness over time with the faults marked, for when a picture says it faster.

Needs matplotlib (the ``sim`` extra: ``pip install '.[sim]'`` in a redelay checkout); without it
the chart is skipped with a message and everything else still runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .checkers import LatenessPoint
from .ledger import FaultRow

# One colour per fault kind, stable across runs (matplotlib's tab10 palette, by name).
_FAULT_COLOURS = [
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
    "tab:green",
]


def draw(
    points: Sequence[LatenessPoint],
    faults: Sequence[FaultRow],
    start_ms: int,
    path: Path,
    title: str,
    time_unit: str = "h",
) -> str:
    """Writes the chart to ``path``. Returns a line for the summary (where it is, or why not)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "skipped: matplotlib is not installed (the sim extra: pip install matplotlib, or "
            "pip install '.[sim]' in a redelay checkout)"
        )

    divisor = 3_600_000 if time_unit == "h" else 1_000
    figure, axes = plt.subplots(figsize=(12, 5), dpi=100)
    for after, colour, label in (
        (False, "tab:blue", "calm"),
        (True, "tab:orange", "after a fault"),
    ):
        chosen = [p for p in points if p.after_fault is after]
        if chosen:
            axes.scatter(
                [(p.due_ms - start_ms) / divisor for p in chosen],
                [max(p.lateness_ms, 0) for p in chosen],
                s=6,
                c=colour,
                label=f"{label} ({len(chosen)} runs)",
                alpha=0.6,
                linewidths=0,
            )
    # Handler faults touch one job: small marks at the bottom. The others: a line each.
    local = [f for f in faults if f.kind.startswith("handler_")]
    if local:
        axes.scatter(
            [(f.at_ms - start_ms) / divisor for f in local],
            [0] * len(local),
            marker="^",
            s=18,
            c="black",
            label=f"handler hang ({len(local)})",
        )
    kinds = sorted({f.kind for f in faults if not f.kind.startswith("handler_")})
    for n, kind in enumerate(kinds):
        colour = _FAULT_COLOURS[n % len(_FAULT_COLOURS)]
        times = [(f.at_ms - start_ms) / divisor for f in faults if f.kind == kind]
        for m, at in enumerate(times):
            axes.axvline(
                at,
                color=colour,
                linewidth=0.8,
                alpha=0.5,
                label=f"{kind} ({len(times)})" if m == 0 else None,
            )
    axes.set_yscale("symlog", linthresh=1)
    axes.set_ylim(bottom=0)
    axes.set_xlabel(f"due time ({'hours' if time_unit == 'h' else 'seconds'} since start)")
    axes.set_ylabel("lateness: start of the run minus due time (ms)")
    axes.set_title(title)
    axes.legend(loc="upper left", fontsize="small", ncol=2)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return str(path)
