"""Issue 15's targets for redelay, judged against one run's records.

Each verdict quotes what it was judged on, so a page that says "met" also says by how much. A
target whose scenario did not run in this mode is "not measured", never "met".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .spec import TUNED_SUFFIX

PYTHON_PEERS = ("arq", "rq", "dramatiq", "saq", "celery")
REDELAY = "redelay"
BULLMQ = "bullmq"


@dataclass(frozen=True, slots=True)
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def find(records: Sequence[dict[str, Any]], system: str, scenario: str) -> dict[str, Any] | None:
    for record in records:
        if record.get("system") == system and record.get("scenario") == scenario:
            return record
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _best_rate(records: Sequence[dict[str, Any]], system: str) -> tuple[str, float] | None:
    """The faster of a system's default and tuned entries on the immediate scenario: each side
    is judged at its best, as its own docs advise tuning it."""
    rates = [
        (name, rate)
        for name in (system, system + TUNED_SUFFIX)
        if (record := find(records, name, "immediate")) is not None
        and (rate := _number(record.get("delivered_jobs_per_s"))) is not None
    ]
    return max(rates, key=lambda item: item[1]) if rates else None


def delivered(records: Sequence[dict[str, Any]]) -> Verdict:
    target = (
        "delivered >= 40,000 jobs/s (one worker process, no-op handler, audit on), "
        "ahead of BullMQ in the same run"
    )
    own = _best_rate(records, REDELAY)
    if own is None:
        return Verdict(target, "not measured", None)
    own_name, rate = own
    measured = f"{own_name} {rate:,.0f} jobs/s"
    peer = _best_rate(records, BULLMQ)
    if peer is None:
        return Verdict(target, measured + "; BullMQ did not run", None)
    peer_name, peer_rate = peer
    measured += f"; {peer_name} {peer_rate:,.0f} jobs/s ({rate / peer_rate:.2f}x)"
    return Verdict(target, measured, rate >= 40_000 and rate > peer_rate)


def redis_cpu(records: Sequence[dict[str, Any]]) -> Verdict:
    target = "<= 12 µs of Redis CPU per delivered job (delayed job, audit on)"
    record = find(records, REDELAY, "burst")
    # ms per 1,000 jobs is µs per job.
    micros = _number(record and record.get("redis_cpu_ms_per_1k_jobs"))
    if micros is None:
        return Verdict(target, "not measured", None)
    return Verdict(target, f"{micros:.1f} µs", micros <= 12)


def lateness(records: Sequence[dict[str, Any]]) -> Verdict:
    target = "lateness p99 <= 3 ms at steady 1,000 and 5,000 jobs/s, zero early deliveries"
    wanted = ("steady-1000", "steady-5000")
    found = [record for name in wanted if (record := find(records, REDELAY, name)) is not None]
    if not found:
        return Verdict(target, "not measured", None)
    parts, met = [], len(found) == len(wanted)
    for record in found:
        p99 = _number(record.get("lateness_ms_p99"))
        early = int(record.get("early_deliveries") or 0)
        shown = "n/a" if p99 is None else f"{p99:.1f} ms"
        parts.append(f"{record['scenario']}: p99 {shown}, {early} early")
        met = met and p99 is not None and p99 <= 3 and early == 0 and not record.get("missing")
    if len(found) < len(wanted):
        parts.append("the other rate did not run")
    return Verdict(target, "; ".join(parts), met)


def _enqueue(
    records: Sequence[dict[str, Any]], scenario: str, target: str, floor: float
) -> Verdict:
    record = find(records, REDELAY, scenario)
    rate = _number(record and record.get("enqueue_jobs_per_s"))
    if rate is None:
        return Verdict(target, "not measured", None)
    return Verdict(target, f"{rate:,.0f} jobs/s", rate >= floor)


def single_add(records: Sequence[dict[str, Any]]) -> Verdict:
    return _enqueue(records, "enqueue-single", "one `add` from one thread >= 20,000 jobs/s", 20_000)


def batched_add(records: Sequence[dict[str, Any]]) -> Verdict:
    return _enqueue(records, "enqueue-batch", "`add_many` >= 150,000 jobs/s", 150_000)


def memory(records: Sequence[dict[str, Any]]) -> Verdict:
    target = "<= 300 bytes of Redis memory per pending job, audit stream excluded"
    record = find(records, REDELAY, "enqueue-batch") or find(records, REDELAY, "enqueue-single")
    if record is None:
        return Verdict(target, "not measured", None)
    without = _number(record.get("redis_memory_bytes_per_pending_job_without_audit"))
    with_audit = _number(record.get("redis_memory_bytes_per_pending_job"))
    if without is None or with_audit is None:
        return Verdict(target, "not measured", None)
    measured = f"{without:.0f} B without the audit stream, {with_audit:.0f} B with it"
    return Verdict(target, measured, without <= 300)


def judge(records: Sequence[dict[str, Any]], sweep: Sequence[dict[str, Any]] = ()) -> list[Verdict]:
    """`sweep` is accepted for the callers' sake; the targets are judged on the table's rows."""
    del sweep
    return [
        delivered(records),
        redis_cpu(records),
        lateness(records),
        single_add(records),
        batched_add(records),
        memory(records),
    ]
