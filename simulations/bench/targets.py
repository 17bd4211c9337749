"""Issue 15's targets for redelay, written as ratios and judged against one run's records.

An absolute figure moves 2-3x between shared hosts of the same kind; a ratio between two systems
measured side by side in one run does not. So every target compares redelay with BullMQ in the
same run, or with the run's floor (an empty script call, floor.py), or with itself at another
size (the scale sections). Each verdict quotes what it was judged on, so a page that says "met"
also says by how much. A target whose scenario did not run is "not measured", never "met".
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
# redelay's best entry against BullMQ's best entry in the same run: at least as fast to deliver
# and to add in batches, at most as costly in Redis CPU, lateness p99 and memory per job.
VERSUS_BULLMQ = 1.0
# One `add` is one script call and its round trip: at least this share of the empty calls one
# client makes per second on the same socket (the floor, measured in the same run).
SINGLE_ADD_OF_FLOOR = 0.5
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


def _ratio_text(value: float) -> str:
    return f"{value:.2f}x"


def delivered(records: Sequence[dict[str, Any]]) -> Verdict:
    target = (
        f"delivered jobs/s (one worker process, no-op handler, audit on) >= {VERSUS_BULLMQ:g}x "
        "BullMQ's in the same run, each at its best entry"
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
    ratio = rate / peer_rate
    measured = f"{_ratio_text(ratio)} ({measured}; {peer_name} {peer_rate:,.0f} jobs/s)"
    return Verdict(target, measured, ratio >= VERSUS_BULLMQ)


def _lowest(
    records: Sequence[dict[str, Any]], system: str, scenario: str, field: str
) -> tuple[str, float] | None:
    """The lower of a system's default and tuned entries' ``field`` in ``scenario``."""
    found = [
        (name, value)
        for name in (system, system + TUNED_SUFFIX)
        if (value := _number((find(records, name, scenario) or {}).get(field))) is not None
    ]
    return min(found, key=lambda item: item[1], default=None)


def redis_cpu(records: Sequence[dict[str, Any]]) -> Verdict:
    target = (
        f"Redis CPU per delivered delayed job (burst, audit on) <= {VERSUS_BULLMQ:g}x BullMQ's, "
        "each at its best entry"
    )
    # ms per 1,000 jobs is µs per job.
    own = _lowest(records, REDELAY, "burst", "redis_cpu_ms_per_1k_jobs")
    if own is None:
        return Verdict(target, "not measured", None)
    measured = f"{own[0]} {own[1]:.1f} µs"
    peer = _lowest(records, BULLMQ, "burst", "redis_cpu_ms_per_1k_jobs")
    if peer is None:
        return Verdict(target, measured + "; BullMQ did not run", None)
    ratio = own[1] / peer[1]
    measured = f"{_ratio_text(ratio)} ({measured}; {peer[0]} {peer[1]:.1f} µs)"
    return Verdict(target, measured, ratio <= VERSUS_BULLMQ)


def _clean_p99(records: Sequence[dict[str, Any]], system: str, scenario: str) -> float | None:
    """A steady run's p99, or None when it did not run, delivered early, or missed jobs (its
    p99 would then be a lower bound)."""
    record = find(records, system, scenario)
    if record is None or record.get("early_deliveries") or record.get("missing"):
        return None
    return _number(record.get("lateness_ms_p99"))


def lateness_of(records: Sequence[dict[str, Any]], system: str) -> tuple[list[str], bool] | None:
    """One system's steady runs as the lateness verdict shows them, and whether each ran with
    none early or missing and a p99 within VERSUS_BULLMQ of BullMQ's best at that rate; None if
    neither rate ran."""
    found = [
        record for name in LATENESS_SCENARIOS if (record := find(records, system, name)) is not None
    ]
    if not found:
        return None
    parts, met = [], len(found) == len(LATENESS_SCENARIOS)
    for record in found:
        p99 = _number(record.get("lateness_ms_p99"))
        early = int(record.get("early_deliveries") or 0)
        peers = [
            value
            for name in (BULLMQ, BULLMQ + TUNED_SUFFIX)
            if (value := _clean_p99(records, name, record["scenario"])) is not None
        ]
        ratio = p99 / min(peers) if p99 is not None and peers else None
        shown = "n/a" if p99 is None else f"{p99:.2f} ms"
        versus = (
            "no BullMQ run delivered every job on time"
            if ratio is None
            else f"{_ratio_text(ratio)} BullMQ's best"
        )
        parts.append(f"{record['scenario']}: p99 {shown} ({versus}), {early} early")
        met = (
            met
            and ratio is not None
            and ratio <= VERSUS_BULLMQ
            and early == 0
            and not record.get("missing")
        )
    if len(found) < len(LATENESS_SCENARIOS):
        parts.append("the other rate did not run")
    return parts, met


def lateness(records: Sequence[dict[str, Any]]) -> Verdict:
    """Each of redelay's entries is shown; it is met when one of them meets it at both rates,
    as delivery and Redis CPU judge each side at its best."""
    target = (
        f"lateness p99 at steady 1,000 and 5,000 jobs/s <= {VERSUS_BULLMQ:g}x BullMQ's best, "
        "zero early deliveries"
    )
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


def single_add(records: Sequence[dict[str, Any]]) -> Verdict:
    target = (
        f"one `add` from one thread >= {SINGLE_ADD_OF_FLOOR:g}x the empty script calls/s of "
        "the same client (the floor)"
    )
    record = find(records, REDELAY, "enqueue-single")
    rate = _number((record or {}).get("enqueue_jobs_per_s"))
    floor = _number(((record or {}).get("floor") or {}).get("calls_per_s"))
    if record is None or rate is None:
        return Verdict(target, "not measured", None)
    if floor is None:
        return Verdict(target, f"{rate:,.0f} jobs/s; no floor measured", None)
    ratio = rate / floor
    measured = f"{_ratio_text(ratio)} ({rate:,.0f} adds/s; floor {floor:,.0f} calls/s)"
    return Verdict(target, measured, ratio >= SINGLE_ADD_OF_FLOOR)


def best_stream(producers: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fastest DelayQueue.add_stream mode of the producers section (the best of its
    rounds), if any."""
    found = [
        result
        for result in (producers or {}).get("results") or []
        if result.get("call") == "add_stream" and not result.get("is_async")
    ]
    return max(found, key=lambda result: float(result["best_jobs_per_s"])) if found else None


