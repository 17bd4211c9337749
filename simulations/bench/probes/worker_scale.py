"""Delivered jobs/s and Redis CPU per job with 1, 2, 4 worker processes on one Redis (issue 15).

For each ``--workers`` K, one private redis-server (a Unix socket) gets ``--jobs`` jobs due now
(``Store.add_many``, 1,000 a call); then K worker processes start, each a DelayQueue with one
no-op handler (``--concurrency`` threads) that counts the jobs it ran. The topic is paused
while they start; once all have started it is resumed, and the run ends when the namespace holds
no delayed, ready or leased job. Reported per K: delivered jobs/s (resume to last ack), missing
and duplicated jobs (redelay delivers at least once: a job run twice is counted, not hidden), Redis
CPU per job (INFO cpu used_cpu_user + used_cpu_sys, delta over the run) and the Redis process's
utilisation (that delta over the wall time; 100% is one core), and the workers' CPU per job.

With ``--pin`` (the default on 2 or more cores) Redis runs on core 1 and every worker on core 0
(simulations/bench/server.py), so the workers share one core whatever K is: the figures show
where that core and Redis's one core run out. ``--no-pin`` lets the kernel place them.

    python -m simulations.bench probe worker_scale                       # a smoke run, seconds
    python -m simulations.bench probe worker_scale --jobs 200000 --workers 1 2 4 --repeat 2 \\
        --json-out simulations/out/worker_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from actors import DelayQueue, Job
from actors.clock import SystemClock
from actors.storage.store import Store

from ..scenarios import FILL_BATCH_JOBS
from ..server import BenchServer, can_pin, cpu_ms_of, pin_clients, pinning_text

NAMESPACE = "scale"
TOPIC = "work"
POLL_S = 0.02  # how often the runner reads the counters; the resolution of the wall time
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot, from /proc/stat's first line."""
    values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle and iowait
    return sum(values) - idle, sum(values)


def redis_cpu_s(client: redis.Redis) -> float:
    info: Any = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- one worker process: python -m simulations.bench.probes.worker_scale --serve URL OUT JOBS N


def serve(url: str, out: Path, jobs: int, concurrency: int) -> None:
    """Runs a DelayQueue until ``<out>.stop`` appears; then writes one byte per job: how many
    times this process ran it. ``<out>.ready`` says it started (the runner paused the topic)."""
    runs = bytearray(jobs)
    lock = threading.Lock()
    queue = DelayQueue(url, NAMESPACE)

    @queue.handler(TOPIC, concurrency=concurrency)
    def handle(job: Job) -> None:
        with lock:
            runs[int(job.id)] = min(255, runs[int(job.id)] + 1)

    sibling = out.with_name
    queue.start()
    sibling(out.name + ".ready").write_text(str(os.getpid()))
    while not sibling(out.name + ".stop").exists():
        time.sleep(POLL_S)
    queue.stop(grace=5)
    with lock:
        temporary = sibling(out.name + ".tmp")
        temporary.write_bytes(bytes(runs))
        os.replace(temporary, out)


# -- the runner ------------------------------------------------------------------------------


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    out: Path

    def signal(self, what: str) -> None:
        self.out.with_name(self.out.name + "." + what).touch()


def start_workers(
    url: str, k: int, jobs: int, concurrency: int, workdir: Path, code_dir: Path | None = None
) -> list[Worker]:
    """``code_dir``: a snapshot of the code for the workers to import (simulations.bench's, see
    snapshot_code), put before the editable install; None: the checkout this runs from."""
    env = dict(os.environ)
    if code_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(code_dir), env.get("PYTHONPATH", "")) if p
        )
    workers = []
    for n in range(k):
        out = workdir / f"worker-{k}-{n}.runs"
        command = [
            sys.executable,
            "-m",
            "simulations.bench.probes.worker_scale",
            "--serve",
            url,
            str(out),
        ]
        command += [str(jobs), str(concurrency)]
        log = (workdir / f"worker-{k}-{n}.log").open("wb")
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=code_dir
        )
        workers.append(Worker(process, out))
    deadline = time.monotonic() + READY_TIMEOUT_S
    for worker in workers:
        while not worker.out.with_name(worker.out.name + ".ready").exists():
            if worker.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker {worker.out.name} did not start (see its .log)")
            time.sleep(POLL_S)
    return workers


