"""Issue 15's targets for redelay, judged against one run's records.

Each verdict quotes what it was judged on, so a page that says "met" also says by how much. A
target whose scenario did not run in this mode is "not measured", never "met".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

from .spec import TUNED_SUFFIX

PYTHON_PEERS = ("arq", "rq", "dramatiq", "saq", "celery")
REDELAY = "redelay"
BULLMQ = "bullmq"
MEMORY_BYTES = 300  # per pending job, audit stream excluded
LATENESS_P99_MS = 3  # at each of the steady rates below
LATENESS_SCENARIOS = ("steady-1000", "steady-5000")
PENDING_LARGE, PENDING_SMALL = 10_000_000, 10_000
PENDING_RATIO = 0.2  # with 10M pending: within 20% of the same at 10,000
WORKER_COUNTS = (1, 2, 4)
REDIS_SATURATED = 0.9  # Redis this busy (of one core) is the limit: more workers cannot help
# The workers' side is the limit when the cores they may use are this busy: pinned, every worker
# shares the one client core (workers_cpu_utilisation >= CLIENTS_SATURATED); not pinned, they
# share the machine with Redis (machine_cpu_busy >= MACHINE_SATURATED). Either way a further
# process only splits the same CPU.
CLIENTS_SATURATED = 0.9
MACHINE_SATURATED = 0.95


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


def fastest_entry(records: Sequence[dict[str, Any]], system: str) -> dict[str, Any] | None:
    """The faster of a system's default and tuned records on the immediate scenario: each side
    is judged at its best, as its own docs advise tuning it."""
    found = [
        record
        for name in (system, system + TUNED_SUFFIX)
        if (record := find(records, name, "immediate")) is not None
        and _number(record.get("delivered_jobs_per_s")) is not None
    ]
    return max(found, key=lambda r: float(r["delivered_jobs_per_s"]), default=None)


def _best_rate(records: Sequence[dict[str, Any]], system: str) -> tuple[str, float] | None:
    record = fastest_entry(records, system)
    return (record["system"], float(record["delivered_jobs_per_s"])) if record else None


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
    # ms per 1,000 jobs is µs per job. Each of redelay's entries is shown; the lower is judged,
    # as delivery judges each side at its best.
    found = [
        (name, micros)
        for name in (REDELAY, REDELAY + TUNED_SUFFIX)
        if (micros := _number((find(records, name, "burst") or {}).get("redis_cpu_ms_per_1k_jobs")))
        is not None
    ]
    if not found:
        return Verdict(target, "not measured", None)
    measured = "; ".join(f"{name} {micros:.1f} µs" for name, micros in found)
    return Verdict(target, measured, min(micros for _, micros in found) <= 12)


def lateness_of(records: Sequence[dict[str, Any]], system: str) -> tuple[list[str], bool] | None:
    """One system's steady runs as the lateness verdict shows them, and whether they meet it
    (both rates ran, each p99 within the target, none early or missing); None if neither ran."""
    found = [
        record for name in LATENESS_SCENARIOS if (record := find(records, system, name)) is not None
    ]
    if not found:
        return None
    parts, met = [], len(found) == len(LATENESS_SCENARIOS)
    for record in found:
        p99 = _number(record.get("lateness_ms_p99"))
        early = int(record.get("early_deliveries") or 0)
        p99_text = "n/a" if p99 is None else f"{p99:.1f} ms"
        parts.append(f"{record['scenario']}: p99 {p99_text}, {early} early")
        met = (
            met
            and p99 is not None
            and p99 <= LATENESS_P99_MS
            and early == 0
            and not record.get("missing")
        )
    if len(found) < len(LATENESS_SCENARIOS):
        parts.append("the other rate did not run")
    return parts, met


def lateness(records: Sequence[dict[str, Any]]) -> Verdict:
    """Each of redelay's entries is shown; it is met when one of them meets it at both rates,
    as delivery and Redis CPU judge each side at its best."""
    target = "lateness p99 <= 3 ms at steady 1,000 and 5,000 jobs/s, zero early deliveries"
    shown, met_by = [], []
    for system in (REDELAY, REDELAY + TUNED_SUFFIX):
        judged = lateness_of(records, system)
        if judged is None:
            continue
        parts, met = judged
        shown.append(f"{system}: " + ", ".join(parts))
        if met:
            met_by.append(system)
    if not shown:
        return Verdict(target, "not measured", None)
    return Verdict(target, "; ".join(shown), bool(met_by))


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


BATCHED_ADD_FLOOR = 150_000


def best_stream(producers: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fastest DelayQueue.add_stream mode of the producers section (the best of its
    rounds), if any."""
    found = [
        result
        for result in (producers or {}).get("results") or []
        if result.get("call") == "add_stream" and not result.get("is_async")
    ]
    return max(found, key=lambda result: float(result["best_jobs_per_s"])) if found else None


