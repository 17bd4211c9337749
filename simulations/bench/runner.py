"""Runs one scenario on one system against a fresh private redis-server and builds its record.

The timeline per kind:
- immediate: fill the queue (no worker yet), note memory, start the worker, wait for every job;
- burst: start the worker, fill with one due time far enough ahead that filling ends first,
  note memory, wait;
- steady: start the worker, add jobs at the rate for the duration, wait;
- enqueue: fill (single calls or batches), note memory; no worker.
Server statistics are read before the first job and after the last delivery, and the runner's own
commands (INFO and MEMORY USAGE) are subtracted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jobs import now_ms
from .scenarios import Scenario
from .server import BenchServer, ServerStats, tree_cpu_ms
from .spec import AgentSpec, Role
from .stats import lateness_summary, per_1k, per_job, quantiles
from .systems import SystemInfo

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = Path(__file__).resolve().parent / "node"
READY_TIMEOUT_S = 60.0
PRODUCER_TIMEOUT_S = 900.0
STOP_GRACE_S = 5.0
DUMP_TIMEOUT_S = 5.0
AUDIT_KEY = "redelay:{bench.0}:audit"  # the one shard of namespace "bench"
BURST_LEAD_MAX_S = 300.0
DEFAULT_ENQUEUE_RATE = 2_000.0  # jobs/s assumed for the burst lead when nothing was measured


class AgentFailed(RuntimeError):
    pass


@dataclass
class Agent:
    process: subprocess.Popen[bytes]
    spec: AgentSpec
    log_path: Path
    profiler: subprocess.Popen[bytes] | None = None

    @property
    def out(self) -> Path:
        return Path(self.spec.out_path)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text()[-3000:]
        except OSError:
            return ""

    def wait_file(self, path: Path, timeout_s: float) -> dict[str, Any] | None:
        """The JSON in ``path`` once it exists; None on timeout; raises if the agent died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists():
                data: dict[str, Any] = json.loads(path.read_text())
                return data
            if self.process.poll() is not None and not path.exists():
                raise AgentFailed(
                    f"{self.spec.system} {self.spec.role} exited with {self.process.returncode}:\n"
                    + self.log_tail()
                )
            time.sleep(0.01)
        return None

    def request(self, what: str) -> None:
        self.out.with_name(self.out.name + "." + what).touch()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.request("stop")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_GRACE_S)
        # The group we started for it, whether or not its leader is still alive: a pool's child
        # that outlived it would keep taking CPU (and jobs) into the next scenario.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        if self.profiler is not None:  # it writes its output once the process it watched ends
            self.profiler.wait(timeout=60)


@dataclass
class RunContext:
    """Where a run keeps its files and what it learnt that later scenarios use."""

    workdir: Path
    seed: int
    enqueue_rate_hint: dict[str, float] = field(default_factory=dict)
    profile_to: Path | None = None  # attach py-spy to workers, writing raw stacks here
    extra_env: dict[str, str] = field(default_factory=dict)  # for the agents (experiments)
    code_dir: Path | None = None  # a snapshot of the code the agents import (see snapshot_code)


SNAPSHOT_PARTS = ("actors", "lua", "simulations")


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def snapshot_code(directory: Path) -> dict[str, Any]:
    """Copies the code every agent will import, so a run measures one version of redelay even
    while the checkout changes under it (several people commit to it). Returns its provenance."""
    ignore = shutil.ignore_patterns("__pycache__", "node_modules", "out", "*.pyc")
    for part in SNAPSHOT_PARTS:
        shutil.copytree(REPO_ROOT / part, directory / part, ignore=ignore)
    changed = _git("status", "--porcelain", "--", "actors", "lua")
    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "commit_time": _git("log", "-1", "--format=%cd", "--date=format:%Y-%m-%d %H:%M"),
        "uncommitted": [line[3:] for line in changed.splitlines() if line.strip()],
    }


def agent_command(system: SystemInfo, spec_path: Path) -> list[str]:
    if system.is_node:
        return ["node", str(NODE_DIR / "bullmq.mjs"), str(spec_path)]
    return [sys.executable, "-m", "simulations.bench.agent", str(spec_path)]


