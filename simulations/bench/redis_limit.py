"""What one Redis can carry: redis-benchmark figures and the server-side cost of redelay's scripts.

Two measurements, each on a fresh private redis-server pinned to the Redis core:
- ``redis-benchmark`` (pinned to the client core, like every client) for the commands redelay's
  scripts use most, shaped like redelay's own (the added audit entry, a ~130-byte job record);
- the scripts themselves at realistic batch sizes, driven through the Store with a fake clock:
  INFO commandstats gives the microseconds Redis spent inside EVALSHA per call, so dividing by the
  jobs per call gives the server time per job per transition. Summed over a job's life (add,
  carry, lease, ack) that bounds the jobs/s one Redis core could carry with redelay's scripts,
  before the cost of reading requests and writing replies (which the runs' Redis CPU figures
  include).
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.clock import FakeClock
from actors.storage.store import Store
from actors.values import NewJob

from .jobs import BenchJob
from .server import BenchServer

RECORD_BYTES = 130  # about the size of a packed job record with a 100-byte body
AUDIT_ADDED = (
    "xadd audit MAXLEN ~ 1000000 * e added t bench i job-__rand_int__ a 1 ms 1700000000000 "
    "due 1700000060000 to delayed"
)
BENCHMARK_COMMANDS = {
    "LPUSH": "lpush ready bench|job-__rand_int__",
    "ZADD": "zadd delayed __rand_int__ bench|job-__rand_int__",
    "HSET": "hset jobs bench|job-__rand_int__ " + "x" * RECORD_BYTES,
    "XADD": AUDIT_ADDED,
}
TOPIC = "bench"


def redis_benchmark(server: BenchServer, requests: int) -> list[dict[str, Any]]:
    """rps of each command without pipelining and with 16 commands per round trip."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return [{"skipped": "redis-benchmark is not on PATH"}]
    results = []
    for name, command in BENCHMARK_COMMANDS.items():
        for pipeline in (1, 16):
            args = [binary, "-s", server.socket_path, "-n", str(requests), "-r", "1000000"]
            args += ["-c", "50", "-P", str(pipeline), "--csv", *command.split(" ")]
            out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
            rows = list(csv.DictReader(io.StringIO(out)))
            rps = float(rows[-1]["rps"]) if rows else 0.0
            results.append({"command": name, "pipeline": pipeline, "requests_per_s": rps})
            server.client.flushall()
    return results


def _jobs(store: Store, first: int, count: int, due_ms: int) -> list[NewJob]:
    return [
        store.new_job(TOPIC, BenchJob(seq, due_ms).id, BenchJob(seq, due_ms).body(), due_ms=due_ms)
        for seq in range(first, first + count)
    ]


def _command_usec(server: BenchServer) -> dict[str, tuple[int, int]]:
    """Per command (calls, usec) since the last CONFIG RESETSTAT. A script's inner commands are
    counted under their own names too, so EVALSHA's time includes theirs."""
    server.own_commands += 1
    stats: Any = server.client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(entry["calls"]), int(entry["usec"]))
        for name, entry in stats.items()
        if isinstance(entry, dict)
    }


def _measure(server: BenchServer, jobs: int, action: Callable[[], int]) -> dict[str, Any]:
    """Runs ``action`` (which returns how many jobs it handled) until ``jobs`` are done."""
    server.client.config_resetstat()
    done, started = 0, time.perf_counter()
    while done < jobs:
        handled = action()
        if handled == 0:
            break
        done += handled
    wall_s = time.perf_counter() - started
    by_command = _command_usec(server)
    calls, usec = by_command.pop("evalsha", (0, 0))
    inner = {
        name: round(spent / max(1, done), 2)
        for name, (_, spent) in sorted(by_command.items(), key=lambda item: -item[1][1])
        if name not in ("info", "config|resetstat")
    }
    return {
        "jobs": done,
        "calls": calls,
        "usec_per_call": round(usec / max(1, calls), 1),
        "usec_per_job": round(usec / max(1, done), 2),
        "inner_usec_per_job": inner,
        "client_jobs_per_s": round(done / wall_s, 1),
    }


def script_costs(directory: Path, jobs: int) -> dict[str, Any]:
    """Server microseconds per job for each transition of a delayed job's life, audit on."""
    server = BenchServer(directory)
    try:
        clock = FakeClock(1_700_000_000_000)
        store = Store(server.client, "limit", clock)
        due_ms = clock.now_ms() + 60_000
        costs: dict[str, Any] = {}
        added = 0

        def add(batch: int) -> Callable[[], int]:
            def step() -> int:
                nonlocal added
                store.add_many(_jobs(store, added, batch, due_ms))
                added += batch
                return batch

            return step

        costs["add (1 job per call)"] = _measure(server, max(1, jobs // 50), add(1))
        costs["add (100 per call)"] = _measure(server, jobs, add(100))
        clock.advance(60_000)
        costs["carry (1,000 per call)"] = _measure(server, added, lambda: store.carry(1_000)[0])
        leases = []

        def lease() -> int:
            batch = store.lease(TOPIC, 100)
            leases.extend(batch)
            return len(batch)

        costs["lease (100 per call)"] = _measure(server, added, lease)

        def ack() -> int:
            batch = leases[-100:]
            del leases[-100:]
            store.ack_many([(x.topic, x.id, x.token) for x in batch])
            return len(batch)

        costs["ack (100 per call)"] = _measure(server, added, ack)
        life = ("add (100 per call)", "carry (1,000 per call)", "lease (100 per call)")
        per_job = sum(costs[name]["usec_per_job"] for name in (*life, "ack (100 per call)"))
        immediate = per_job - costs["carry (1,000 per call)"]["usec_per_job"]
        return {
            "transitions": costs,
            "delayed_job_usec": round(per_job, 2),
            "delayed_jobs_per_s_ceiling": round(1e6 / per_job) if per_job else None,
            "immediate_job_usec_approx": round(immediate, 2),
            "immediate_jobs_per_s_ceiling_approx": round(1e6 / immediate) if immediate else None,
        }
    finally:
        server.stop()


def measure(workdir: Path, quick: bool) -> dict[str, Any]:
    server = BenchServer(workdir / "redis-benchmark")
    try:
        figures = redis_benchmark(server, 20_000 if quick else 500_000)
        version = server.version()
    finally:
        server.stop()
    return {
        "redis_version": version,
        "redis_benchmark": figures,
        "scripts": script_costs(workdir / "redis-scripts", 5_000 if quick else 100_000),
    }