def batched_add(
    records: Sequence[dict[str, Any]], producers: dict[str, Any] | None = None
) -> Verdict:
    """add_many per call (the enqueue scenario) and, when the producers section ran, add_stream:
    the same batches, each sent before the last one's reply is read (the issue's "pipelined
    batches"). Met when either reaches the floor; both figures are shown."""
    target = "`add_many` >= 150,000 jobs/s (one call at a time, or pipelined by `add_stream`)"
    found = _enqueue(records, "enqueue-batch", target, BATCHED_ADD_FLOOR)
    stream = best_stream(producers)
    if stream is None:
        return found
    rate = float(stream["best_jobs_per_s"])
    measured = "add_many not measured" if found.met is None else f"add_many {found.measured}"
    measured += f"; {stream['mode']}: {rate:,.0f} jobs/s (the producers section)"
    return Verdict(target, measured, rate >= BATCHED_ADD_FLOOR or bool(found.met))


def _largest_pending(pending_scale: dict[str, Any]) -> dict[str, Any] | None:
    runs = pending_scale.get("runs") or []
    return max(runs, key=lambda run: int(run["pending"])) if runs else None


def memory(
    records: Sequence[dict[str, Any]], pending_scale: dict[str, Any] | None = None
) -> Verdict:
    """Judged on the enqueue scenario's pending jobs and, when the pending-scale section ran, on
    its largest N too: met only if every figure shown is within the bound."""
    target = "<= 300 bytes of Redis memory per pending job, audit stream excluded"
    figures: list[tuple[str, float]] = []
    record = find(records, REDELAY, "enqueue-batch") or find(records, REDELAY, "enqueue-single")
    without = _number((record or {}).get("redis_memory_bytes_per_pending_job_without_audit"))
    with_audit = _number((record or {}).get("redis_memory_bytes_per_pending_job"))
    parts = []
    if without is not None and with_audit is not None:
        figures.append(("enqueue", without))
        parts.append(f"{without:.0f} B without the audit stream, {with_audit:.0f} B with it")
    largest = _largest_pending(pending_scale or {})
    at_scale = _number(
        (largest or {}).get("memory", {}).get("bytes_per_pending_job_without_stream")
    )
    if largest is not None and at_scale is not None:
        figures.append(("scale", at_scale))
        parts.append(f"{at_scale:.0f} B without it at {int(largest['pending']):,} pending")
    if not figures:
        return Verdict(target, "not measured", None)
    return Verdict(target, "; ".join(parts), all(value <= MEMORY_BYTES for _, value in figures))


def pending(pending_scale: dict[str, Any]) -> Verdict:
    """The pending-scale section's comparison of its largest N with its smallest; a run whose
    sizes are not 10,000,000 against 10,000 (--quick, --tiny) shows its ratios unjudged."""
    target = (
        "with 10,000,000 delayed jobs pending: delivery rate and steady lateness p50 and p99 "
        "within 20% of the same with 10,000 pending"
    )
    comparison = pending_scale.get("comparison") or {}
    ratios = [
        _number(comparison.get(name))
        for name in ("delivery_rate_ratio", "lateness_p50_ratio", "lateness_p99_ratio")
    ]
    if not comparison:
        return Verdict(target, pending_scale.get("skipped") or "not measured", None)
    large, small = int(comparison["large_pending"]), int(comparison["small_pending"])
    shown = ["n/a" if r is None else f"x{r:.2f}" for r in ratios]
    measured = (
        f"{large:,} against {small:,} pending: rate {shown[0]}, p50 {shown[1]}, p99 {shown[2]}"
    )
    if (large, small) != (PENDING_LARGE, PENDING_SMALL):
        return Verdict(target, measured + " (not the target's sizes)", None)
    within = [r is not None and abs(r - 1) <= PENDING_RATIO for r in ratios]
    return Verdict(target, measured, all(within))


