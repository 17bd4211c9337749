"""The run's outputs: the JSON of every record, and docs/benchmarks.md from template.md.

The page is a ``string.Template``: ``$name`` placeholders are filled with tables and numbers built
here from the run's results, so the prose and the figures always come from the same run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from string import Template
from typing import Any

from . import ratios, scale_report
from .formatting import MISSING, duration, ms, num, table
from .systems import SYSTEMS
from .targets import find

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


# -- ratios: to BullMQ, to the floor, and Redis's instructions ------------------------------


def _x(value: Any) -> str:
    return f"{value:.2f}x" if isinstance(value, int | float) else MISSING


def _bullmq_ratio(records: Sequence[dict[str, Any]], system: str, scenario: str, field: str) -> str:
    record = find(records, system, scenario) or {}
    return _x(((record.get("ratios") or {}).get("bullmq") or {}).get(field))


# (column, scenario, field) of the table of ratios to BullMQ.
BULLMQ_COLUMNS = (
    ("immediate: delivered jobs/s", "immediate", "delivered_jobs_per_s"),
    ("burst: delivered jobs/s", "burst", "delivered_jobs_per_s"),
    ("burst: client CPU / job", "burst", "client_cpu_ms_per_1k_jobs"),
    ("burst: Redis CPU / job", "burst", "redis_cpu_ms_per_1k_jobs"),
    ("steady-1000: lateness p99", "steady-1000", "lateness_ms_p99"),
    ("steady-5000: lateness p99", "steady-5000", "lateness_ms_p99"),
    ("enqueue-single: jobs/s", "enqueue-single", "enqueue_jobs_per_s"),
    ("enqueue-batch: jobs/s", "enqueue-batch", "enqueue_jobs_per_s"),
    ("Redis bytes / pending job", "enqueue-single", "redis_memory_bytes_per_pending_job"),
)


def bullmq_ratio_table(records: Sequence[dict[str, Any]]) -> str:
    """Each system's figures over BullMQ's in the same run (ratios.peer_of says which entry)."""
    rows = [
        [_bold(system), f"`{ratios.peer_of(system)}`"]
        + [_bullmq_ratio(records, system, scenario, field) for _, scenario, field in BULLMQ_COLUMNS]
        for system in _systems(records)
        if not system.startswith(ratios.BULLMQ)
    ]
    return table(["system", "against", *(c for c, _, _ in BULLMQ_COLUMNS)], rows)


def _floor_cell(record: dict[str, Any] | None) -> str:
    found = ((record or {}).get("ratios") or {}).get("floor") or {}
    client, server = found.get("client_cpu_per_job"), found.get("redis_cpu_per_job")
    if client is None and server is None:
        return MISSING
    return f"{num(client, 1)} / {num(server, 1)}"


def floor_ratio_table(records: Sequence[dict[str, Any]], plan: Sequence[dict[str, Any]]) -> str:
    """Client and Redis CPU per job, each in empty script calls of its round's floor."""
    names = [s["name"] for s in plan]
    rows = [
        [_bold(system)] + [_floor_cell(find(records, system, name)) for name in names]
        for system in _systems(records)
    ]
    return table(["system", *names], rows)


def floors_table(floors: Sequence[dict[str, Any]]) -> str:
    if not floors:
        return "No floor was measured in this run."
    rows = [
        [
            str(point["before"]),
            num(point.get("calls_per_s")),
            num(point.get("client_us_per_call"), 1),
            num(point.get("redis_us_per_call"), 1),
        ]
        for point in floors
    ]
    header = ["round", "empty calls/s", "client CPU µs / call", "Redis CPU µs / call"]
    return table(header, rows)


def floor_spread(floors: Sequence[dict[str, Any]]) -> str:
    """How far the floor moved over the run: the host's own drift, which the ratios absorb."""
    rates = [float(p["calls_per_s"]) for p in floors if p.get("calls_per_s")]
    if not rates:
        return "not measured"
    return f"{min(rates):,.0f} to {max(rates):,.0f} empty calls/s ({max(rates) / min(rates):.2f}x)"


def instructions_section(counted: dict[str, Any]) -> str:
    if not counted:
        return "Not counted in this run (`--no-instructions`)."
    if "skipped" in counted:
        return f"Not counted: {counted['skipped']}."
    shapes = counted.get("shapes") or {}
    rows = [
        [
            label,
            f"{num(shape['add_batch'])} / {num(shape['batch'])}",
            num(shape.get("jobs")),
            *(
                num((shape.get("per_job") or {}).get(phase))
                for phase in ("add", "carry", "lease", "ack")
            ),
            num(shape.get("life")),
            _x(shape.get("life_in_noop_calls")),
        ]
        for label, shape in shapes.items()
    ]
    header = [
        "shape",
        "jobs per add / per carry, lease, ack",
        "jobs",
        "add",
        "carry",
        "lease",
        "ack",
        "a delayed job's life",
        "in empty calls",
    ]
    noop = num(counted.get("noop_call"))
    return (
        f"An empty script call (EVALSHA of `return 0`, request and reply) cost Redis {noop} "
        f"instructions; `{counted.get('command', '')}` counts the batched shape alone.\n\n"
        + table(header, rows)
    )


