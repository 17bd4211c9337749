"""The run's outputs: the JSON of every record, and docs/benchmarks.md from template.md.

The page is a ``string.Template``: ``$name`` placeholders are filled with tables and numbers built
here from the run's results, so the prose and the figures always come from the same run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from string import Template
from typing import Any

from . import limits_report, scale_report, speed_reference, targets
from .formatting import MISSING, duration, ms, num, table
from .systems import SYSTEMS
from .targets import PYTHON_PEERS, find

TEMPLATE_PATH = Path(__file__).resolve().parent / "template.md"


# -- machine and versions ------------------------------------------------------------------


def _command_output(args: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def versions() -> dict[str, Any]:
    found: dict[str, Any] = {
        system.name: system.versions() for system in SYSTEMS if not system.is_node
    }
    node = shutil.which("node")
    if node:
        found["node"] = _command_output([node, "--version"]).lstrip("v")
        package = Path(__file__).resolve().parent / "node" / "node_modules" / "bullmq"
        try:
            bullmq = json.loads((package / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            bullmq = "not installed"
        found["bullmq"] = {"bullmq": bullmq}
    server = shutil.which("redis-server")
    if server:
        found["redis-server"] = _command_output([server, "--version"])
    return found


def _systems(records: Sequence[dict[str, Any]]) -> list[str]:
    present = {r["system"] for r in records}
    return [s.name for s in SYSTEMS if s.name in present]


def _late(record: dict[str, Any] | None, field: str) -> str:
    if record is None:
        return MISSING
    if record.get(field) is None and record.get("missing"):
        return f"> wait ({record['missing']:,} missing)"
    return ms(record.get(field))


def _ceiling(record: dict[str, Any] | None) -> str:
    """Jobs/s at which Redis would be 100% busy, from its measured CPU per job."""
    cpu = (record or {}).get("redis_cpu_ms_per_1k_jobs")
    if not isinstance(cpu, int | float) or cpu <= 0:
        return MISSING
    return num(1_000_000 / cpu)


# -- tables --------------------------------------------------------------------------------


def delivery_table(records: Sequence[dict[str, Any]]) -> str:
    rows = []
    for system in _systems(records):
        now, burst = find(records, system, "immediate"), find(records, system, "burst")
        if now is None and burst is None:
            continue
        now = now or {}
        rows.append(
            [
                f"**{system}**" if system == "redelay" else system,
                num(now.get("delivered_jobs_per_s")),
                num((burst or {}).get("delivered_jobs_per_s")),
                _late(burst, "lateness_ms_p50"),
                _late(burst, "lateness_ms_p99"),
                _late(burst, "lateness_ms_max"),
                num((burst or {}).get("early_deliveries")),
                num(now.get("redis_commands_per_delivered_job"), 1),
                num(now.get("redis_script_calls_per_delivered_job"), 2),
                num(now.get("client_cpu_ms_per_1k_jobs"), 1),
                num(now.get("redis_cpu_ms_per_1k_jobs"), 1),
                _ceiling(now),
            ]
        )
    header = [
        "system",
        "immediate: delivered jobs/s",
        "burst: delivered jobs/s",
        "burst lateness p50",
        "p99",
        "max",
        "early",
        "Redis commands / job",
        "of which script calls",
        "client CPU ms / 1k jobs",
        "Redis CPU ms / 1k jobs",
        "Redis-bound ceiling, jobs/s",
    ]
    return table(header, rows)


def steady_table(records: Sequence[dict[str, Any]], scenario: str) -> str:
    rows = []
    for system in _systems(records):
        record = find(records, system, scenario)
        if record is None:
            continue
        rows.append(
            [
                f"**{system}**" if system == "redelay" else system,
                num(record.get("enqueue_jobs_per_s")),
                _late(record, "lateness_ms_p50"),
                _late(record, "lateness_ms_p99"),
                _late(record, "lateness_ms_max"),
                num(record.get("early_deliveries")),
                f"{num(record.get('delivered'))} / {num(record.get('jobs'))}",
                num(record.get("redis_commands_per_delivered_job"), 1),
                num(record.get("client_cpu_ms_per_1k_jobs"), 1),
                num(record.get("redis_cpu_ms_per_1k_jobs"), 1),
            ]
        )
    header = [
        "system",
        "added jobs/s",
        "lateness p50",
        "p99",
        "max",
        "early",
        "delivered",
        "Redis commands / job",
        "client CPU ms / 1k",
        "Redis CPU ms / 1k",
    ]
    return table(header, rows)


def _memory(record: dict[str, Any] | None) -> str:
    if record is None:
        return MISSING
    with_audit = num(record.get("redis_memory_bytes_per_pending_job"))
    without = record.get("redis_memory_bytes_per_pending_job_without_audit")
    if without is None:
        return with_audit
    return f"{num(without)} ({with_audit} with audit)"


def enqueue_table(records: Sequence[dict[str, Any]]) -> str:
    rows = []
    for system in _systems(records):
        single = find(records, system, "enqueue-single")
        batch = find(records, system, "enqueue-batch")
        if single is None and batch is None:
            continue
        batch_api = (batch or single or {}).get("enqueue_batch_api")
        rows.append(
            [
                f"**{system}**" if system == "redelay" else system,
                num((single or {}).get("enqueue_jobs_per_s")),
                num((batch or {}).get("enqueue_jobs_per_s")) if batch else "no batch API",
                batch_api or MISSING,
                num((single or {}).get("redis_commands_per_enqueued_job"), 1),
                num((single or {}).get("client_cpu_ms_per_1k_jobs"), 1),
                num((batch or {}).get("client_cpu_ms_per_1k_jobs"), 1),
                _memory(batch or single),
            ]
        )
    header = [
        "system",
        "single: jobs/s",
        "batched: jobs/s",
        "batch API",
        "Redis commands / job (single)",
        "client CPU ms / 1k (single)",
        "client CPU ms / 1k (batched)",
        "Redis bytes / pending job",
    ]
    return table(header, rows)


def targets_table(targets: Sequence[dict[str, Any]]) -> str:
    marks = {True: "met", False: "**not met**", None: "not measured"}
    rows = [[t["target"], t["measured"], marks[t["met"]]] for t in targets]
    return table(["target", "measured", ""], rows)


def redis_benchmark_table(limit: dict[str, Any]) -> str:
    figures = limit.get("redis_benchmark") or []
    if figures and "skipped" in figures[0]:
        return f"redis-benchmark skipped: {figures[0]['skipped']}"
    by_command: dict[str, dict[int, float]] = {}
    for row in figures:
        by_command.setdefault(row["command"], {})[int(row["pipeline"])] = row["requests_per_s"]
    rows = [[name, num(rates.get(1)), num(rates.get(16))] for name, rates in by_command.items()]
    header = ["command (shaped like redelay's)", "ops/s, no pipeline", "ops/s, 16 per trip"]
    return table(header, rows)


def script_table(limit: dict[str, Any]) -> str:
    scripts = limit.get("scripts") or {}
    rows = []
    for name, cost in (scripts.get("transitions") or {}).items():
        inner = cost.get("inner_usec_per_job") or {}
        inner_total = sum(inner.values())
        top = ", ".join(f"{cmd.upper()} {usec:.2f}" for cmd, usec in list(inner.items())[:4])
        rows.append(
            [
                name,
                num(cost.get("usec_per_call"), 1),
                num(cost.get("usec_per_job"), 2),
                num(inner_total, 2),
                top,
            ]
        )
    header = [
        "transition",
        "µs per call",
        "µs per job",
        "of which in Redis commands",
        "largest commands (µs per job)",
    ]
    return table(header, rows)


def profiles_section(profiles: Sequence[dict[str, Any]]) -> str:
    if not profiles:
        return "Not profiled in this run."
    return "\n\n".join(
        f"**Handler concurrency {num(p.get('concurrency'))}.** " + profile_section(p)
        for p in profiles
    )


def profile_section(profile: dict[str, Any]) -> str:
    if "skipped" in profile:
        return f"Not profiled: {profile['skipped']}."
    areas = [[a["name"], f"{a['percent']:.0f}%"] for a in profile.get("areas", [])]
    selfs = [
        [f"`{f['name']}`", f"{f['percent']:.1f}%", f"`{f.get('via') or MISSING}`"]
        for f in profile.get("self", [])[:12]
    ]
    busy = profile.get("gil_busy_percent")
    lines = [
        f"{num(profile.get('samples'))} samples of the thread holding the GIL while the worker "
        f"delivered {num(profile.get('jobs'))} jobs "
        f"({num(profile.get('delivered_jobs_per_s_under_profiler'))} jobs/s under the profiler)"
        + (f"; the GIL was held {busy:.0f}% of the time." if busy is not None else "."),
        "",
        table(["area (innermost frame)", "share of samples"], areas),
        "",
        table(["function (self time)", "share", "called from"], selfs),
    ]
    return "\n".join(lines)


def sweep_table(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "Not measured in this run."
    body = [
        [
            num(row.get("concurrency")),
            num(row.get("delivered_jobs_per_s")),
            num(row.get("redis_round_trips_per_delivered_job"), 3),
            num(row.get("client_cpu_ms_per_1k_jobs"), 1),
            num(row.get("redis_cpu_ms_per_1k_jobs"), 1),
        ]
        for row in rows
    ]
    header = [
        "handler concurrency",
        "delivered jobs/s",
        "round trips / job",
        "client CPU ms / 1k",
        "Redis CPU ms / 1k",
    ]
    return table(header, body)


def skipped_section(skipped: Sequence[dict[str, Any]]) -> str:
    if not skipped:
        return "Every system ran every scenario."
    lines = []
    for s in skipped:
        # Runs recorded before "error" existed count as errors: a missing peer is never silent.
        kind = "**ERROR, did not run**" if s.get("error", True) else "not applicable"
        lines.append(f"- {kind}: {s['system']} / {s['scenario']}: {s['reason']}")
    return "\n".join(lines)


def versions_section(found: dict[str, Any]) -> str:
    lines = []
    for name, value in found.items():
        if isinstance(value, dict):
            listed = ", ".join(f"{package} {version}" for package, version in value.items())
            lines.append(f"- {name}: {listed or MISSING}")
        else:
            lines.append(f"- {name}: {value}")
    return "\n".join(lines)


def system_configs() -> dict[str, str]:
    """Each system's settings as this checkout runs it, kept in a run's results: a page
    rendered again later describes the settings the run had, not the ones the code has now."""
    return {system.name: system.config for system in SYSTEMS}


def configs_section(
    records: Sequence[dict[str, Any]], configs: Mapping[str, str] | None = None
) -> str:
    """The settings of the systems this run measured (a system added since is not listed), as
    the run recorded them (``configs``), else as this checkout describes them."""
    ran = {record["system"] for record in records}
    recorded = configs or {}
    return "\n".join(
        f"- **{system.name}**: {recorded.get(system.name, system.config)}"
        for system in SYSTEMS
        if system.name in ran
    )


# -- numbers quoted in the prose -----------------------------------------------------------


def _get(records: Sequence[dict[str, Any]], system: str, scenario: str, field: str) -> Any:
    return (find(records, system, scenario) or {}).get(field)


def _per_job(records: Sequence[dict[str, Any]], scenario: str, command: str) -> str:
    record = find(records, "redelay", scenario) or {}
    delivered = record.get("delivered") or record.get("jobs") or 0
    calls = (record.get("redis_calls_by_command") or {}).get(command, 0)
    return num(calls / delivered, 1) if delivered else MISSING


def fastest_peer(records: Sequence[dict[str, Any]]) -> tuple[str, float]:
    rates = {
        peer: float(_get(records, peer, "immediate", "delivered_jobs_per_s") or 0)
        for peer in PYTHON_PEERS
    }
    name = max(rates, key=lambda peer: rates[peer])
    return name, rates[name]


def _lua_share(scripts: dict[str, Any]) -> str:
    """Share of the scripts' time over a delayed job's life spent outside Redis commands."""
    transitions = scripts.get("transitions") or {}
    names = [n for n in limits_report.DELAYED_LIFE if n in transitions]
    total = sum(float(transitions[n]["usec_per_job"]) for n in names)
    inner = sum(sum((transitions[n].get("inner_usec_per_job") or {}).values()) for n in names)
    return num(100 * (total - inner) / total) if total else MISSING


def _transition(scripts: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = (scripts.get("transitions") or {}).get(name) or {}
    return found


def _profile(results: dict[str, Any], concurrency: int) -> dict[str, Any]:
    for profile in results.get("profiles") or []:
        if profile.get("concurrency") == concurrency:
            found: dict[str, Any] = profile
            return found
    return {}


def _sweep(rows: Sequence[dict[str, Any]], concurrency: int | None) -> dict[str, Any]:
    found = [r for r in rows if r.get("delivered_jobs_per_s") is not None]
    if not found:
        return {}
    if concurrency is None:
        return max(found, key=lambda r: float(r["delivered_jobs_per_s"]))
    return next((r for r in found if r.get("concurrency") == concurrency), {})


def speed_summary(points: list[dict[str, Any]]) -> str:
    """The reference's spread over the run (simulations/bench/speed_reference.py)."""
    client = speed_reference.spread(points, "client_ms")
    redis_side = speed_reference.spread(points, "redis_ms")
    if client is None or redis_side is None:
        return "Not measured in this run (the reference was added on 2026-11-25)."

    def side(name: str, fastest: float, slowest: float) -> str:
        return f"{name} {fastest:.1f} to {slowest:.1f} ms (the slowest {slowest / fastest:.2f}x)"

    return (
        "The same fixed work was timed before each system, before the scale sections and at the "
        "end (`simulations/bench/speed_reference.py`: a CPython loop in the runner on the client "
        "core, a Lua loop in a fresh redis-server on the Redis core, best of "
        f"{speed_reference.ROUNDS} each), so a change in the machine's speed during the run shows "
        f"here and not only in the figures: {side('client core', *client)}, "
        f"{side('Redis core', *redis_side)}. Each point is the time before the part named."
    )


