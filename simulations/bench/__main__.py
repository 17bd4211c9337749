"""``python -m simulations.bench``: run the scenarios on every system and write the results.

    python -m simulations.bench --full     # make bench: docs/benchmarks.md, .json and the PNGs
    python -m simulations.bench --long     # make bench-long: simulations/out/bench-long/
    python -m simulations.bench --quick    # make bench-quick: simulations/out/bench-quick/
    python -m simulations.bench --quick --systems redelay,arq --scenarios immediate
    python -m simulations.bench --tiny --systems redelay --no-limit --no-profile --no-sweep
    python -m simulations.bench probe [NAME ...]   # the hand-run measurements (probes/)

Every system runs in one run, interleaved: scenario by scenario, each round in a rotated order
of the systems, after a floor point (floor.py: an empty script call on the same client and
socket), so every figure can be read as a ratio to BullMQ's and to the floor measured minutes
from it, whatever the host (ratios.py). Redis's instructions per job (callgrind) are counted
besides, as the one figure no host's speed moves (instructions.py). No host is refused.

``--long`` adds what takes hours: the issue's full sizes, and for redelay alone a handler
concurrency sweep, a profile, the two scale sections of issue 15 (10,000 against 10,000,000 pending
jobs, simulations/bench/probes/pending_scale.py; 1, 2, 4 worker processes on one Redis,
simulations/bench/probes/worker_scale.py) and its producers
(simulations/bench/probes/producer_speed.py), sized by the mode (see scale.py); each has a --no-...
flag. ``--quick`` and ``--tiny`` run them all at small sizes.

One ``--seed`` drives the steady scenarios' delays; every setting is printed at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from actors.storage.scripts import sources

from . import chart, floor, instructions, probes, ratios, redis_limit, report, scale, targets
from .profiling import profile_redelay
from .runner import NODE_DIR, REPO_ROOT, AgentFailed, RunContext, run_scenario, snapshot_code
from .scenarios import Scenario, full_plan, long_plan, quick_plan, tiny_plan
from .server import can_pin, pin_clients
from .sweep import concurrency_sweep
from .systems import BY_NAME, SYSTEMS, SystemInfo

DOCS_DIR = REPO_ROOT / "docs"
QUICK_DIR = REPO_ROOT / "simulations" / "out" / "bench-quick"
LONG_DIR = REPO_ROOT / "simulations" / "out" / "bench-long"
PROFILE_JOBS = {"long": 100_000, "quick": 2_000, "tiny": 500}
SWEEP_JOBS = {"long": 100_000, "quick": 2_000, "tiny": 500}
# Empty script calls per floor point: a second or so of the client's time.
FLOOR_CALLS = {"long": 20_000, "full": 10_000, "quick": 3_000, "tiny": 500}
# What `make bench` leaves to `make bench-long`: each takes minutes to hours at its real size.
LONG_ONLY = ("no_sweep", "no_profile", "no_pending_scale", "no_worker_scale", "no_producers")
COMMANDS = {"full": "make bench", "long": "make bench-long", "quick": "make bench-quick"}
# The table's setting (the worker waits on Redis) and a large one (Python is the limit). Not
# 1,000: py-spy stops the process to walk every thread's stack, and with 1,000 handler threads
# that slowed the profiled run of 2026-11-24 to 1,755 jobs/s against 27,687 unprofiled.
PROFILE_CONCURRENCIES = (10, 100)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m simulations.bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", dest="mode", action="store_const", const="full")
    size.add_argument("--long", dest="mode", action="store_const", const="long")
    size.add_argument("--quick", dest="mode", action="store_const", const="quick")
    size.add_argument("--tiny", dest="mode", action="store_const", const="tiny")
    parser.add_argument("--systems", help="comma-separated subset (default: all)")
    parser.add_argument("--scenarios", help="comma-separated subset (default: all)")
    parser.add_argument("--out-dir", type=Path, help="where the JSON, page and charts go")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-limit", action="store_true", help="skip the Redis limit section")
    parser.add_argument(
        "--no-instructions",
        action="store_true",
        help="skip counting Redis's instructions per job under callgrind",
    )
    parser.add_argument("--no-profile", action="store_true", help="skip profiling redelay")
    parser.add_argument("--no-sweep", action="store_true", help="skip redelay's concurrency sweep")
    parser.add_argument(
        "--no-pending-scale",
        action="store_true",
        help="skip 10,000 against 10,000,000 pending jobs (probes/pending_scale.py)",
    )
    parser.add_argument(
        "--no-worker-scale",
        action="store_true",
        help="skip 1, 2, 4 worker processes on one Redis (probes/worker_scale.py)",
    )
    parser.add_argument(
        "--no-producers",
        action="store_true",
        help="skip redelay's producers (simulations/bench/probes/producer_speed.py)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only redraw the page and charts from an earlier run's JSON (template edits)",
    )
    args = parser.parse_args(argv)
    args.mode = args.mode or "quick"
    if args.mode == "full":
        for name in LONG_ONLY:
            setattr(args, name, True)
    return args


def plan_for(mode: str, names: str | None) -> list[Scenario]:
    plans = {"long": long_plan, "full": full_plan, "quick": quick_plan, "tiny": tiny_plan}
    plan = plans[mode]()
    if names:
        wanted = set(names.split(","))
        unknown = wanted - {s.name for s in plan}
        if unknown:
            known = [s.name for s in plan]
            raise SystemExit(f"unknown scenarios {sorted(unknown)}; known: {known}")
        plan = [s for s in plan if s.name in wanted]
    return plan


def systems_for(names: str | None) -> list[SystemInfo]:
    if not names:
        return list(SYSTEMS)
    unknown = set(names.split(",")) - set(BY_NAME)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; known: {sorted(BY_NAME)}")
    return [s for s in SYSTEMS if s.name in names.split(",")]


def node_ready() -> str | None:
    """Installs BullMQ from the lock file on first use; returns why it cannot run, or None."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    if (NODE_DIR / "node_modules" / "bullmq").is_dir():
        return None
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not on PATH (needed once to install bullmq)"
    print("installing bullmq with npm ci (once)", flush=True)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True
    )
    if done.returncode != 0:
        return f"npm ci failed: {done.stderr.strip()[-300:]}"
    return None


