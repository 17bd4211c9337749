"""How the page writes numbers, durations and tables (report.py and scale_report.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MISSING = "—"


def num(value: Any, digits: int = 0) -> str:
    if not isinstance(value, int | float) or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{value:,.{digits}f}"


def ms(value: Any) -> str:
    if not isinstance(value, int | float):
        return MISSING
    if abs(value) >= 1000:
        return f"{value / 1000:,.2f} s"
    return f"{value:,.1f} ms" if abs(value) >= 10 else f"{value:.2f} ms"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def duration(seconds: Any) -> str:
    """A section's or a run's wall time: seconds under two minutes, else minutes."""
    if not isinstance(seconds, int | float):
        return "a time not recorded"
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.0f} minutes"