def speed_table(points: list[dict[str, Any]]) -> str:
    if not points:
        return ""
    rows = [
        f"| {p['before']} | {float(p['client_ms']):.1f} | {float(p['redis_ms']):.1f} |"
        for p in points
    ]
    return "\n".join(["| before | client core, ms | Redis core, ms |", "|---|---:|---:|", *rows])


def values(results: dict[str, Any]) -> dict[str, str]:
    records: list[dict[str, Any]] = results["records"]
    limit: dict[str, Any] = results.get("redis_limit") or {}
    scripts: dict[str, Any] = limit.get("scripts") or {}
    machine_info: dict[str, Any] = results["machine"]
    load = results.get("load") or {}
    peer, peer_rate = fastest_peer(records)
    g: Callable[[str, str, str], Any] = lambda system, scenario, field: _get(  # noqa: E731
        records, system, scenario, field
    )
    plan = {s["name"]: s for s in results["plan"]}
    sweep_rows: list[dict[str, Any]] = results.get("concurrency_sweep") or []
    low, best = _sweep(sweep_rows, 10), _sweep(sweep_rows, None)
    add_cost = _transition(scripts, "add (100 per call)")
    add_usec = float(add_cost.get("usec_per_job") or 0)
    steady_names = [s["name"] for s in results["plan"] if s["kind"] == "steady"] or [""]
    # The larger of the two profiled concurrencies (1,000 in runs before 2026-11-24, 100 since).
    high_profile = max(
        (p.get("concurrency") or 0 for p in results.get("profiles") or []), default=0
    )

    def size(name: str) -> str:
        return num((plan.get(name) or {}).get("jobs"))

    steady = [s for s in results["plan"] if s["kind"] == "steady"]
    first_steady = steady[0] if steady else {}
    return {
        "generated_at": results["generated_at"],
        "code": _code(results.get("code") or {}),
        "mode": results["mode"],
        "command": results["command"],
        "targets_table": targets_table(results["targets"]),
        "delivery_table": delivery_table(records),
        "steady_tables": "\n\n".join(
            f"**{s['rate_per_s']:,} jobs/s for {s['duration_s']:g} s**\n\n"
            + steady_table(records, s["name"])
            for s in steady
        ),
        "enqueue_table": enqueue_table(records),
        "redis_benchmark_table": redis_benchmark_table(limit),
        "script_table": script_table(limit),
        "profile_section": profiles_section(results.get("profiles") or []),
        "sweep_table": sweep_table(results.get("concurrency_sweep") or []),
        "pending_scale_results": scale_report.pending_section(results.get("pending_scale") or {}),
        "wall_time": duration(results.get("wall_s")),
        "scale_wall": scale_report.walls(
            results.get("pending_scale") or {}, results.get("worker_scale") or {}
        ),
        "worker_scale_results": scale_report.worker_section(results.get("worker_scale") or {}),
        "producers_results": scale_report.producers_section(results.get("producers") or {}),
        "stream_enqueue": scale_report.stream_enqueue(results.get("producers") or {}),
        "skipped_section": skipped_section(results.get("skipped") or []),
        "run_notes": "\n".join(f"- {note}" for note in results.get("notes") or []) or "- None.",
        "versions_section": versions_section(results["versions"]),
        "configs_section": configs_section(records, results.get("configs")),
        "cpu": str(machine_info.get("cpu") or "unknown CPU"),
        "cores": str(machine_info.get("cores")),
        "memory_gb": num(machine_info.get("memory_gb"), 1),
        "kernel": str(machine_info.get("kernel")),
        "python": str(machine_info.get("python")),
        "redis_version": str(limit.get("redis_version") or MISSING),
        "load_start": ", ".join(f"{x:.2f}" for x in load.get("start", [])) or MISSING,
        "load_end": ", ".join(f"{x:.2f}" for x in load.get("end", [])) or MISSING,
        "load_max": num(load.get("max_1m"), 2),
        "speed_summary": speed_summary(load.get("speed_reference") or []),
        "slow_host_ratio": f"{speed_reference.SLOW_HOST_RATIO:g}",
        "speed_table": speed_table(load.get("speed_reference") or []),
        "pinned": "yes" if results.get("pinned") else "no (fewer than 2 cores)",
        "immediate_jobs": size("immediate"),
        "burst_jobs": size("burst"),
        "single_jobs": size("enqueue-single"),
        "batch_jobs": size("enqueue-batch"),
        "steady_rates": " and ".join(f"{s['rate_per_s']:,}" for s in steady) or MISSING,
        "steady_s": num(first_steady.get("duration_s")),
        "steady_delays": (
            f"{first_steady.get('delay_min_ms', 0) / 1000:g}-"
            f"{first_steady.get('delay_max_ms', 0) / 1000:g} s"
        ),
        "steady_wait_s": num(first_steady.get("wait_s")),
        "redelay_delivered": num(g("redelay", "immediate", "delivered_jobs_per_s")),
        "store_delivered": num(g("redelay-store", "immediate", "delivered_jobs_per_s")),
        "fastest_peer": peer,
        "fastest_peer_delivered": num(peer_rate),
        "redelay_commands": num(g("redelay", "immediate", "redis_commands_per_delivered_job"), 1),
        "redelay_trips": num(g("redelay", "immediate", "redis_round_trips_per_delivered_job"), 2),
        "redelay_xadd_per_job": _per_job(records, "burst", "xadd"),
        "redelay_redis_cpu": num(g("redelay", "immediate", "redis_cpu_ms_per_1k_jobs"), 1),
        "redelay_client_cpu": num(g("redelay", "immediate", "client_cpu_ms_per_1k_jobs"), 1),
        "redelay_ceiling": _ceiling(find(records, "redelay", "immediate")),
        "script_usec": num(scripts.get("delayed_job_usec"), 1),
        "script_ceiling": num(scripts.get("delayed_jobs_per_s_ceiling")),
        "script_immediate_ceiling": num(scripts.get("immediate_jobs_per_s_ceiling_approx")),
        "memory_without": num(
            g("redelay", "enqueue-batch", "redis_memory_bytes_per_pending_job_without_audit")
        ),
        "memory_with": num(g("redelay", "enqueue-batch", "redis_memory_bytes_per_pending_job")),
        "batch_enqueue": num(g("redelay", "enqueue-batch", "enqueue_jobs_per_s")),
        "lua_share": _lua_share(scripts),
        "carry_usec": num(_transition(scripts, "carry (1,000 per call)").get("usec_per_job"), 1),
        "lease_usec": num(_transition(scripts, "lease (100 per call)").get("usec_per_job"), 1),
        "ack_usec": num(_transition(scripts, "ack (100 per call)").get("usec_per_job"), 1),
        "add_ceiling": num(1e6 / add_usec) if add_usec else MISSING,
        "store_batch_enqueue": num(g("redelay-store", "enqueue-batch", "enqueue_jobs_per_s")),
        "bullmq_delivered": (
            f"{num(g('bullmq', 'immediate', 'delivered_jobs_per_s'))} jobs/s "
            f"({num(g('bullmq', 'burst', 'delivered_jobs_per_s'))} in the burst)"
        ),
        "redelay_ratio": (
            num(float(g("redelay", "immediate", "delivered_jobs_per_s") or 0) / peer_rate, 1)
            if peer_rate
            else MISSING
        ),
        "gil_low": num(_profile(results, 10).get("gil_busy_percent")),
        "gil_high": num(_profile(results, high_profile).get("gil_busy_percent")),
        "profile_high": num(high_profile),
        "steady_p50_low": ms(g("redelay", steady_names[0], "lateness_ms_p50")),
        "steady_p50_high": ms(g("redelay", steady_names[-1], "lateness_ms_p50")),
        "steady_p99_low": ms(g("redelay", steady_names[0], "lateness_ms_p99")),
        "steady_p99_high": ms(g("redelay", steady_names[-1], "lateness_ms_p99")),
        "steady_early": early_sentence(records, "redelay", steady_names),
        "steady_verdict": lateness_sentence(records, "redelay"),
        "store_p99_low": ms(g("redelay-store", steady_names[0], "lateness_ms_p99")),
        "store_p99_high": ms(g("redelay-store", steady_names[-1], "lateness_ms_p99")),
        "steady_trips": num(
            max(
                (
                    float(r["redis_round_trips_per_delivered_job"])
                    for r in records
                    if r["system"] == "redelay"
                    and r["scenario"] in steady_names
                    and r.get("redis_round_trips_per_delivered_job") is not None
                ),
                default=math.nan,
            ),
            2,
        ),
        "add_usec": num(add_cost.get("usec_per_job"), 1),
        "batch_client_usec": num(g("redelay", "enqueue-batch", "client_cpu_ms_per_1k_jobs"), 1),
        "sweep_low": num(low.get("delivered_jobs_per_s")),
        "sweep_low_trips": num(low.get("redis_round_trips_per_delivered_job"), 2),
        "sweep_best": num(best.get("delivered_jobs_per_s")),
        "sweep_best_concurrency": num(best.get("concurrency")),
        "sweep_best_trips": num(best.get("redis_round_trips_per_delivered_job"), 3),
        "lateness_chart": _image(results, "lateness", "Lateness percentiles under steady load"),
        "throughput_chart": _image(results, "throughput", "Delivered and enqueued jobs/s"),
        **limits_report.values(results),
    }


