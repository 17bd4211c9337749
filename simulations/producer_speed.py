"""Jobs/s added by the async producer from one event loop, next to the sync one from one thread.

Starts a private redis-server on a Unix socket (or uses ``--url``) and adds ``--jobs`` jobs,
one call each, due in an hour (so nothing is carried while measuring):

- sync: ``DelayQueue.add`` in a loop on one thread: one round trip after another;
- async: ``AsyncDelayQueue.add`` from ``--concurrency`` tasks on one event loop, so up to that
  many adds are on the wire at once over the client's connection pool.

Each mode gets its own namespace and a short warm-up (connecting, the clock sync, loading the
scripts) before the clock starts, and runs ``--rounds`` times; every round is printed and the
best is reported, because a shared machine's noise only ever slows a round down. The load
average is printed with the figures.

    python -m simulations.producer_speed                    # 5,000 jobs, 100 tasks, 3 rounds
    python -m simulations.producer_speed --jobs 20000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from actors import AsyncDelayQueue, DelayQueue
from actors.server.embedded import RedisProcess

TOPIC = "bench"
DELAY_S = 3_600
WARM_UP_JOBS = 50


@dataclass
class Result:
    mode: str
    jobs: int
    concurrency: int
    rounds_jobs_per_s: list[float]
    best_jobs_per_s: float


def sync_round(url: str, namespace: str, jobs: int) -> float:
    queue = DelayQueue(url, namespace=namespace, producer_only=True)
    try:
        for n in range(WARM_UP_JOBS):
            queue.add(TOPIC, f"warm-{n}", delay=DELAY_S)
        started = time.perf_counter()
        for n in range(jobs):
            queue.add(TOPIC, f"job-{n}", {"n": n}, delay=DELAY_S)
        elapsed = time.perf_counter() - started
        if queue.stats()[TOPIC]["delayed"] != jobs + WARM_UP_JOBS:
            raise SystemExit(f"sync: {namespace} does not hold every job added")
        return jobs / elapsed
    finally:
        queue.store.erase()
        queue.close()


async def async_round(url: str, namespace: str, jobs: int, concurrency: int) -> float:
    async with AsyncDelayQueue(url, namespace=namespace) as queue:
        for n in range(WARM_UP_JOBS):
            await queue.add(TOPIC, f"warm-{n}", delay=DELAY_S)
        next_job = iter(range(jobs))

        async def adder() -> None:
            for n in next_job:  # the tasks share one iterator: each job is added once
                await queue.add(TOPIC, f"job-{n}", {"n": n}, delay=DELAY_S)

        started = time.perf_counter()
        await asyncio.gather(*(adder() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        if (await queue.stats())[TOPIC]["delayed"] != jobs + WARM_UP_JOBS:
            raise SystemExit(f"async: {namespace} does not hold every job added")
    cleanup = DelayQueue(url, namespace=namespace, producer_only=True)
    cleanup.store.erase()
    cleanup.close()
    return jobs / elapsed


def measure(url: str, jobs: int, concurrency: int, rounds: int) -> list[Result]:
    sync_rates: list[float] = []
    async_rates: list[float] = []
    for r in range(rounds):  # alternated, so a burst of load on the machine hits both modes
        sync_rates.append(sync_round(url, f"speed-sync-{r}", jobs))
        print(f"round {r + 1}: sync {sync_rates[-1]:,.0f} jobs/s", file=sys.stderr)
        async_rates.append(asyncio.run(async_round(url, f"speed-async-{r}", jobs, concurrency)))
        print(f"round {r + 1}: async {async_rates[-1]:,.0f} jobs/s", file=sys.stderr)
    return [
        Result("sync add, one thread", jobs, 1, sync_rates, max(sync_rates)),
        Result(
            f"async add, one loop, {concurrency} tasks",
            jobs,
            concurrency,
            async_rates,
            max(async_rates),
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per mode and round")
    parser.add_argument("--concurrency", type=int, default=100, help="async tasks")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help="a Redis URL instead of a private redis-server")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(
        f"jobs={args.jobs} concurrency={args.concurrency} rounds={args.rounds} "
        f"load={load[0]:.2f},{load[1]:.2f},{load[2]:.2f} cpus={os.cpu_count()}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="redelay-producer-") as directory:
        if args.url:
            results = measure(args.url, args.jobs, args.concurrency, args.rounds)
        else:
            with RedisProcess(Path(directory)) as server:
                results = measure(server.url, args.jobs, args.concurrency, args.rounds)
    load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load": [*load, load_after], "results": [asdict(r) for r in results]}))
    else:
        for result in results:
            print(f"{result.mode:<32} {result.best_jobs_per_s:>10,.0f} jobs/s (best of rounds)")
        print(f"speed-up: {results[1].best_jobs_per_s / results[0].best_jobs_per_s:.1f}x")
        print(f"load average: {load[0]:.2f} before, {load_after:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