def _share(row: dict[str, Any], name: str) -> float:
    """A utilisation of the row, 0 when the row has none (a summary written before it existed)."""
    return float(row.get(name) or 0)


def ceiling(row: dict[str, Any], pinned: bool) -> str | None:
    """Which side's CPU limited one worker count's runs, or None when neither was saturated:
    Redis's core first (it is what the target is about), then the cores the workers could use."""
    if _share(row, "redis_cpu_utilisation") >= REDIS_SATURATED:
        return "Redis's core"
    if pinned and _share(row, "workers_cpu_utilisation") >= CLIENTS_SATURATED:
        return "the workers' core"
    if not pinned and _share(row, "machine_cpu_busy") >= MACHINE_SATURATED:
        return "every core of the machine"
    return None


def first_ceiling(
    rows: Sequence[dict[str, Any]], pinned: bool
) -> tuple[dict[str, Any], str] | None:
    """The row of the fewest processes at which a side's CPU was saturated, and which side."""
    for row in sorted(rows, key=lambda r: int(r["workers"])):
        side = ceiling(row, pinned)
        if side is not None:
            return row, side
    return None


def workers(worker_scale: dict[str, Any]) -> Verdict:
    """Where the ceiling is for 1, 2, 4 worker processes on one Redis: each step up (1 to 2,
    2 to 4) delivers more, unless at the smaller count a side's CPU was already saturated (see
    ceiling), which the verdict names; and every job is delivered exactly once."""
    target = (
        "worker processes 1, 2, 4 on one Redis: each step up delivers more jobs/s until a CPU "
        f"is the ceiling (Redis's core >= {REDIS_SATURATED:.0%} busy, or the workers' cores >= "
        f"{CLIENTS_SATURATED:.0%}), which is named; every job delivered once"
    )
    rows = {int(row["workers"]): row for row in worker_scale.get("summary") or []}
    if not rows:
        return Verdict(target, worker_scale.get("skipped") or "not measured", None)
    pinned = bool(worker_scale.get("pinned"))
    parts = [
        f"{k}: {float(row['delivered_jobs_per_s']):,.0f} jobs/s, Redis "
        f"{float(row['redis_cpu_utilisation']):.0%} busy, workers "
        f"{_share(row, 'workers_cpu_utilisation'):.0%}"
        for k, row in sorted(rows.items())
    ]
    limited = first_ceiling(list(rows.values()), pinned)
    if limited is not None:
        parts.append(f"ceiling: {limited[1]} from {int(limited[0]['workers'])} process(es) on")
    lost = sum(
        int(row.get("missing") or 0) + int(row.get("duplicates") or 0) for row in rows.values()
    )
    if lost:
        parts.append(f"{lost:,} jobs missing or run twice")
    measured = "; ".join(parts)
    if any(k not in rows for k in WORKER_COUNTS):
        return Verdict(target, measured + " (not every count of the target ran)", None)
    steps_met = all(
        float(rows[more]["delivered_jobs_per_s"]) > float(rows[fewer]["delivered_jobs_per_s"])
        or (limited is not None and fewer >= int(limited[0]["workers"]))
        for fewer, more in pairwise(WORKER_COUNTS)
    )
    return Verdict(target, measured, steps_met and not lost)


def judge(
    records: Sequence[dict[str, Any]],
    sweep: Sequence[dict[str, Any]] = (),
    *,
    pending_scale: dict[str, Any] | None = None,
    worker_scale: dict[str, Any] | None = None,
    producers: dict[str, Any] | None = None,
) -> list[Verdict]:
    """`sweep` is accepted for the callers' sake; the targets are judged on the table's rows and
    the scale sections ({} or None: not run, its targets "not measured")."""
    del sweep
    return [
        delivered(records),
        redis_cpu(records),
        lateness(records),
        single_add(records),
        batched_add(records, producers),
        memory(records, pending_scale),
        pending(pending_scale or {}),
        workers(worker_scale or {}),
    ]
