"""Peak memory and wall time of ``redelay verify`` and ``redelay replay`` on long audit streams.

Starts a private redis-server on a Unix socket and, for each of ``--entries``, fills a fresh
namespace (retention NONE, so nothing is trimmed) with about that many audit entries in which
nearly every job has ended: batches of jobs are added ready, leased and acked (three entries
each), and ``--live`` jobs are added due in an hour and stay. Then ``redelay verify --json`` and
``redelay replay --json`` run as subprocesses against it, one after the other, and each one's
peak RSS (``ru_maxrss`` of that child, from ``os.wait4``) and wall time are reported. The fold
should need memory for the live jobs, not for the stream: the peak should barely move between
sizes. The load average is printed with the figures.

    python -m simulations.replay_memory                          # 100,000 and 300,000 entries
    python -m simulations.replay_memory --entries 1000000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from actors.clock import SystemClock
from actors.server.embedded import RedisProcess
from actors.storage.store import Store, open_store
from actors.values import AuditRetention

TOPIC = "done"
LIVE_TOPIC = "waiting"
BATCH_JOBS = 5_000
ENTRIES_PER_ENDED_JOB = 3  # added (ready), leased, acked
LIVE_DELAY_MS = 3_600_000  # an hour: the live jobs stay delayed while the commands run


@dataclass
class Run:
    command: str
    entries: int
    events: int
    peak_rss_mb: float
    wall_s: float
    ok: bool


def fill(store: Store, entries: int, live: int) -> int:
    """Writes about ``entries`` audit entries, ``live`` of them jobs that stay; returns how many
    entries the stream holds."""
    ended = max(0, (entries - live) // ENTRIES_PER_ENDED_JOB)
    started = time.perf_counter()
    for start in range(0, ended, BATCH_JOBS):
        ids = [f"j{n}" for n in range(start, min(start + BATCH_JOBS, ended))]
        store.add_many([store.new_job(TOPIC, job_id, {}) for job_id in ids])
        leases = store.lease(TOPIC, len(ids))
        store.ack_many([(lease.topic, lease.id, lease.token) for lease in leases])
    for start in range(0, live, BATCH_JOBS):
        ids = [f"l{n}" for n in range(start, min(start + BATCH_JOBS, live))]
        store.add_many([store.new_job(LIVE_TOPIC, i, {}, delay_ms=LIVE_DELAY_MS) for i in ids])
    held = store.audit_length()
    took_s = time.perf_counter() - started
    print(
        f"  {held:,} entries ({ended:,} jobs ended, {live:,} live) in {took_s:.0f} s",
        file=sys.stderr,
    )
    return held


def run_cli(url: str, namespace: str, command: str, entries: int) -> Run:
    """Runs one redelay subcommand to the end; its own peak RSS comes from wait4's rusage."""
    argv = [sys.executable, "-m", "actors.cli", command, "--redis", url]
    argv += ["--namespace", namespace, "--json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # reaps it: Popen.wait would find it gone
        wall_s = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        reply = json.loads(out.read() or b"{}")
        if proc.returncode != 0:
            sys.stderr.write(err.read().decode(errors="replace"))
    events = int(reply.get("events", 0))
    ok = proc.returncode == 0 and events == entries and reply.get("anomaly_count", 0) == 0
    # Linux reports ru_maxrss in kilobytes.
    return Run(command, entries, events, usage.ru_maxrss / 1024, wall_s, ok)


def measure(url: str, sizes: Sequence[int], live: int) -> list[Run]:
    runs: list[Run] = []
    client = redis.Redis.from_url(url)
    for entries in sizes:
        namespace = f"replay-memory-{entries}"
        store = open_store(client, namespace, SystemClock(), retention=AuditRetention("NONE"))
        store.erase()
        print(f"{entries:,} entries: filling {namespace}", file=sys.stderr)
        held = fill(store, entries, live)
        for command in ("verify", "replay"):
            run = run_cli(url, namespace, command, held)
            print(
                f"  {command}: {run.peak_rss_mb:.0f} MB peak, {run.wall_s:.1f} s, ok={run.ok}",
                file=sys.stderr,
            )
            runs.append(run)
        store.erase()
    client.close()
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--entries",
        type=int,
        nargs="+",
        default=[100_000, 300_000],
        help="audit entries per run (default: 100000 300000)",
    )
    parser.add_argument("--live", type=int, default=1_000, help="jobs that stay live (1000)")
    parser.add_argument("--url", help="a Redis URL instead of a private redis-server")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(
        f"entries={args.entries} live={args.live} "
        f"load={load[0]:.2f},{load[1]:.2f},{load[2]:.2f} cpus={os.cpu_count()}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="redelay-replay-memory-") as directory:
        if args.url:
            runs = measure(args.url, args.entries, args.live)
        else:
            with RedisProcess(Path(directory)) as server:
                runs = measure(server.url, args.entries, args.live)
    load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load": [*load, load_after], "runs": [asdict(r) for r in runs]}))
    else:
        print(f"{'command':<8} {'entries':>10} {'events':>10} {'peak RSS':>10} {'wall':>8}  ok")
        for r in runs:
            print(
                f"{r.command:<8} {r.entries:>10,} {r.events:>10,} "
                f"{r.peak_rss_mb:>7.0f} MB {r.wall_s:>7.1f}s  {r.ok}"
            )
        print(f"load average: {load[0]:.2f} before, {load_after:.2f} after")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