def summary_line(record: dict[str, Any]) -> str:
    parts = [f"{record['system']:>14} {record['scenario']:<15}"]
    for label, field in (
        ("enq/s", "enqueue_jobs_per_s"),
        ("deliv/s", "delivered_jobs_per_s"),
        ("p50", "lateness_ms_p50"),
        ("p99", "lateness_ms_p99"),
        ("early", "early_deliveries"),
        ("missing", "missing"),
        ("cmds/job", "redis_commands_per_delivered_job"),
        ("B/job", "redis_memory_bytes_per_pending_job"),
    ):
        value = record.get(field)
        if isinstance(value, float):
            parts.append(f"{label}={value:,.1f}")
        elif value is not None:
            parts.append(f"{label}={value}")
    return " ".join(parts)


def not_run(system: SystemInfo, scenario: Scenario, reason: str, *, error: bool) -> dict[str, Any]:
    """A pair that did not run; ``error`` unless it cannot apply (a peer without that API)."""
    return {"system": system.name, "scenario": scenario.name, "reason": reason, "error": error}


def rotated(systems: Sequence[SystemInfo], turn: int) -> list[SystemInfo]:
    """The systems in the order of round ``turn``: each round starts one system later, so no
    system always runs first (on a fresh machine) or last (after the others warmed it)."""
    shift = turn % len(systems) if systems else 0
    return [*systems[shift:], *systems[:shift]]