def attach_profiler(pid: int, raw_path: Path) -> subprocess.Popen[bytes]:
    """py-spy on a running worker, from its go to its end: only the thread holding the GIL is
    sampled (--gil), so waits do not show and the samples are where Python spends CPU."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    command = [py_spy, "record", "--pid", str(pid), "--gil", "--nonblocking", "--rate", "1000"]
    # (1000 Hz is profiling.SAMPLE_RATE_HZ; it is spelled out here to keep the imports one-way.)
    command += ["--format", "raw", "--output", str(raw_path)]
    profiler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy needs a moment to attach; the worker waits for its go meanwhile
    return profiler


def start_agent(
    system: SystemInfo,
    role: Role,
    scenario: Scenario,
    server: BenchServer,
    context: RunContext,
    *,
    expected: int = 0,
    burst_due_ms: int = 0,
) -> Agent:
    directory = context.workdir
    stem = f"{system.name}.{scenario.name}.{role}"
    spec = AgentSpec(
        system=system.name,
        role=role,
        socket_path=server.socket_path,
        scenario=scenario,
        out_path=str(directory / f"{stem}.out.json"),
        ready_path=str(directory / f"{stem}.ready.json"),
        expected=expected,
        burst_due_ms=burst_due_ms,
        seed=context.seed,
    )
    for stale in directory.glob(f"{stem}.*"):  # from an earlier run of the same name
        stale.unlink()
    spec_path = directory / f"{stem}.spec.json"
    spec.write(spec_path)
    log_path = directory / f"{stem}.log"
    with log_path.open("wb") as log:
        env = {**os.environ, **context.extra_env}
        if context.code_dir is not None:  # the snapshot comes before the editable install
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(context.code_dir), env.get("PYTHONPATH", "")) if p
            )
        process = subprocess.Popen(
            agent_command(system, spec_path),
            cwd=context.code_dir or REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop() ends helpers it forked
            env=env,
        )
    return Agent(process, spec, log_path)


def run_producer(
    system: SystemInfo,
    scenario: Scenario,
    server: BenchServer,
    context: RunContext,
    burst_due_ms: int = 0,
) -> dict[str, Any]:
    agent = start_agent(system, "producer", scenario, server, context, burst_due_ms=burst_due_ms)
    try:
        result = agent.wait_file(agent.out, PRODUCER_TIMEOUT_S)
        if result is None:
            raise AgentFailed(f"{system.name} producer did not finish in {PRODUCER_TIMEOUT_S} s")
        return result
    finally:
        agent.stop()


def start_worker(
    system: SystemInfo, scenario: Scenario, server: BenchServer, context: RunContext
) -> tuple[Agent, dict[str, Any]]:
    agent = start_agent(system, "worker", scenario, server, context, expected=scenario.jobs)
    ready = agent.wait_file(Path(agent.spec.ready_path), READY_TIMEOUT_S)
    if ready is None:
        agent.stop()
        raise AgentFailed(f"{system.name} worker not ready in {READY_TIMEOUT_S} s")
    if context.profile_to is not None:
        agent.profiler = attach_profiler(agent.process.pid, context.profile_to)
    ready["tree_cpu_ms"] = tree_cpu_ms(agent.process.pid)
    ready["go_ms"] = now_ms()
    agent.request("go")
    return agent, ready


def collect_deliveries(
    agent: Agent, ready: dict[str, Any], timeout_s: float
) -> tuple[dict[str, Any], float]:
    """The worker's deliveries (all, or what arrived by the deadline) and the CPU it spent.

    CPU is read from /proc for the worker and every process it started (Celery's pool child,
    RQ's scheduler), from its go to its last delivery (or the deadline).
    """
    result = agent.wait_file(agent.out, timeout_s)
    spent_ms = tree_cpu_ms(agent.process.pid) - float(ready["tree_cpu_ms"])
    if result is None:
        agent.request("dump")
        result = agent.wait_file(agent.out, DUMP_TIMEOUT_S)
    if result is None:  # nothing was delivered, so no process had anything to dump
        result = {"delivered": 0, "duplicates": 0, "first_ms": None, "last_ms": None}
        result["lateness_ms"], result["seqs"] = [], []
    return result, spent_ms


def burst_lead_s(system: SystemInfo, scenario: Scenario, context: RunContext) -> float:
    rate = context.enqueue_rate_hint.get(system.name, DEFAULT_ENQUEUE_RATE)
    return min(BURST_LEAD_MAX_S, max(scenario.burst_lead_min_s, 1.0 + 1.5 * scenario.jobs / rate))


def memory_per_job(
    server: BenchServer, before: ServerStats, jobs: int, system: SystemInfo
) -> dict[str, float | None]:
    after = server.settled_stats()
    # Loading a script is a one-off cost, not a per-job one.
    scripts_grown = after.scripts_memory - before.scripts_memory
    grown = after.used_memory - before.used_memory - scripts_grown
    found: dict[str, float | None] = {"redis_memory_bytes_per_pending_job": per_job(grown, jobs)}
    if system.name.startswith("redelay"):
        audit = server.memory_usage(AUDIT_KEY)
        found["redis_memory_bytes_per_pending_job_without_audit"] = per_job(grown - audit, jobs)
    return found


def run_scenario(
    system: SystemInfo,
    scenario: Scenario,
    context: RunContext,
    server: BenchServer | None = None,
    settled: Callable[[], bool] | None = None,
    *,
    per_job: bool = False,
) -> dict[str, Any]:
    """Runs one scenario on a fresh server, or on ``server`` when given (left running, with
    whatever the caller put in it: simulations.bench.probes.pending_scale fills it first); returns
    the record (see report.RECORD_FIELDS). With ``per_job`` the record also holds
    ``lateness_ms_by_seq``, each delivered job's lateness by its seq (for
    simulations.bench.probes.lateness_hops; not a field of the benchmark's JSON).

    The worker is stopped at once (``os._exit``) when its last job has been handled, which can
    be before its last acks reached Redis. A caller that runs the next scenario on the same
    server, with the same job ids, passes ``settled`` (true once no job is in flight): the worker
    is stopped only then, or after ``SETTLE_TIMEOUT_S`` with a note in the record."""
    own_server = server is None
    if server is None:
        server = BenchServer(context.workdir / f"redis-{system.name}-{scenario.name}")
    record: dict[str, Any] = {"system": system.name, "scenario": scenario.name}
    record["jobs"] = scenario.jobs
    worker: Agent | None = None
    started = time.monotonic()
    try:
        worker_ready: dict[str, Any] | None = None
        if scenario.kind in ("burst", "steady"):
            worker, worker_ready = start_worker(system, scenario, server, context)
        own_before = server.own_commands
        before = server.settled_stats()
        burst_due_ms = 0
        if scenario.kind == "burst":
            burst_due_ms = int(now_ms() + burst_lead_s(system, scenario, context) * 1000)
        produced = run_producer(system, scenario, server, context, burst_due_ms)
        added = int(produced["enqueued"])
        record["enqueue_jobs_per_s"] = round(produced["jobs_per_s"], 1)
        if added < scenario.jobs:
            record["jobs"] = added
            record.setdefault("notes", []).append(
                f"the producer added {added:,} of {scenario.jobs:,} jobs before it stopped"
            )
        record["enqueue_batch_api"] = produced["batch_api"]
        client_cpu_ms = float(produced["cpu_ms"])
        if scenario.kind == "immediate":
            context.enqueue_rate_hint[system.name] = produced["jobs_per_s"]
        if scenario.kind in ("immediate", "enqueue") or (
            scenario.kind == "burst" and now_ms() < burst_due_ms - 200
        ):
            record.update(memory_per_job(server, before, added, system))
        elif scenario.kind == "burst":
            record.setdefault("notes", []).append("filling ended after the due time")
        delivered = 0
        if scenario.deliver:
            if worker is None:
                worker, worker_ready = start_worker(system, scenario, server, context)
            assert worker_ready is not None
            if added < scenario.jobs:
                (worker.out.parent / (worker.out.name + ".expect")).write_text(str(added))
            wait_s = scenario.wait_s
            if scenario.kind == "burst":
                wait_s += max(0.0, (burst_due_ms - now_ms()) / 1000)
            deliveries, worker_cpu_ms = collect_deliveries(worker, worker_ready, wait_s)
            client_cpu_ms += worker_cpu_ms
            delivered = int(deliveries["delivered"])
            # The drain rate counts from when the jobs could first be delivered: the worker's go
            # (immediate) or the due time (burst); steady runs measure first to last delivery.
            starts = {"immediate": worker_ready["go_ms"], "burst": burst_due_ms}
            since_ms = starts.get(scenario.kind)
            record.update(delivery_fields(deliveries, added, since_ms))
            if per_job:
                record["lateness_ms_by_seq"] = dict(
                    zip(deliveries["seqs"], deliveries["lateness_ms"], strict=True)
                )
        own = server.own_commands - own_before
        after = server.stats()
        commands = after.commands - before.commands - own
        jobs_done = delivered if scenario.deliver else added
        calls = call_deltas(before, after)
        record.update(command_fields(system, calls, commands, jobs_done, scenario.deliver))
        record["client_cpu_ms_per_1k_jobs"] = per_1k(client_cpu_ms, jobs_done)
        record["redis_cpu_ms_per_1k_jobs"] = per_1k(after.cpu_ms - before.cpu_ms, jobs_done)
        record["redis_version"] = server.version()
        if settled is not None and worker is not None and not wait_settled(settled):
            record.setdefault("notes", []).append(
                f"jobs were still in flight {SETTLE_TIMEOUT_S:g} s after the last delivery"
            )
    finally:
        if worker is not None:
            worker.stop()
        if own_server:
            server.stop()
    record["wall_s"] = round(time.monotonic() - started, 2)
    return record


SETTLE_TIMEOUT_S = 10.0
SETTLE_POLL_S = 0.02


def wait_settled(settled: Callable[[], bool]) -> bool:
    """Polls ``settled`` until it is true (True) or ``SETTLE_TIMEOUT_S`` passed (False)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not settled():
        if time.monotonic() > deadline:
            return False
        time.sleep(SETTLE_POLL_S)  # waiting on another process's acks: nothing to wake us
    return True


def delivery_fields(
    deliveries: dict[str, Any], added: int, since_ms: float | None = None
) -> dict[str, Any]:
    lateness: list[float] = deliveries["lateness_ms"]
    delivered = int(deliveries["delivered"])
    missing = added - delivered
    fields: dict[str, Any] = {"delivered": delivered, "missing": missing}
    fields["duplicates"] = int(deliveries["duplicates"])
    first, last = deliveries["first_ms"], deliveries["last_ms"]
    rate = None
    if since_ms is not None and last is not None and last > since_ms:
        rate = round(delivered / ((last - since_ms) / 1000), 1)
    elif delivered > 1 and first is not None and last > first:
        rate = round((delivered - 1) / ((last - first) / 1000), 1)
    fields["delivered_jobs_per_s"] = rate
    fields.update(lateness_summary(lateness, missing))
    fields["lateness_ms_quantiles"] = quantiles(lateness)
    return fields


def call_deltas(before: ServerStats, after: ServerStats) -> dict[str, int]:
    """Calls per command in the window (scripts' inner commands included), ours left out."""
    grown = {
        name: calls - before.calls.get(name, 0)
        for name, calls in after.calls.items()
        if calls - before.calls.get(name, 0) > 0 and name not in ("info", "memory|usage")
    }
    return dict(sorted(grown.items(), key=lambda item: -item[1]))


SCRIPT_CALLS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
# What redelay's Python code sends itself; none of these runs inside its scripts, so their sum is
# the number of round trips (everything else in the stats ran inside a script).
REDELAY_CLIENT_COMMANDS = (*SCRIPT_CALLS, "blmove", "time", "script|load", "ping", "hset")


def command_fields(
    system: SystemInfo, calls: dict[str, int], commands: int, jobs: int, delivering: bool
) -> dict[str, Any]:
    unit = "delivered" if delivering else "enqueued"
    fields: dict[str, Any] = {
        "redis_commands": commands,
        "redis_calls_by_command": dict(list(calls.items())[:12]),
        f"redis_commands_per_{unit}_job": per_job(commands, jobs),
        f"redis_script_calls_per_{unit}_job": per_job(
            sum(calls.get(n, 0) for n in SCRIPT_CALLS), jobs
        ),
    }
    if system.name.startswith("redelay"):
        # HSET outside scripts is configure_topic, once per start; inside scripts it is per job,
        # so it is counted only when it is the one-off.
        trips = sum(calls.get(n, 0) for n in REDELAY_CLIENT_COMMANDS if n != "hset")
        fields[f"redis_round_trips_per_{unit}_job"] = per_job(trips, jobs)
    return fields
