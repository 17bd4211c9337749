"""Issue 6's targets for redelay, judged against one run's records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

PYTHON_PEERS = ("arq", "rq", "dramatiq", "saq", "celery")
REDELAY = "redelay"


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


def delivered(records: Sequence[dict[str, Any]], sweep: Sequence[dict[str, Any]] = ()) -> Verdict:
    """Judged on the table's configuration (concurrency 10, as the peers get); the sweep's best
    rate is quoted alongside, since the peers were not swept."""
    target = (
        "delivered > 20,000 jobs/s (one process, no-op handler, audit on), "
        ">= 3x the fastest Python peer"
    )
    own = find(records, REDELAY, "immediate")
    rate = _number(own and own.get("delivered_jobs_per_s"))
    peers = {
        name: _number(record.get("delivered_jobs_per_s"))
        for name in PYTHON_PEERS
        if (record := find(records, name, "immediate")) is not None
    }
    known = {name: value for name, value in peers.items() if value is not None}
    if rate is None or not known:
        return Verdict(target, "not measured", None)
    best_name, best = max(known.items(), key=lambda item: item[1])
    ratio = rate / best if best else float("inf")
    measured = (
        f"{rate:,.0f} jobs/s; fastest Python peer {best_name} {best:,.0f} jobs/s ({ratio:.1f}x)"
    )
    swept = [row for row in sweep if _number(row.get("delivered_jobs_per_s")) is not None]
    same = [row for row in swept if row.get("concurrency") == 10]
    if same:  # the same setting measured again later in the run: how much the rate moves
        measured += f"; {float(same[0]['delivered_jobs_per_s']):,.0f} jobs/s in the sweep's rerun"
    if swept:
        top = max(swept, key=lambda row: float(row["delivered_jobs_per_s"]))
        measured += (
            f"; {float(top['delivered_jobs_per_s']):,.0f} jobs/s with handler concurrency "
            f"{int(top['concurrency']):,}"
        )
    return Verdict(target, measured, rate > 20_000 and ratio >= 3)


def lateness(records: Sequence[dict[str, Any]]) -> Verdict:
    target = "steady load: lateness p99 < 5 ms, zero early deliveries"
    parts, met = [], True
    steady = [
        r for r in records if r.get("system") == REDELAY and r["scenario"].startswith("steady")
    ]
    if not steady:
        return Verdict(target, "not measured", None)
    for record in steady:
        p99 = _number(record.get("lateness_ms_p99"))
        early = int(record.get("early_deliveries") or 0)
        shown = "n/a" if p99 is None else f"{p99:.1f} ms"
        parts.append(f"{record['scenario']}: p99 {shown}, {early} early")
        met = met and p99 is not None and p99 < 5 and early == 0 and not record.get("missing")
    return Verdict(target, "; ".join(parts), met)


def commands(records: Sequence[dict[str, Any]]) -> Verdict:
    target = "<= 4 Redis commands per delivered job, amortized"
    found = [
        r
        for r in records
        if r.get("system") == REDELAY and r.get("redis_commands_per_delivered_job") is not None
    ]
    if not found:
        return Verdict(target, "not measured", None)
    worst = max(float(r["redis_commands_per_delivered_job"]) for r in found)
    trips = [
        float(r["redis_round_trips_per_delivered_job"])
        for r in found
        if r.get("redis_round_trips_per_delivered_job") is not None
    ]
    measured = f"up to {worst:.1f} counting the commands inside scripts"
    if trips:
        measured += f"; {max(trips):.2f} script calls and other client commands"
    return Verdict(target, measured, worst <= 4)


def memory(records: Sequence[dict[str, Any]]) -> Verdict:
    target = "<= 400 bytes of Redis memory per pending job, audit stream excluded"
    record = find(records, REDELAY, "enqueue-batch") or find(records, REDELAY, "enqueue-single")
    if record is None:
        return Verdict(target, "not measured", None)
    without = _number(record.get("redis_memory_bytes_per_pending_job_without_audit"))
    with_audit = _number(record.get("redis_memory_bytes_per_pending_job"))
    if without is None or with_audit is None:
        return Verdict(target, "not measured", None)
    measured = f"{without:.0f} B without the audit stream, {with_audit:.0f} B with it"
    return Verdict(target, measured, without <= 400)


def batched_enqueue(records: Sequence[dict[str, Any]]) -> Verdict:
    target = "batched enqueue > 100,000 jobs/s"
    record = find(records, REDELAY, "enqueue-batch")
    rate = _number(record and record.get("enqueue_jobs_per_s"))
    if rate is None:
        return Verdict(target, "not measured", None)
    return Verdict(target, f"{rate:,.0f} jobs/s", rate > 100_000)


def judge(records: Sequence[dict[str, Any]], sweep: Sequence[dict[str, Any]] = ()) -> list[Verdict]:
    return [
        delivered(records, sweep),
        lateness(records),
        commands(records),
        memory(records),
        batched_enqueue(records),
    ]