def _best_enqueue(records: Sequence[dict[str, Any]], system: str) -> tuple[str, float] | None:
    found = [
        (name, value)
        for name in (system, system + TUNED_SUFFIX)
        if (
            value := _number((find(records, name, "enqueue-batch") or {}).get("enqueue_jobs_per_s"))
        )
        is not None
    ]
    return max(found, key=lambda item: item[1], default=None)


def batched_add(
    records: Sequence[dict[str, Any]], producers: dict[str, Any] | None = None
) -> Verdict:
    """add_many, one call at a time (the enqueue scenario), against BullMQ's addBulk; when the
    producers section ran (make bench-long), add_stream's best is shown beside it."""
    target = f"`add_many` jobs/s >= {VERSUS_BULLMQ:g}x BullMQ's `addBulk`, each at its best entry"
    own = _best_enqueue(records, REDELAY)
    stream = best_stream(producers)
    shown = f"{own[0]} {own[1]:,.0f} jobs/s" if own is not None else "add_many not measured"
    if stream is not None:
        stream_rate = float(stream["best_jobs_per_s"])
        shown += f"; {stream['mode']}: {stream_rate:,.0f} jobs/s (the producers section)"
    if own is None:
        return Verdict(target, shown if stream is not None else "not measured", None)
    measured = shown
    peer = _best_enqueue(records, BULLMQ)
    if peer is None:
        return Verdict(target, measured + "; BullMQ did not run", None)
    ratio = own[1] / peer[1]
    measured = f"{_ratio_text(ratio)} ({measured}; {peer[0]} {peer[1]:,.0f} jobs/s)"
    return Verdict(target, measured, ratio >= VERSUS_BULLMQ)


def _largest_pending(pending_scale: dict[str, Any]) -> dict[str, Any] | None:
    runs = pending_scale.get("runs") or []
    return max(runs, key=lambda run: int(run["pending"])) if runs else None


def memory(
    records: Sequence[dict[str, Any]], pending_scale: dict[str, Any] | None = None
) -> Verdict:
    """Judged on the enqueue scenario's pending jobs against BullMQ's; when the pending-scale
    section ran (make bench-long), its largest N is shown beside it."""
    target = (
        f"Redis memory per pending job, audit stream excluded, <= {VERSUS_BULLMQ:g}x BullMQ's "
        "(~100-byte bodies)"
    )
    record = find(records, REDELAY, "enqueue-batch") or find(records, REDELAY, "enqueue-single")
    without = _number((record or {}).get("redis_memory_bytes_per_pending_job_without_audit"))
    with_audit = _number((record or {}).get("redis_memory_bytes_per_pending_job"))
    if without is None or with_audit is None:
        return Verdict(target, "not measured", None)
    parts = [f"{without:.0f} B without the audit stream, {with_audit:.0f} B with it"]
    largest = _largest_pending(pending_scale or {})
    at_scale = _number(
        (largest or {}).get("memory", {}).get("bytes_per_pending_job_without_stream")
    )
    if largest is not None and at_scale is not None:
        parts.append(f"{at_scale:.0f} B without it at {int(largest['pending']):,} pending")
    peer = find(records, BULLMQ, "enqueue-batch") or find(records, BULLMQ, "enqueue-single")
    peer_bytes = _number((peer or {}).get("redis_memory_bytes_per_pending_job"))
    if peer_bytes is None:
        return Verdict(target, "; ".join(parts) + "; BullMQ did not run", None)
    ratio = without / peer_bytes
    measured = f"{_ratio_text(ratio)} ({'; '.join(parts)}; BullMQ {peer_bytes:.0f} B)"
    return Verdict(target, measured, ratio <= VERSUS_BULLMQ)


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
