"""Every record's figures as ratios: to BullMQ's in the same run, and to the run's floor.

On a shared machine an absolute figure moves 2-3x between hosts of the same kind and between
hours; two systems measured side by side, interleaved, move together. So a record's figures are
divided by BullMQ's for the same scenario (a system's defaults by BullMQ's defaults, a "-tuned"
entry by BullMQ tuned), and by the floor point measured just before its scenario's round
(floor.py: an empty script call on the same client and socket).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .spec import TUNED_SUFFIX

BULLMQ = "bullmq"
# The figures compared with BullMQ's; for each, whether more is better (the page says "x faster"
# or "x the cost" from it).
VERSUS_BULLMQ = {
    "delivered_jobs_per_s": True,
    "enqueue_jobs_per_s": True,
    "client_cpu_ms_per_1k_jobs": False,
    "redis_cpu_ms_per_1k_jobs": False,
    "lateness_ms_p50": False,
    "lateness_ms_p99": False,
    "redis_memory_bytes_per_pending_job": False,
}


def peer_of(system: str) -> str:
    """The BullMQ entry a system is compared with: tuned with tuned, defaults with defaults."""
    return BULLMQ + TUNED_SUFFIX if system.endswith(TUNED_SUFFIX) else BULLMQ


def _positive(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def ratio(value: Any, base: Any) -> float | None:
    """value / base, rounded, or None unless both are positive numbers."""
    top, bottom = _positive(value), _positive(base)
    return round(top / bottom, 3) if top is not None and bottom is not None else None


def versus_bullmq(record: dict[str, Any], records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each VERSUS_BULLMQ field of ``record`` over its BullMQ entry's in the same scenario."""
    wanted = (peer_of(record["system"]), record["scenario"])
    peer = next((r for r in records if (r["system"], r["scenario"]) == wanted), None)
    if peer is None:
        return {}
    found = {name: ratio(record.get(name), peer.get(name)) for name in VERSUS_BULLMQ}
    return {name: value for name, value in found.items() if value is not None}


def versus_floor(record: dict[str, Any], floor: dict[str, Any]) -> dict[str, float]:
    """A job's CPU on each side in empty script calls (ms per 1k jobs is µs per job), and the
    rate as a share of the empty calls one client makes per second."""
    rate_field = "delivered_jobs_per_s" if record.get("delivered") is not None else None
    rate_field = rate_field or "enqueue_jobs_per_s"
    found = {
        "client_cpu_per_job": ratio(
            record.get("client_cpu_ms_per_1k_jobs"), floor.get("client_us_per_call")
        ),
        "redis_cpu_per_job": ratio(
            record.get("redis_cpu_ms_per_1k_jobs"), floor.get("redis_us_per_call")
        ),
        "jobs_per_s": ratio(record.get(rate_field), floor.get("calls_per_s")),
    }
    return {name: value for name, value in found.items() if value is not None}


def attach(records: list[dict[str, Any]]) -> None:
    """Writes each record's ``ratios`` (to BullMQ, and to its round's ``floor`` if it has one)."""
    for record in records:
        record["ratios"] = {
            "bullmq": versus_bullmq(record, records),
            "floor": versus_floor(record, record.get("floor") or {}),
        }
