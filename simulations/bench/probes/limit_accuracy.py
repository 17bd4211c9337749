"""Limit accuracy across processes: worker processes share one topic's rate and in-flight limits.

Starts a private redis-server and ``--workers`` worker processes (this script with ``--worker``).
Rate: the topic is limited to ``--rate`` jobs per second and holds more jobs than the run can
deliver; the rate actually held is read from the audit stream (each ``leased`` entry's id is the
server's time) and printed as the mean and per second over ``--seconds``. In flight: a second
topic with ``max_in_flight=--max-in-flight`` and handlers that take 5-30 ms; the most jobs leased
at once is replayed from the audit stream (a lease begins at ``leased`` and ends at ``acked``,
``failed``, ``expired``, ``released``, ``dead`` or a ``cancelled`` from leased). Exit 1 when the
mean rate is off by more than ``--tolerance`` or the in-flight limit was exceeded.

    python -m simulations.bench probe limit_accuracy  # 3 workers, 100/s over 60 s, 5 in flight
    python -m simulations.bench probe limit_accuracy --seconds 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from actors import DelayQueue, Job

from ..server import BenchServer

NAMESPACE = "limits"
RATED, FLIGHT = "rated", "flight"
_ADD_BATCH = 1_000
# Events that end a lease (a "cancelled" entry ends one only when it says from=leased).
_LEASE_ENDS = frozenset({"acked", "failed", "expired", "lost", "quarantined", "released", "dead"})


def run_worker(url: str, concurrency: int) -> None:
    """One worker process: no-op handlers on the rated topic, short sleeps on the other."""
    queue = DelayQueue(url, NAMESPACE)
    rng = random.Random(os.getpid())

    @queue.handler(RATED, concurrency=concurrency)
    def rated(job: Job) -> None:
        return None

    @queue.handler(FLIGHT, concurrency=concurrency)
    def flight(job: Job) -> None:
        time.sleep(rng.uniform(0.005, 0.03))  # the work whose overlap the limit bounds

    queue.install_signal_handlers(grace=5)
    queue.start()
    queue.wait()


def add(queue: DelayQueue, topic: str, count: int) -> None:
    for start in range(0, count, _ADD_BATCH):
        queue.add_many(
            {"topic": topic, "id": f"{topic}-{n}"}
            for n in range(start, min(start + _ADD_BATCH, count))
        )


def per_second(lease_ms: Sequence[int], seconds: int) -> list[int]:
    """Leases in each whole second from the first one, for ``seconds`` seconds."""
    if not lease_ms:
        return [0] * seconds
    start = lease_ms[0]
    counts = Counter((ms - start) // 1000 for ms in lease_ms)
    return [counts.get(s, 0) for s in range(seconds)]


def most_in_flight(entries: Iterable[tuple[str, dict[str, str]]], topic: str) -> int:
    """The most leases of ``topic`` open at once, replayed in stream order (one shard)."""
    open_now = most = 0
    for _, fields in entries:
        if fields.get("t") != topic:
            continue
        event = fields["e"]
        if event == "leased":
            open_now += 1
            most = max(most, open_now)
        elif event in _LEASE_ENDS or (event == "cancelled" and fields.get("from") == "leased"):
            open_now -= 1
    return most


def leased_ms(entries: Iterable[tuple[str, dict[str, str]]], topic: str) -> list[int]:
    """Server time (the stream id's ms) of each lease of ``topic``."""
    return [
        int(entry_id.split("-", 1)[0])
        for entry_id, fields in entries
        if fields.get("t") == topic and fields["e"] == "leased"
    ]


def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    admin = DelayQueue(url, NAMESPACE, producer_only=True)
    admin.limit(RATED, rate=(args.rate, 1))
    admin.limit(FLIGHT, max_in_flight=args.max_in_flight)
    # More than the run can deliver, so the rate, never the backlog, decides.
    rated_jobs = args.rate * (args.seconds + 5)
    add(admin, RATED, rated_jobs)
    add(admin, FLIGHT, args.flight_jobs)
    concurrency = ["--concurrency", str(args.concurrency)]
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "simulations.bench.probes.limit_accuracy",
                "--worker",
                url,
                *concurrency,
            ]
        )
        for _ in range(args.workers)
    ]
    try:
        # The window opens at the first lease (starting processes takes seconds on a busy
        # machine) and the workers stop a second after it closes.
        while admin.stats()[RATED]["ready"] == rated_jobs:
            time.sleep(0.05)  # waiting for the workers to start
        time.sleep(args.seconds + 1)  # the run's length is the measurement
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=30)
    entries = list(admin.store.iter_audit())
    stats = admin.stats()
    admin.close()
    seconds = per_second(leased_ms(entries, RATED), args.seconds)
    mean = sum(seconds) / args.seconds
    return {
        "workers": args.workers,
        "rate_limit_per_s": args.rate,
        "seconds": args.seconds,
        "mean_jobs_per_s": round(mean, 2),
        "per_second": seconds,
        "min_per_s": min(seconds),
        "max_per_s": max(seconds),
        "max_in_flight_limit": args.max_in_flight,
        "max_in_flight_seen": most_in_flight(entries, FLIGHT),
        "flight_jobs_left": stats.get(FLIGHT, {}).get("ready", 0),
        "load": os.getloadavg(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--rate", type=int, default=100, help="jobs per second (default 100)")
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--max-in-flight", type=int, default=5)
    parser.add_argument("--flight-jobs", type=int, default=2_000)
    parser.add_argument("--tolerance", type=float, default=5.0, help="jobs/s the mean may be off")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker, args.concurrency)
        return 0
    with tempfile.TemporaryDirectory() as directory, BenchServer(Path(directory)) as server:
        result = measure(args, server.url)
    ok = (
        abs(result["mean_jobs_per_s"] - args.rate) <= args.tolerance
        and result["max_in_flight_seen"] <= args.max_in_flight
    )
    if args.json:
        print(json.dumps({**result, "ok": ok}))
    else:
        print(
            f"{args.workers} worker processes, rate=({args.rate}, 1): mean "
            f"{result['mean_jobs_per_s']:.2f} jobs/s over {args.seconds} s, per second "
            f"{result['min_per_s']}-{result['max_per_s']}: {result['per_second']}"
        )
        print(
            f"max_in_flight={args.max_in_flight}: at most {result['max_in_flight_seen']} leased at "
            f"once (from the audit stream); {result['flight_jobs_left']} jobs still ready"
        )
        print(f"load average {result['load'][0]:.2f}; {'ok' if ok else 'OFF TARGET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