def run_all(
    systems: list[SystemInfo],
    plan: list[Scenario],
    context: RunContext,
    load: dict[str, Any],
    floor_calls: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Runs every scenario of every system, interleaved: one round per scenario, each after a
    floor point that its records keep. Returns the records, the pairs not run and the floors."""
    records: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    missing = {s.name: s.missing() or (node_ready() if s.is_node else None) for s in systems}
    for turn, scenario in enumerate(plan):
        point = {"before": scenario.name, **floor.measure(context.workdir / "floor", floor_calls)}
        floors.append(point)
        print(
            f"floor before {scenario.name}: {point['calls_per_s']:,.0f} empty calls/s, client "
            f"{point['client_us_per_call']} µs, Redis {point['redis_us_per_call']} µs a call",
            flush=True,
        )
        for system in rotated(systems, turn):
            why = missing[system.name]
            if why is None and scenario.name == "enqueue-batch" and system.batch_api is None:
                # Not applicable, not missing: the peer has no batch API to measure.
                skipped.append(not_run(system, scenario, "no batch enqueue API", error=False))
                continue
            if why is not None:
                skipped.append(not_run(system, scenario, why, error=True))
                print(f"{system.name:>14} {scenario.name:<15} ERROR, not run: {why}")
                continue
            load_before = os.getloadavg()[0]
            load["max_1m"] = max(load.get("max_1m", 0.0), load_before)
            try:
                record = run_scenario(system, scenario, context)
            except AgentFailed as exc:
                reason = f"failed: {str(exc).strip()[-400:]}"
                skipped.append(not_run(system, scenario, reason, error=True))
                print(f"{system.name:>14} {scenario.name:<15} {reason}", flush=True)
                continue
            record["loadavg_1m_before"] = round(load_before, 2)
            record["floor"] = {k: v for k, v in point.items() if k != "before"}
            records.append(record)
            print(summary_line(record), flush=True)
    ratios.attach(records)
    return records, skipped, floors


def render_only(json_path: Path, out_dir: Path | None = None) -> int:
    """Rewrites the page and charts from ``json_path``'s records (no new run), next to it or
    into ``out_dir``."""
    results: dict[str, Any] = json.loads(json_path.read_text())
    plan = [Scenario.from_json(s) for s in results["plan"]]
    out_dir = out_dir or json_path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    charts = results.get("charts") or {}
    if "lateness" in charts:
        chart.lateness_chart(results["records"], plan, out_dir / charts["lateness"])
    if "throughput" in charts:
        chart.throughput_chart(results["records"], out_dir / charts["throughput"])
    results["targets"] = [v.to_json() for v in judge(results)]
    page_path = out_dir / json_path.with_suffix(".md").name
    report.write(results, out_dir / json_path.name, page_path)
    print(f"rewrote {page_path} from {json_path}")
    return 0


def judge(results: dict[str, Any]) -> list[targets.Verdict]:
    """Issue 15's targets from a run's results; a JSON from before a section existed has no key
    for it, and its targets read "not measured"."""
    return targets.judge(
        results["records"],
        results.get("concurrency_sweep") or [],
        pending_scale=results.get("pending_scale") or {},
        worker_scale=results.get("worker_scale") or {},
        producers=results.get("producers") or {},
    )


def run_producers_section(args: argparse.Namespace, wanted: bool) -> dict[str, Any]:
    """redelay's producers (redelay only, like the sweep); {} when not run."""
    if not wanted or args.no_producers:
        return {}
    print(f"producers: {scale.producer_command(args.mode)}", flush=True)
    found = scale.run_producers(args.mode)
    for row in found.get("results") or [found.get("skipped")]:
        if isinstance(row, dict):
            row = f"{row['mode']}: {row['best_jobs_per_s']:,.0f} jobs/s"
        print(f"  {row}", flush=True)
    return found


def run_scale_sections(
    args: argparse.Namespace, code_dir: Path, wanted: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two scale sections (redelay only, like the sweep); {} for a section not run."""
    pending: dict[str, Any] = {}
    workers: dict[str, Any] = {}
    if wanted and not args.no_pending_scale:
        print(f"pending scale: {scale.pending_command(args.mode)}", flush=True)
        pending = scale.run_pending_scale(args.mode, args.seed, code_dir)
        print(f"  {pending.get('comparison') or pending.get('skipped')}", flush=True)
    if wanted and not args.no_worker_scale:
        print(f"worker scale: {scale.worker_command(args.mode)}", flush=True)
        workers = scale.run_worker_scale(args.mode, code_dir)
        for row in workers.get("summary") or [workers.get("skipped")]:
            print(f"  {row}", flush=True)
    return pending, workers


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["probe"]:
        return probes.run(given[1:])
    args = parse_args(given)
    if args.render is not None:
        return render_only(args.render, args.out_dir)
    plan = plan_for(args.mode, args.scenarios)
    systems = systems_for(args.systems)
    default_dir = {"full": DOCS_DIR, "long": LONG_DIR}.get(args.mode, QUICK_DIR)
    out_dir: Path = args.out_dir or default_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    if can_pin():
        pin_clients()
    print(f"settings: mode={args.mode} seed={args.seed} out={out_dir} pinned={can_pin()}")
    print("systems: " + ", ".join(s.name for s in systems))
    for scenario in plan:
        print(f"scenario: {scenario.to_json()}")
    load: dict[str, Any] = {"start": list(os.getloadavg())}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redelay-bench-") as workdir:
        code_dir = Path(workdir) / "code"
        code = snapshot_code(code_dir)
        sources()  # the in-process script measurements use the scripts as they are now, too
        print(f"code: {code}", flush=True)
        context = RunContext(Path(workdir), args.seed, code_dir=code_dir)
        floor_calls = FLOOR_CALLS[args.mode]
        records, skipped, floors = run_all(systems, plan, context, load, floor_calls)
        counted: dict[str, Any] = {}
        if not args.no_instructions:
            print(f"counting Redis's instructions per job: {instructions.command(args.mode)}")
            counted = count_instructions(args.mode)
        limit: dict[str, Any] = {}
        if not args.no_limit:
            print("measuring the Redis limit", flush=True)
            limit = redis_limit.measure(Path(workdir), quick=args.mode != "long")
        sweep: list[dict[str, Any]] = []
        if not args.no_sweep and "redelay" in {s.name for s in systems}:
            print("redelay's delivery rate by handler concurrency", flush=True)
            sweep = concurrency_sweep(context, SWEEP_JOBS[args.mode])
            for row in sweep:
                print(f"  {row}", flush=True)
        profiles: list[dict[str, Any]] = []
        if not args.no_profile and "redelay" in {s.name for s in systems}:
            for concurrency in PROFILE_CONCURRENCIES:
                print(f"profiling redelay's worker at concurrency {concurrency}", flush=True)
                try:
                    profiles.append(profile_redelay(context, PROFILE_JOBS[args.mode], concurrency))
                except AgentFailed as exc:
                    failed = f"failed: {str(exc).strip()[-300:]}"
                    profiles.append({"skipped": failed, "concurrency": concurrency})
        pending_scale, worker_scale = run_scale_sections(
            args, code_dir, "redelay" in {s.name for s in systems}
        )
        producers = run_producers_section(args, "redelay" in {s.name for s in systems})
    load["end"] = list(os.getloadavg())
    prefix = "benchmarks" if args.mode == "full" else f"benchmarks-{args.mode}"
    charts = {
        "lateness": f"{prefix}-lateness.png",
        "throughput": f"{prefix}-throughput.png",
    }
    drawn = {
        "lateness": chart.lateness_chart(records, plan, out_dir / charts["lateness"]),
        "throughput": chart.throughput_chart(records, out_dir / charts["throughput"]),
    }
    results: dict[str, Any] = {
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": args.mode,
        "command": COMMANDS.get(args.mode, f"python -m simulations.bench --{args.mode}"),
        "seed": args.seed,
        "code": code,
        "wall_s": round(time.monotonic() - started, 1),
        "pinned": can_pin(),
        "machine": report.machine(),
        "versions": report.versions(),
        "load": load,
        "plan": [s.to_json() for s in plan],
        "configs": report.system_configs(),
        "records": records,
        "skipped": skipped,
        "floors": floors,
        "instructions": counted,
        "redis_limit": limit,
        "profiles": profiles,
        "concurrency_sweep": sweep,
        "pending_scale": pending_scale,
        "worker_scale": worker_scale,
        "producers": producers,
        "charts": {name: path for name, path in charts.items() if drawn[name]},
    }
    results["targets"] = [v.to_json() for v in judge(results)]
    json_path, page_path = out_dir / f"{prefix}.json", out_dir / f"{prefix}.md"
    report.write(results, json_path, page_path)
    print(f"wrote {page_path} and {json_path} in {results['wall_s']} s")
    for verdict in results["targets"]:
        print(f"target: {verdict['target']}: {verdict['measured']} -> {verdict['met']}")
    sections_failed = scale.failures(pending_scale, worker_scale, producers)
    if counted.get("error"):
        sections_failed.append(f"instructions: {counted['skipped']}")
    return report_errors(skipped, sections_failed)


def count_instructions(mode: str) -> dict[str, Any]:
    """instructions.measure, or why it failed (the rest of the run is still written)."""
    try:
        counted = instructions.measure(mode)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return {"skipped": f"failed: {str(exc).strip()[-300:]}", "error": True}
    for label, shape in (counted.get("shapes") or {}).items():
        print(
            f"  {label}: {shape['life']:,} a job's life, {shape['life_in_noop_calls']} empty calls"
        )
    return counted


def report_errors(skipped: Sequence[dict[str, Any]], sections: Sequence[str] = ()) -> int:
    """A peer that did not run is an error, never a silent gap in the comparison; so is a
    section (the scale simulators) that was asked for and failed."""
    errors = [s for s in skipped if s.get("error", True)]
    for s in errors:
        print(f"ERROR: {s['system']} / {s['scenario']} did not run: {s['reason']}", flush=True)
    if errors:
        print(f"ERROR: {len(errors)} system/scenario pairs did not run: the comparison is partial")
    for section in sections:
        print(f"ERROR: {section}", flush=True)
    return 1 if errors or sections else 0


if __name__ == "__main__":
    sys.exit(main())