def fill(store: Store, jobs: int) -> None:
    for first in range(0, jobs, FILL_BATCH_JOBS):
        ids = range(first, min(jobs, first + FILL_BATCH_JOBS))
        store.add_many([store.new_job(TOPIC, str(n), None) for n in ids])


def tally(per_worker: Sequence[bytes]) -> tuple[int, int, int]:
    """(jobs run at least once, jobs never run, extra runs) from each worker's runs per job."""
    runs = [sum(times) for times in zip(*per_worker, strict=True)]
    delivered = sum(1 for times in runs if times)
    return delivered, len(runs) - delivered, sum(times - 1 for times in runs if times > 1)


def pending(store: Store) -> int:
    counts = store.stats().get(TOPIC, {})
    return sum(counts.get(state, 0) for state in ("delayed", "ready", "leased"))


def unpin(pid: int) -> None:
    """Lets every thread of ``pid`` run on any core again (BenchServer pinned it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), range(os.cpu_count() or 1))


def run_one(
    k: int, args: argparse.Namespace, workdir: Path, pinned: bool, code_dir: Path | None = None
) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    server = BenchServer(workdir / "redis")  # pinned to REDIS_CORE when it can be
    workers: list[Worker] = []
    try:
        if not pinned and can_pin():
            unpin(server.pid)
        store = Store(server.client, NAMESPACE, SystemClock())
        fill(store, args.jobs)
        # Paused while the workers start (connections, clock sync, actors), so the run measures
        # delivery and not start-up; resuming wakes every listener at once.
        store.pause(TOPIC)
        workers = start_workers(
            server.process.url, k, args.jobs, args.concurrency, workdir, code_dir
        )
        load_before = os.getloadavg()
        cpu_before = [cpu_ms_of(w.process.pid) for w in workers]
        ticks_before = machine_ticks()
        redis_before, started = redis_cpu_s(server.client), time.monotonic()
        store.pause(TOPIC, False)  # resume
        deadline = started + args.timeout
        while pending(store) > 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"K={k}: not every job delivered in {args.timeout} s")
            time.sleep(POLL_S)
        wall_s = time.monotonic() - started
        redis_s = redis_cpu_s(server.client) - redis_before
        worker_ms = sum(cpu_ms_of(w.process.pid) for w in workers) - sum(cpu_before)
        load_after = os.getloadavg()
        busy, total = (
            after - before for after, before in zip(machine_ticks(), ticks_before, strict=True)
        )
        for worker in workers:
            worker.signal("stop")
        for worker in workers:
            worker.process.wait(timeout=STOP_TIMEOUT_S)
        delivered, missing, duplicates = tally([w.out.read_bytes() for w in workers])
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
        server.stop()
    return {
        "workers": k,
        "jobs": args.jobs,
        "delivered": delivered,
        "missing": missing,
        "duplicates": duplicates,
        "wall_s": round(wall_s, 3),
        "delivered_jobs_per_s": round(delivered / wall_s, 1),
        "redis_cpu_us_per_job": round(redis_s / max(1, delivered) * 1e6, 2),
        "redis_cpu_utilisation": round(redis_s / wall_s, 3),
        "workers_cpu_us_per_job": round(worker_ms * 1000 / max(1, delivered), 2),
        "workers_cpu_utilisation": round(worker_ms / 1000 / wall_s, 3),
        # Every process on the machine, ours and others': how much of the cores was left.
        "machine_cpu_busy": round(busy / max(1, total), 3),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }


SUMMARY_FIELDS = (
    "delivered_jobs_per_s",
    "redis_cpu_us_per_job",
    "redis_cpu_utilisation",
    "workers_cpu_us_per_job",
    "workers_cpu_utilisation",
    "machine_cpu_busy",
)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {"workers": runs[0]["workers"], "runs": len(runs)}
    for name in ("jobs", "delivered", "missing", "duplicates"):
        found[name] = sum(r[name] for r in runs)
    for name in SUMMARY_FIELDS:
        values = [r[name] for r in runs]
        found[name] = round(statistics.median(values), 3)
        found[name + "_range"] = [min(values), max(values)]
    return found


def report(result: dict[str, Any]) -> str:
    lines = [
        f"machine: {result['cpus']} cores; {result['pinning']}",
        f"load average at start {result['load_average_start']}, at end "
        f"{result['load_average_end']}",
        f"{result['settings']['jobs']:,} jobs due now per run, handler concurrency "
        f"{result['settings']['concurrency']} per worker; median (min-max) of "
        f"{result['settings']['repeat']} runs per K, alternated between K",
    ]
    for s in result["summary"]:

        def spread(name: str, scale: float = 1.0, s: dict[str, Any] = s) -> str:
            low, high = s[name + "_range"]
            return f"{s[name] * scale:,.1f} ({low * scale:,.1f}-{high * scale:,.1f})"

        lines.append(
            f"K={s['workers']}: {spread('delivered_jobs_per_s')} jobs/s; delivered "
            f"{s['delivered']:,} of {s['jobs']:,}, missing {s['missing']}, duplicates "
            f"{s['duplicates']}; Redis CPU {spread('redis_cpu_us_per_job')} us/job, Redis busy "
            f"{spread('redis_cpu_utilisation', 100)}% of a core; workers' CPU "
            f"{spread('workers_cpu_us_per_job')} us/job, {spread('workers_cpu_utilisation', 100)}%"
            f" of a core; all {result['cpus']} cores {spread('machine_cpu_busy', 100)}% busy"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.bench probe worker_scale", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs due now per run")
    parser.add_argument("--concurrency", type=int, default=100, help="handler threads per worker")
    parser.add_argument("--repeat", type=int, default=1, help="runs per K")
    parser.add_argument("--timeout", type=float, default=600.0, help="per run")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--json-out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if min(args.workers) < 1 or args.jobs < 1 or args.concurrency < 1 or args.repeat < 1:
        parser.error("--workers, --jobs, --concurrency and --repeat must be positive")
    return args


def measure(args: argparse.Namespace, code_dir: Path | None = None) -> dict[str, Any]:
    """The whole measurement as one JSON-able dict (simulations.bench calls it as a section of
    its run). With ``--pin`` (and 2 or more cores) it pins this process, so the workers too."""
    pinned = args.pin and can_pin()
    if pinned:
        pin_clients()  # this process and the workers it starts
    result: dict[str, Any] = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "pinned": pinned,
        "pinning": pinning_text(pinned, "the workers and this runner"),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }
    runs: dict[int, list[dict[str, Any]]] = {k: [] for k in args.workers}
    with tempfile.TemporaryDirectory(prefix="redelay-workers-") as directory:
        for n in range(args.repeat):
            for k in args.workers:  # alternated, so a change in the machine's load hits every K
                print(f"K={k} run {n + 1}", file=sys.stderr, flush=True)
                workdir = Path(directory) / f"{k}-{n}"
                runs[k].append(run_one(k, args, workdir, pinned, code_dir))
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    result["runs"] = [r for k in args.workers for r in runs[k]]
    result["summary"] = [summarise(runs[k]) for k in args.workers]
    return result


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--serve"]:
        serve(argv[1], Path(argv[2]), int(argv[3]), int(argv[4]))
        return 0
    args = parse_args(argv)
    result = measure(args)
    text = json.dumps(result)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(text)
    print(text if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
