"""The page's simulator sections (10M pending jobs, worker processes, producers) from a run's
results.

Each returns the part of its section that comes from the run: what ran, its tables, and what they
show, every conclusion computed from the figures (a ratio, "yes"/"no") so the text stays true for
any run. A run without the section (``make bench`` leaves them to ``make bench-long``; skipped;
failed) renders as "not measured", never as stale figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from .formatting import MISSING, duration, ms, num, table
from .targets import (
    MACHINE_SATURATED,
    PENDING_RATIO,
    REDIS_SATURATED,
    best_stream,
    first_ceiling,
)

NOT_RUN = (
    "Not measured in this run (`make bench` leaves it to `make bench-long`; or `--no-{flag}`, "
    "or a run without redelay)."
)


def _not_measured(result: dict[str, Any], flag: str) -> str | None:
    if not result:
        return NOT_RUN.format(flag=flag)
    if "skipped" in result:
        return f"Not measured: {result['skipped']} (`{result.get('command', '')}`)."
    return None


def _spread(summary: dict[str, Any], name: str, fmt: Any = num, scale: float = 1.0) -> str:
    """The median, and the range when there were several runs."""
    value = summary.get(name)
    if not isinstance(value, int | float):
        return MISSING
    text = str(fmt(value * scale))
    low, high = summary.get(name + "_range") or (None, None)
    if low is not None and high is not None and low != high:
        text += f" ({fmt(low * scale)}-{fmt(high * scale)})"
    return text


def _ratio(value: Any) -> str:
    return f"x{value:.2f}" if isinstance(value, int | float) else MISSING


def _change(value: Any) -> str:
    """A ratio as a change: x1.43 -> 43% more, x0.83 -> 17% less."""
    if not isinstance(value, int | float):
        return "not measured"
    percent = round(abs(value - 1) * 100)
    return "the same" if percent == 0 else f"{percent}% {'more' if value > 1 else 'less'}"


def _loads(result: dict[str, Any]) -> str:
    start = ", ".join(f"{x:.2f}" for x in result.get("load_average_start") or []) or MISSING
    end = ", ".join(f"{x:.2f}" for x in result.get("load_average_end") or []) or MISSING
    return f"load average {start} at the start, {end} at the end"


def _runs_note(repeat: int, what: str) -> str:
    if repeat <= 1:
        return f"one run per {what}"
    return f"{repeat} runs per {what}, alternated; medians with the range"


def walls(pending: dict[str, Any], workers: dict[str, Any]) -> str:
    """How long each scale section took in this run, for "How it was measured"."""
    parts = []
    for name, result in (("pending jobs", pending), ("worker processes", workers)):
        seconds = result.get("wall_s")
        parts.append(f"{name} {duration(seconds) if seconds is not None else 'not run'}")
    return ", ".join(parts)


# -- ten million pending jobs ----------------------------------------------------------------


def pending_section(result: dict[str, Any]) -> str:
    missing = _not_measured(result, "pending-scale")
    if missing is not None:
        return missing
    runs: list[dict[str, Any]] = result.get("runs") or []
    if not runs:
        return "Not measured: the section recorded no run."
    settings = result.get("settings") or {}
    low, high = settings.get("delay_ms") or (0, 0)
    sizes = " and ".join(num(r["pending"]) for r in runs)
    fills = ", ".join(
        f"{num(r.get('fill_jobs_per_s'))} jobs/s for the {num(r['pending'])}" for r in runs
    )
    intro = (
        f"In this run (`{result.get('command', MISSING)}`; {result.get('pinning', MISSING)}; Redis "
        f"{runs[0].get('redis_version', MISSING)}; {_loads(result)}): N = {sizes}, "
        f"{num(settings.get('deliver_jobs'))} jobs due now, a steady {num(settings.get('rate'))} "
        f"jobs/s for {num(settings.get('seconds'))} s each due {low / 1000:g} to {high / 1000:g} s "
        f"after it was added; {_runs_note(int(settings.get('repeat') or 1), 'N')}. Filled at "
        f"{fills}."
    )
    parts = [intro, pending_table(runs, result.get("comparison") or {}), memory_table(runs)]
    if len(runs) > 1:
        parts.append("What it shows:\n\n" + pending_findings(runs, result["comparison"]))
    return "\n\n".join(parts)


def pending_table(runs: Sequence[dict[str, Any]], comparison: dict[str, Any]) -> str:
    header = [""] + [f"{num(r['pending'])} pending" for r in runs]
    if comparison:
        large, small = num(comparison["large_pending"]), num(comparison["small_pending"])
        header.append(f"{large} / {small}")
    cpu = "redis_cpu_ms_per_1k_jobs"
    cpu_ratio = _cpu_ratio(runs) if comparison else None
    deliver_jobs = num((runs[0].get("immediate_summary") or {}).get("jobs"))
    rows_spec: list[tuple[str, str, str, Any, str | None]] = [
        (f"delivered jobs/s, {deliver_jobs} due now", "immediate", "delivered_jobs_per_s", num, ""),
        ("Redis CPU ms per 1k delivered jobs", "immediate", cpu, _one_digit, ""),
        ("steady lateness p50", "steady", "lateness_ms_p50", ms, ""),
        ("steady lateness p99", "steady", "lateness_ms_p99", ms, ""),
        ("steady lateness max", "steady", "lateness_ms_max", ms, None),
    ]
    ratios = {
        "delivered_jobs_per_s": comparison.get("delivery_rate_ratio"),
        cpu: cpu_ratio,
        "lateness_ms_p50": comparison.get("lateness_p50_ratio"),
        "lateness_ms_p99": comparison.get("lateness_p99_ratio"),
    }
    rows = []
    for label, kind, field, fmt, ratio_cell in rows_spec:
        row = [label] + [_spread(r.get(kind + "_summary") or {}, field, fmt) for r in runs]
        if comparison:
            row.append(_ratio(ratios.get(field)) if ratio_cell is not None else "")
        rows.append(row)
    counts = ["early deliveries, duplicates, missing (steady + due now)"]
    for r in runs:
        im, st = r.get("immediate_summary") or {}, r.get("steady_summary") or {}
        counts.append(
            f"{num(st.get('early_deliveries'))}, "
            f"{num(int(im.get('duplicates') or 0) + int(st.get('duplicates') or 0))}, "
            f"{num(int(im.get('missing') or 0) + int(st.get('missing') or 0))}"
        )
    if comparison:
        counts.append("")
    rows.append(counts)
    return table(header, rows)


def _one_digit(value: Any) -> str:
    return num(value, 1)


def _cpu_ratio(runs: Sequence[dict[str, Any]]) -> float | None:
    first = (runs[0].get("immediate_summary") or {}).get("redis_cpu_ms_per_1k_jobs")
    last = (runs[-1].get("immediate_summary") or {}).get("redis_cpu_ms_per_1k_jobs")
    if not isinstance(first, int | float) or not isinstance(last, int | float) or not first:
        return None
    return float(last) / float(first)


def memory_table(runs: Sequence[dict[str, Any]]) -> str:
    header = ["bytes per pending job"] + [f"{num(r['pending'])} pending" for r in runs]
    memories = [r.get("memory") or {} for r in runs]
    keys = [{k["key"]: k for k in m.get("keys") or []} for m in memories]

    def key_cell(by_key: dict[str, Any], name: str) -> str:
        found = by_key.get(name) or {}
        text = num(found.get("bytes_per_pending_job"), 1)
        if found.get("samples"):
            text += f" (sampled, {num(found.get('elements'))} elements)"
        elif name == "audit" and found:
            text += f" ({num(found.get('elements'))} entries)"
        return text

    def due_cell(by_key: dict[str, Any]) -> str:
        if "due:*" not in by_key:  # runs before the buckets: one `delayed` ZSET
            return key_cell(by_key, "delayed")
        parts = [by_key.get(name) or {} for name in ("due", "due:*")]
        per_job = [p.get("bytes_per_pending_job") for p in parts]
        if not all(isinstance(v, int | float) for v in per_job):
            return MISSING
        return f"{num(sum(per_job), 1)} (the index {num(per_job[0], 1)})"

    def index_cell(memory: dict[str, Any]) -> str:
        text = num(memory.get("bytes_per_pending_job_without_stream_and_index"), 1)
        exact = memory.get("bytes_per_pending_job_without_stream_and_index_exact")
        return text + (f" ({num(exact, 1)} by deleting both)" if exact is not None else "")

    rows = [
        ["in total"] + [num(m.get("bytes_per_pending_job"), 1) for m in memories],
        ["without the audit stream"]
        + [num(m.get("bytes_per_pending_job_without_stream"), 1) for m in memories],
        ["without the stream and its history index (`<prefix>history`)"]
        + [index_cell(m) for m in memories],
        ["of which the job pool (`jobs` HASH)"] + [key_cell(k, "jobs") for k in keys],
        ["the due times (the delayed set: `due` and its buckets `due:<member>`; `delayed` before)"]
        + [due_cell(k) for k in keys],
        ["the audit stream"] + [key_cell(k, "audit") for k in keys],
        ["the history index"] + [key_cell(k, "history") for k in keys],
    ]
    if any("history-previous" in k for k in keys):  # runs since 779cbdd: two generations
        rows.append(["its previous generation"] + [key_cell(k, "history-previous") for k in keys])
    rows += [
        ["in no key (the key space, allocator rounding)"]
        + [num(m.get("rest_bytes_per_pending_job"), 1) for m in memories],
    ]
    return table(header, rows)


def pending_findings(runs: Sequence[dict[str, Any]], comparison: dict[str, Any]) -> str:
    large, small = num(comparison["large_pending"]), num(comparison["small_pending"])
    within = "yes" if comparison.get("within_20_percent") else "no"
    largest = runs[-1]
    per_job = (largest.get("memory") or {}).get("bytes_per_pending_job_without_stream")
    without_index = (largest.get("memory") or {}).get(
        "bytes_per_pending_job_without_stream_and_index"
    )
    lost = sum(
        int((r.get(kind) or {}).get(name) or 0)
        for r in runs
        for kind in ("immediate_summary", "steady_summary")
        for name in ("missing", "duplicates")
    )
    early = sum(int((r.get("steady_summary") or {}).get("early_deliveries") or 0) for r in runs)
    lines = [
        f"- **Delivery rate and steady lateness p50 and p99 within {PENDING_RATIO:.0%} of "
        f"{small} pending, at {large}: {within}.** The rate was "
        f"{_ratio(comparison.get('delivery_rate_ratio'))} "
        f"({_change(comparison.get('delivery_rate_ratio'))}), the median lateness "
        f"{_ratio(comparison.get('lateness_p50_ratio'))}, the p99 "
        f"{_ratio(comparison.get('lateness_p99_ratio'))}.",
        f"- **Redis CPU per delivered job at {large}: {_ratio(_cpu_ratio(runs))}** "
        f"({_change(_cpu_ratio(runs))} than at {small}).",
        f"- **Memory at {large}: {num(per_job, 1)} B per pending job without the audit "
        f"stream**; {num(without_index, 1)} B without the history index either.",
        f"- **Every job delivered once, none early: {'yes' if not lost and not early else 'no'}** "
        f"({lost:,} missing or run twice, {early:,} early, over every run).",
    ]
    return "\n".join(lines)


# -- worker processes on one Redis -----------------------------------------------------------


def worker_section(result: dict[str, Any]) -> str:
    missing = _not_measured(result, "worker-scale")
    if missing is not None:
        return missing
    summary: list[dict[str, Any]] = result.get("summary") or []
    if not summary:
        return "Not measured: the section recorded no run."
    settings = result.get("settings") or {}
    cores = num(result.get("cpus"))
    intro = (
        f"In this run (`{result.get('command', MISSING)}`; {result.get('pinning', MISSING)}; "
        f"{cores} cores; {_loads(result)}): {num(settings.get('jobs'))} jobs due now per run, "
        f"handler concurrency {num(settings.get('concurrency'))} per worker; "
        f"{_runs_note(int(settings.get('repeat') or 1), 'K')}."
    )
    rows = [
        [
            num(s["workers"]),
            _spread(s, "delivered_jobs_per_s"),
            _spread(s, "redis_cpu_us_per_job", _one_digit),
            _spread(s, "redis_cpu_utilisation", _percent, 100),
            _spread(s, "workers_cpu_us_per_job", _one_digit),
            _spread(s, "workers_cpu_utilisation", _percent, 100),
            _spread(s, "machine_cpu_busy", _percent, 100),
        ]
        for s in summary
    ]
    header = [
        "workers",
        "delivered jobs/s",
        "Redis CPU µs/job",
        "Redis busy",
        "workers' CPU µs/job",
        "workers busy",
        f"all {cores} cores busy",
    ]
    findings = "What it shows:\n\n" + worker_findings(summary, bool(result.get("pinned")))
    return "\n\n".join([intro, table(header, rows), findings])


def _percent(value: Any) -> str:
    return f"{num(value)}%" if isinstance(value, int | float) else MISSING


def worker_findings(summary: Sequence[dict[str, Any]], pinned: bool) -> str:
    jobs = sum(int(s.get("jobs") or 0) for s in summary)
    missing = sum(int(s.get("missing") or 0) for s in summary)
    duplicates = sum(int(s.get("duplicates") or 0) for s in summary)
    once = "yes" if not missing and not duplicates else "no"
    lines = [
        f"- **Every job delivered once: {once}** ({jobs:,} jobs over every run, {missing:,} "
        f"missing, {duplicates:,} run twice)."
    ]
    by_count = sorted(summary, key=lambda s: int(s["workers"]))
    steps = [
        f"from {num(fewer['workers'])} to {num(more['workers'])} processes "
        f"{_ratio(_quotient(more, fewer))} ({_change(_quotient(more, fewer))})"
        for fewer, more in pairwise(by_count)
    ]
    if steps:
        lines.append("- **Delivered jobs/s by process count:** " + "; ".join(steps) + ".")
    redis_costs = [float(s["redis_cpu_us_per_job"]) for s in summary]
    busiest = max(summary, key=lambda s: float(s["redis_cpu_utilisation"]))
    busy = float(busiest["redis_cpu_utilisation"])
    limit = (
        f"at least {REDIS_SATURATED:.0%}, so Redis was the limit"
        if busy >= REDIS_SATURATED
        else f"below {REDIS_SATURATED:.0%}, so Redis was not the limit"
    )
    lines.append(
        f"- **Redis: {num(min(redis_costs), 1)} to {num(max(redis_costs), 1)} µs of CPU per job** "
        f"across the process counts, so one Redis core would carry about "
        f"{num(1e6 / max(redis_costs))} to {num(1e6 / min(redis_costs))} jobs/s; it was at most "
        f"{num(busy * 100)}% busy ({num(busiest['workers'])} processes), {limit}."
    )
    lines.append(_ceiling_line(by_count, pinned))
    machine = max(float(s["machine_cpu_busy"]) for s in summary)
    saturated = "yes" if machine >= MACHINE_SATURATED else "no"
    lines.append(
        f"- **Every core of the machine at least {MACHINE_SATURATED:.0%} busy in some run: "
        f"{saturated}** (at most {num(machine * 100)}%, every process on it counted)."
    )
    return "\n".join(lines)


def _ceiling_line(by_count: Sequence[dict[str, Any]], pinned: bool) -> str:
    """The side whose CPU was full first as processes were added (targets.first_ceiling), or
    that none was: then more processes should still have raised the rate."""
    limited = first_ceiling(by_count, pinned)
    if limited is None:
        return "- **The ceiling: not reached**: no side's CPU was full at any process count."
    row, side = limited
    return (
        f"- **The ceiling: {side}**, full from {num(row['workers'])} process(es) on "
        f"(Redis {num(float(row['redis_cpu_utilisation']) * 100)}% busy, the workers "
        f"{num(float(row.get('workers_cpu_utilisation') or 0) * 100)}% of a core)."
    )


def _quotient(more: dict[str, Any], fewer: dict[str, Any]) -> float | None:
    base = float(fewer.get("delivered_jobs_per_s") or 0)
    return float(more["delivered_jobs_per_s"]) / base if base else None


def _producer_label(row: dict[str, Any]) -> str:
    """A producer_speed result as the page names the call it timed."""
    queue = "AsyncDelayQueue" if row["is_async"] else "DelayQueue"
    if row["call"] == "add":
        if row["is_async"]:
            return (
                f"`{queue}.add` from one event loop, {int(row['concurrency']):,} concurrent tasks"
            )
        return f"`{queue}.add` in a loop, one thread"
    unit = "call" if row["call"] == "add_many" else "batch"
    return f"`{queue}.{row['call']}`, {int(row['batch']):,} jobs per {unit}"


def producers_section(result: dict[str, Any]) -> str:
    """What ran, the table (best round of each producer, every round's rate beside it), and how
    add_stream compared with add_many at the same batch size."""
    missing = _not_measured(result, "producers")
    if missing is not None:
        return missing
    found = result.get("results") or []
    load = result.get("load") or []
    loads = ""
    if len(load) >= 4:
        loads = f"; load average {load[0]:.2f} before, {load[3]:.2f} after"
    jobs = found[0]["jobs"] if found else 0
    rounds = len(found[0]["rounds"]) if found else 0
    head = (
        f"In this run (`{result.get('command', '')}`; {result.get('pinning', 'pinning unknown')}"
        f"{loads}): {jobs:,} jobs per producer and round, {rounds} round(s) with the producers "
        "alternated, the best round reported."
    )
    rows = []
    for row in found:
        rates = ", ".join(num(r["jobs_per_s"]) for r in row["rounds"])
        rows.append(
            [
                _producer_label(row),
                f"{num(row['best_jobs_per_s'])} (rounds: {rates})",
                f"{num(row['client_cpu_us_per_job'], 1)} µs",
                f"{num(row['redis_cpu_us_per_job'], 1)} µs",
            ]
        )
    header = ["producer", "jobs/s", "producer CPU per job", "Redis CPU per job"]
    return "\n\n".join([head, table(header, rows), _stream_findings(found)])


def _stream_findings(found: Sequence[dict[str, Any]]) -> str:
    """add_stream against add_many at each batch size both ran."""
    rates: dict[tuple[str, int], float] = {}
    for row in found:
        if not row["is_async"] and row["call"] in ("add_many", "add_stream"):
            rates[(str(row["call"]), int(row["batch"]))] = float(row["best_jobs_per_s"])
    lines = [
        f"- **{size:,} jobs per batch:** `add_stream` {num(rates[('add_stream', size)])} "
        f"jobs/s, `add_many` {num(rates[('add_many', size)])} jobs/s "
        f"(x{rates[('add_stream', size)] / rates[('add_many', size)]:.2f})."
        for size in sorted({size for _, size in rates})
        if ("add_stream", size) in rates and ("add_many", size) in rates
    ]
    return "\n".join(lines) or "No batch size ran both `add_many` and `add_stream`."


def stream_enqueue(result: dict[str, Any]) -> str:
    """One sentence for the enqueue paragraph: add_stream's best rate, or that it did not run."""
    stream = best_stream(result)
    if stream is None:
        return "`add_stream`, which overlaps the two, was not measured in this run."
    return (
        f"`add_stream`, which sends the next batch before it reads the last reply so the two "
        f"overlap, added {num(stream['best_jobs_per_s'])} jobs/s "
        f"({_producer_label(stream)}; [the producers](#the-producers))."
    )