def early_sentence(records: Sequence[dict[str, Any]], system: str, scenarios: Sequence[str]) -> str:
    early = sum(
        int(record.get("early_deliveries") or 0)
        for name in scenarios
        if (record := find(records, system, name)) is not None
    )
    return "no early delivery" if early == 0 else f"{early:,} early deliveries"


def lateness_sentence(records: Sequence[dict[str, Any]], system: str) -> str:
    judged = targets.lateness_of(records, system)
    if judged is not None and judged[1]:
        return f"both within the {targets.LATENESS_P99_MS} ms target"
    return f"against the {targets.LATENESS_P99_MS} ms target"


def _code(code: dict[str, Any]) -> str:
    if not code.get("commit"):
        return "the working tree (no git commit found)"
    text = f"commit {code['commit']} ({code.get('commit_time', '')})"
    uncommitted = code.get("uncommitted") or []
    if uncommitted:
        text += f" plus uncommitted changes to {', '.join(uncommitted)}"
    return text


def _image(results: dict[str, Any], name: str, alt: str) -> str:
    path = (results.get("charts") or {}).get(name)
    return f"![{alt}]({path})" if path else "(chart not drawn: matplotlib is not installed)"


def render(results: dict[str, Any], template_path: Path = TEMPLATE_PATH) -> str:
    return Template(template_path.read_text()).substitute(values(results))


def write(results: dict[str, Any], json_path: Path, page_path: Path) -> None:
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    page_path.write_text(render(results))
