"""Delivered jobs/s and lateness with 1, 3 and 6 shards on a local Redis Cluster.

Starts a Redis Cluster of 3 masters and 3 replicas on loopback (plus one plain redis-server for a
baseline), and for each configuration runs one worker process's actors (a DelayQueue with a no-op
handler) against ``--jobs`` jobs that all fall due at the same moment ``--lead-s`` after they were
added: the drain rate (jobs/s from the due time to the last handler start) and the lateness of
each start after its due time (p50, p99, max) are what a burst of due work costs. It also reads
each Redis process's CPU time (/proc) and this process's, so the report says where the time went:
CPU ms per 1,000 jobs on each Redis node (while adding, and while delivering) and in the worker.

    python -m simulations.bench probe shard_bench                      # 20,000 jobs, shards 1, 3, 6
    python -m simulations.bench probe shard_bench --jobs 5000 --json   # smaller, one JSON object

One ``--seed`` drives the job ids' order, so a run is repeatable up to thread scheduling.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from actors import DelayQueue, Job
from actors.server.embedded import RedisProcess

from ...crash.local_redis import LocalCluster, ServerProcess

TOPIC = "bench"
ADD_BATCH = 500
_TICKS_S = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    setup: str
    mode: str
    shards: int
    jobs: int
    drain_s: float
    jobs_per_s: float
    adds_per_s: float
    late_p50_ms: float
    late_p99_ms: float
    late_max_ms: float
    worker_cpu_ms_per_1k: float
    redis_cpu_ms_per_1k: dict[str, float] = field(default_factory=dict)
    redis_add_cpu_ms_per_1k: dict[str, float] = field(default_factory=dict)
    connections_per_node: dict[str, int] = field(default_factory=dict)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_S


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Recorder:
    def __init__(self, queue: DelayQueue, expected: int) -> None:
        self.queue = queue
        self.expected = expected
        self.late_ms: list[int] = []
        self.last_ms = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def record(self, job: Job) -> None:
        now = self.queue.clock.now_ms()
        with self.lock:
            self.late_ms.append(now - job.due_ms)
            self.last_ms = max(self.last_ms, now)
            if len(self.late_ms) >= self.expected:
                self.done.set()


def _percentile(values: Sequence[int], share: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * share))])


def run_one(
    setup: str,
    url: str,
    shards: int,
    jobs: int,
    lead_s: float,
    concurrency: int,
    seed: int,
    servers: dict[str, ServerProcess | RedisProcess],
    window_s: float = 0.0,
) -> Run:
    """``window_s`` 0: every job due at once (a burst); otherwise due times spread evenly over
    the window (a steady rate of jobs / window_s)."""
    namespace = f"bench-{setup}-{shards}-{'steady' if window_s else 'burst'}"
    queue = DelayQueue(url, namespace, shards=shards, sweep_interval_s=1.0)
    recorder = Recorder(queue, jobs)
    queue.handler(TOPIC, concurrency=concurrency, timeout=30)(recorder.record)
    ids = [f"job-{n}" for n in range(jobs)]
    random.Random(seed).shuffle(ids)
    queue.start()
    due_ms = queue.clock.now_ms() + round(lead_s * 1000)
    adding = time.monotonic()
    add_cpu_before = {name: _cpu_s(_pid(s)) for name, s in servers.items()}
    for start in range(0, jobs, ADD_BATCH):
        batch = ids[start : start + ADD_BATCH]
        specs = [
            {"topic": TOPIC, "id": i, "at": (due_ms + _offset_ms(i, jobs, window_s)) / 1000}
            for i in batch
        ]
        queue.add_many(specs)
    add_s = time.monotonic() - adding
    add_cpu = {name: _cpu_s(_pid(s)) - add_cpu_before[name] for name, s in servers.items()}
    if queue.clock.now_ms() >= due_ms:
        raise SystemExit(f"adding {jobs} jobs took longer than --lead-s {lead_s}: raise it")
    time.sleep(max(0.0, (due_ms - queue.clock.now_ms()) / 1000 - 0.05))  # until just before due
    redis_before = {name: _cpu_s(_pid(s)) for name, s in servers.items()}
    self_before = _self_cpu_s()
    if not recorder.done.wait(timeout=600):
        raise SystemExit(f"{setup} shards={shards}: only {len(recorder.late_ms)} of {jobs} ran")
    self_cpu = _self_cpu_s() - self_before
    redis_cpu = {name: _cpu_s(_pid(s)) - redis_before[name] for name, s in servers.items()}
    connections = {name: _connections(s) for name, s in servers.items()}
    queue.stop(grace=5)
    drain_s = max(0.001, (recorder.last_ms - due_ms) / 1000)  # includes the window
    per_1k = 1000 / jobs * 1000
    return Run(
        setup=setup,
        mode=f"steady {jobs / window_s:.0f}/s" if window_s else "burst",
        shards=shards,
        jobs=jobs,
        drain_s=round(drain_s, 3),
        jobs_per_s=round(jobs / drain_s),
        adds_per_s=round(jobs / add_s),
        late_p50_ms=statistics.median(recorder.late_ms),
        late_p99_ms=_percentile(recorder.late_ms, 0.99),
        late_max_ms=float(max(recorder.late_ms)),
        worker_cpu_ms_per_1k=round(self_cpu * per_1k, 1),
        redis_cpu_ms_per_1k={k: round(v * per_1k, 1) for k, v in redis_cpu.items() if v > 0},
        redis_add_cpu_ms_per_1k={k: round(v * per_1k, 1) for k, v in add_cpu.items() if v > 0},
        connections_per_node={k: v for k, v in connections.items() if v > 0},
    )


def _offset_ms(job_id: str, jobs: int, window_s: float) -> float:
    """Where in the window a job falls due: by its number, so the rate is even."""
    return int(job_id.rsplit("-", 1)[1]) * window_s * 1000 / jobs


def _pid(server: ServerProcess | RedisProcess) -> int:
    assert server.process is not None
    return server.process.pid


def _connections(server: ServerProcess | RedisProcess) -> int:
    """Clients connected to the server, not counting the one asking."""
    client = server.client()
    try:
        return int(client.info("clients")["connected_clients"]) - 1
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 3, 6])
    parser.add_argument("--lead-s", type=float, default=8.0, help="due this long after adding")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--window-s",
        type=float,
        default=0.0,
        help="spread due times over this many seconds (steady rate) instead of all at once",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-baseline", action="store_true", help="skip the plain server run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    print(
        f"shard_bench: jobs={args.jobs} shards={args.shards} lead_s={args.lead_s} "
        f"concurrency={args.concurrency} window_s={args.window_s} seed={args.seed} "
        f"cpus={os.cpu_count()}",
        file=sys.stderr,
    )
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="redelay-shard-bench-") as directory:
        if not args.no_baseline:
            server = RedisProcess(Path(directory) / "single").start()
            try:
                runs.append(
                    run_one(
                        "single",
                        server.url,
                        1,
                        args.jobs,
                        args.lead_s,
                        args.concurrency,
                        args.seed,
                        {"single": server},
                        args.window_s,
                    )
                )
            finally:
                server.kill()
            _show(runs[-1], args.json)
        with LocalCluster(Path(directory) / "cluster") as cluster:
            masters = set(cluster.master_ports())
            nodes: dict[str, ServerProcess | RedisProcess] = {
                f"{'master' if n.port in masters else 'replica'}:{n.port}": n for n in cluster.nodes
            }
            for shards in args.shards:
                runs.append(
                    run_one(
                        "cluster",
                        cluster.url(),
                        shards,
                        args.jobs,
                        args.lead_s,
                        args.concurrency,
                        args.seed,
                        dict(nodes),
                        args.window_s,
                    )
                )
                _show(runs[-1], args.json)
    if args.json:
        print(json.dumps([asdict(r) for r in runs], indent=2))
    return 0


def _show(run: Run, as_json: bool) -> None:
    if as_json:
        return
    masters = ", ".join(f"{k}={v:g}" for k, v in run.redis_cpu_ms_per_1k.items())
    adds = ", ".join(f"{k}={v:g}" for k, v in run.redis_add_cpu_ms_per_1k.items())
    print(
        f"{run.setup:8} {run.mode} shards={run.shards}: {run.jobs_per_s:>6} jobs/s "
        f"(drain {run.drain_s:.2f}s, adds {run.adds_per_s}/s); late p50 {run.late_p50_ms:.0f} ms, "
        f"p99 {run.late_p99_ms:.0f} ms, max {run.late_max_ms:.0f} ms; CPU ms per 1k jobs: "
        f"worker {run.worker_cpu_ms_per_1k:g}, redis delivering [{masters}], "
        f"redis adding [{adds}]; "
        f"connections {run.connections_per_node}",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
