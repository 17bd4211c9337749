"""Percentiles and the other small numbers a record is made of."""

from __future__ import annotations

import math
from collections.abc import Sequence

QUANTILE_POINTS = 101  # 0%, 1%, ... 100%: enough for the chart, small enough for the JSON


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (inf when it falls on a missing job)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def lateness_summary(lateness_ms: Sequence[float], missing: int) -> dict[str, float | int | None]:
    """p50, p99, max and early count; jobs never delivered count as infinitely late.

    A percentile that lands on a missing job is reported as None: the true value is at least the
    time the runner waited, and the record says how many were missing.
    """
    values = sorted(lateness_ms) + [math.inf] * missing

    def finite(x: float) -> float | None:
        return None if math.isinf(x) or math.isnan(x) else round(x, 3)

    return {
        "lateness_ms_p50": finite(percentile(values, 0.50)),
        "lateness_ms_p99": finite(percentile(values, 0.99)),
        "lateness_ms_max": finite(values[-1]) if values else None,
        "early_deliveries": sum(1 for x in lateness_ms if x < 0),
    }


def quantiles(lateness_ms: Sequence[float]) -> list[float]:
    values = sorted(lateness_ms)
    if not values:
        return []
    last = len(values) - 1
    return [round(values[round(last * k / (QUANTILE_POINTS - 1))], 3) for k in range(101)]


def per_1k(amount: float, jobs: int) -> float | None:
    return None if jobs <= 0 else round(amount * 1000 / jobs, 2)


def per_job(amount: float, jobs: int) -> float | None:
    return None if jobs <= 0 else round(amount / jobs, 2)
