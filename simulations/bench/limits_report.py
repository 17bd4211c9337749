"""The figures of the page's "where the time goes" section: for each target the run did not meet,
the CPU each side spent per job and the rate that cost allows (report.py merges these values).

A ceiling here is one core's worth of a side's CPU per job: 1,000,000 µs divided by the µs a job
cost that side. A worker process is one Python interpreter, so its ceiling is one core's; Redis
runs commands on one thread, so is its. Neither counts the other's turn, which is why a process
that waits for each reply lands below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .formatting import MISSING, num
from .spec import TUNED_SUFFIX
from .targets import BULLMQ, REDELAY, fastest_entry, find


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _ceiling(micros: float | None) -> str:
    return num(1e6 / micros) if micros else MISSING


def _rate(records: Sequence[dict[str, Any]], system: str) -> str:
    record = find(records, system, "immediate") or {}
    return num(_number(record.get("delivered_jobs_per_s")))


def _less(value: float | None, part: float | None) -> float | None:
    return value - part if value is not None and part is not None and value > part else None


def _sides(
    record: dict[str, Any] | None, prefix: str, fill: dict[str, Any] | None = None
) -> dict[str, str]:
    """µs of client and Redis CPU per delivered job (ms per 1,000 jobs is µs per job), and their
    ceilings. An immediate run's figures include filling the queue; with ``fill`` (the batched
    enqueue run, which fills the same way) that part is taken off, leaving delivery's."""
    record, fill = record or {}, fill or {}
    client = _number(record.get("client_cpu_ms_per_1k_jobs"))
    server = _number(record.get("redis_cpu_ms_per_1k_jobs"))
    if fill:
        client = _less(client, _number(fill.get("client_cpu_ms_per_1k_jobs")))
        server = _less(server, _number(fill.get("redis_cpu_ms_per_1k_jobs")))
    return {
        f"{prefix}_client_usec": num(client, 1),
        f"{prefix}_client_ceiling": _ceiling(client),
        f"{prefix}_redis_usec": num(server, 1),
        f"{prefix}_redis_ceiling": _ceiling(server),
    }


# A delayed job's life in "The Redis limit"'s transitions, at the batch sizes the worker uses.
DELAYED_LIFE = (
    "add (100 per call)",
    "carry (1,000 per call)",
    "lease (100 per call)",
    "ack (100 per call)",
)


def _audit_usec(scripts: dict[str, Any]) -> float | None:
    """µs of Redis CPU inside the audit stream's XADDs over a delayed job's life, batched."""
    transitions = scripts.get("transitions") or {}
    found = [transitions[name] for name in DELAYED_LIFE if name in transitions]
    if not found:
        return None
    return sum(float((t.get("inner_usec_per_job") or {}).get("xadd") or 0) for t in found)


def values(results: dict[str, Any]) -> dict[str, str]:
    records: list[dict[str, Any]] = results["records"]
    scripts: dict[str, Any] = (results.get("redis_limit") or {}).get("scripts") or {}
    transitions: dict[str, Any] = scripts.get("transitions") or {}
    best = fastest_entry(records, REDELAY) or {}
    single = find(records, REDELAY, "enqueue-single") or {}
    batch = find(records, REDELAY, "enqueue-batch") or {}
    one_add = _number((transitions.get("add (1 job per call)") or {}).get("usec_per_call"))
    batched_add = _number((transitions.get("add (100 per call)") or {}).get("usec_per_job"))
    single_client = _number(single.get("client_cpu_ms_per_1k_jobs"))
    single_redis = _number(single.get("redis_cpu_ms_per_1k_jobs"))
    batch_client = _number(batch.get("client_cpu_ms_per_1k_jobs"))
    audit = _audit_usec(scripts)
    return {
        "tuned_delivered": _rate(records, REDELAY + TUNED_SUFFIX),
        "bullmq_tuned_delivered": _rate(records, BULLMQ + TUNED_SUFFIX),
        "best_own": str(best.get("system") or MISSING),
        "best_own_delivered": num(_number(best.get("delivered_jobs_per_s"))),
        **_sides(best, "best_own", batch),
        **_sides(find(records, REDELAY + "-store", "immediate"), "store", batch),
        "audit_xadd_usec": num(audit, 1),
        "one_add_script_usec": num(one_add, 1),
        "one_add_redis_usec": num(single_redis, 1),
        "one_add_client_usec": num(single_client, 1),
        "one_add_ceiling": _ceiling(
            single_redis + single_client if single_redis and single_client else None
        ),
        "batched_add_redis_usec": num(batched_add, 1),
        "batched_add_redis_ceiling": _ceiling(batched_add),
        "batched_add_client_usec": num(batch_client, 1),
        "batched_add_client_ceiling": _ceiling(batch_client),
    }