def _bold(system: str) -> str:
    return f"**{system}**" if system == "redelay" else system


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


def values(results: dict[str, Any]) -> dict[str, str]:
    records: list[dict[str, Any]] = results["records"]
    limit: dict[str, Any] = results.get("redis_limit") or {}
    machine_info: dict[str, Any] = results["machine"]
    load = results.get("load") or {}
    floors: list[dict[str, Any]] = results.get("floors") or []
    steady = [s for s in results["plan"] if s["kind"] == "steady"]
    pending = results.get("pending_scale") or {}
    workers = results.get("worker_scale") or {}
    return {
        "generated_at": results["generated_at"],
        "code": _code(results.get("code") or {}),
        "mode": results["mode"],
        "command": results["command"],
        "wall_time": duration(results.get("wall_s")),
        "cpu": str(machine_info.get("cpu") or "unknown CPU"),
        "cores": str(machine_info.get("cores")),
        "memory_gb": num(machine_info.get("memory_gb"), 1),
        "kernel": str(machine_info.get("kernel")),
        "python": str(machine_info.get("python")),
        "load_start": ", ".join(f"{x:.2f}" for x in load.get("start", [])) or MISSING,
        "load_end": ", ".join(f"{x:.2f}" for x in load.get("end", [])) or MISSING,
        "load_max": num(load.get("max_1m"), 2),
        "pinned": "yes" if results.get("pinned") else "no (fewer than 2 cores)",
        "targets_table": targets_table(results["targets"]),
        "bullmq_ratio_table": bullmq_ratio_table(records),
        "floors_table": floors_table(floors),
        "floor_spread": floor_spread(floors),
        "floor_ratio_table": floor_ratio_table(records, results["plan"]),
        "instructions_section": instructions_section(results.get("instructions") or {}),
        "plan_table": plan_table(results["plan"]),
        "delivery_table": delivery_table(records),
        "steady_tables": "\n\n".join(
            f"**{s['rate_per_s']:,} jobs/s for {s['duration_s']:g} s**\n\n"
            + steady_table(records, s["name"])
            for s in steady
        ),
        "enqueue_table": enqueue_table(records),
        "redis_benchmark_table": redis_benchmark_table(limit),
        "script_table": script_table(limit),
        "redis_version": str(limit.get("redis_version") or MISSING),
        "profile_section": profiles_section(results.get("profiles") or []),
        "sweep_table": sweep_table(results.get("concurrency_sweep") or []),
        "pending_scale_results": scale_report.pending_section(pending),
        "scale_wall": scale_report.walls(pending, workers),
        "worker_scale_results": scale_report.worker_section(workers),
        "producers_results": scale_report.producers_section(results.get("producers") or {}),
        "skipped_section": skipped_section(results.get("skipped") or []),
        "run_notes": "\n".join(f"- {note}" for note in results.get("notes") or []) or "- None.",
        "versions_section": versions_section(results["versions"]),
        "configs_section": configs_section(records, results.get("configs")),
        "lateness_chart": _image(results, "lateness", "Lateness percentiles under steady load"),
        "throughput_chart": _image(results, "throughput", "Delivered and enqueued jobs/s"),
    }


def plan_table(plan: Sequence[dict[str, Any]]) -> str:
    """The run's scenarios and their sizes, as the run recorded them."""

    def what(s: dict[str, Any]) -> str:
        if s["kind"] == "steady":
            return (
                f"{s['rate_per_s']:,} jobs/s for {s['duration_s']:g} s, each due "
                f"{s['delay_min_ms'] / 1000:g}-{s['delay_max_ms'] / 1000:g} s after it is added"
            )
        if s["kind"] == "enqueue":
            calls = "one call each" if s["call_style"] == "single" else "in batches of 1,000"
            return f"{s['jobs']:,} jobs added {calls}, due in an hour"
        if s["kind"] == "burst":
            return f"{s['jobs']:,} jobs due at one moment, a worker running"
        return f"{s['jobs']:,} jobs due now, added before the worker starts"

    rows = [[f"`{s['name']}`", what(s), num(s.get("wait_s"))] for s in plan]
    return table(["scenario", "what", "wait for deliveries, s"], rows)


def render(results: dict[str, Any], template_path: Path = TEMPLATE_PATH) -> str:
    return Template(template_path.read_text()).substitute(values(results))


def write(results: dict[str, Any], json_path: Path, page_path: Path) -> None:
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    page_path.write_text(render(results))
