"""Jobs/s added by the producers: sync add, async add and add_many, with each side's CPU per job.

Starts a private redis-server on a Unix socket (or uses ``--url``) and adds ``--jobs`` jobs per
mode, due in an hour (so nothing is carried while measuring):

- sync: ``DelayQueue.add`` in a loop on one thread: one round trip after another;
- async: ``AsyncDelayQueue.add`` from ``--concurrency`` tasks on one event loop, so up to that
  many adds are on the wire at once over the client's connection pool;
- many-<n>: ``DelayQueue.add_many`` of ``n`` jobs per call on one thread (``--batch``, repeatable;
  100 and 1,000 by default), each job a mapping as users write it;
- stream-<n>: ``DelayQueue.add_stream`` of every job from one generator, in batches of ``n`` (the
  same ``--batch`` sizes): each batch is sent before the reply to the one before is read, so the
  producer builds a batch while Redis adds the last;
- async-stream-<n>: the same through ``AsyncDelayQueue.add_stream`` on one event loop.

Beside jobs/s each mode prints the CPU it cost per job on both sides of the socket: the
producer's (``time.process_time``, this process) and Redis's (``INFO cpu``, used_cpu_user +
used_cpu_sys, before and after), so a slow mode shows whether Python or the scripts are the limit.
On a busy machine jobs/s falls with the CPU it gets; the CPU per job barely moves.
With ``--pin`` (the default on 2 or more cores) Redis runs on core 1 and this process on core 0,
as in ``make bench``: a producer that overlaps its work with Redis's (stream) needs the two on
different cores to gain anything.

Each mode gets its own namespace and a short warm-up (connecting, the clock sync, loading the
scripts) before the clock starts, and runs ``--rounds`` times, the modes alternated; every round
is printed and the best is reported, because a shared machine's noise only ever slows a round
down. The load average is printed with the figures.

    python -m simulations.bench probe producer_speed  # 5,000 jobs, 100 tasks, 3 rounds
    python -m simulations.bench probe producer_speed --modes sync many --batch 1000 \
        --jobs 20000 --json
    python -m simulations.bench probe producer_speed --modes many stream --batch 1000 --jobs 200000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from actors import AsyncDelayQueue, DelayQueue

from ..server import BenchServer, can_pin, pin_clients, pinning_text

TOPIC = "bench"
DELAY_S = 3_600
WARM_UP_JOBS = 50
MODES = ("sync", "async", "many", "stream", "async-stream")


@dataclass
class Round:
    jobs_per_s: float
    client_cpu_us_per_job: float
    redis_cpu_us_per_job: float


@dataclass(frozen=True)
class Producer:
    """What one mode times: the call, on which queue, and how many jobs or tasks at once."""

    call: str  # "add", "add_many" or "add_stream"
    is_async: bool = False
    batch: int = 1  # jobs per call or batch (1 for add)
    tasks: int = 1  # concurrent tasks (async add), else 1

    @property
    def mode(self) -> str:
        """The mode's name in the output: "add_stream, 200 per batch" and so on."""
        if self.call == "add":
            return (
                f"async add, one loop, {self.tasks} tasks"
                if self.is_async
                else "sync add, one thread"
            )
        unit = "call" if self.call == "add_many" else "batch"
        return f"{'async ' if self.is_async else ''}{self.call}, {self.batch} per {unit}"


@dataclass
class Result:
    mode: str
    # The mode's parts, so a report need not parse its name.
    call: str
    is_async: bool
    batch: int
    jobs: int
    concurrency: int
    rounds: list[Round]
    best_jobs_per_s: float
    # Of the best round: where that round's time went.
    client_cpu_us_per_job: float
    redis_cpu_us_per_job: float


class CpuMeter:
    """Wall time, this process's CPU and the server's CPU over one timed block."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url)

    def _redis_cpu_s(self) -> float:
        info = self._client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def start(self) -> None:
        self._redis_s = self._redis_cpu_s()
        self._client_s = time.process_time()
        self._wall_s = time.perf_counter()

    def stop(self, jobs: int) -> Round:
        wall_s = time.perf_counter() - self._wall_s
        client_s = time.process_time() - self._client_s
        redis_s = self._redis_cpu_s() - self._redis_s
        return Round(jobs / wall_s, client_s / jobs * 1e6, redis_s / jobs * 1e6)

    def close(self) -> None:
        self._client.close()


def _check_and_erase(queue: DelayQueue, expected: int, mode: str) -> None:
    if queue.stats()[TOPIC]["delayed"] != expected:
        raise SystemExit(f"{mode}: {queue.namespace} does not hold every job added")
    queue.store.erase()


def _specs(first: int, end: int) -> Iterator[dict[str, Any]]:
    """The timed jobs first..end-1 as add_many and add_stream take them."""
    return (
        {"topic": TOPIC, "id": f"job-{n}", "body": {"n": n}, "delay": DELAY_S}
        for n in range(first, end)
    )


def _queue_round(
    url: str,
    namespace: str,
    jobs: int,
    meter: CpuMeter,
    mode: str,
    add: Callable[[DelayQueue], None],
) -> Round:
    """One timed round of a sync producer: a warm-up (connecting, the clock sync, loading the
    scripts), then ``add`` adds the ``jobs`` jobs, then every one is checked and erased."""
    queue = DelayQueue(url, namespace=namespace, producer_only=True)
    try:
        queue.add_many(
            {"topic": TOPIC, "id": f"warm-{n}", "delay": DELAY_S} for n in range(WARM_UP_JOBS)
        )
        meter.start()
        add(queue)
        measured = meter.stop(jobs)
        _check_and_erase(queue, jobs + WARM_UP_JOBS, mode)
        return measured
    finally:
        queue.close()


def sync_round(url: str, namespace: str, jobs: int, meter: CpuMeter) -> Round:
    def add(queue: DelayQueue) -> None:
        for n in range(jobs):
            queue.add(TOPIC, f"job-{n}", {"n": n}, delay=DELAY_S)

    return _queue_round(url, namespace, jobs, meter, "sync", add)


def many_round(url: str, namespace: str, jobs: int, batch: int, meter: CpuMeter) -> Round:
    def add(queue: DelayQueue) -> None:
        for first in range(0, jobs, batch):
            queue.add_many(_specs(first, min(first + batch, jobs)))

    return _queue_round(url, namespace, jobs, meter, f"many-{batch}", add)


def stream_round(url: str, namespace: str, jobs: int, batch: int, meter: CpuMeter) -> Round:
    def add(queue: DelayQueue) -> None:
        queue.add_stream(_specs(0, jobs), batch_size=batch)

    return _queue_round(url, namespace, jobs, meter, f"stream-{batch}", add)


async def async_stream_round(
    url: str, namespace: str, jobs: int, batch: int, meter: CpuMeter
) -> Round:
    async with AsyncDelayQueue(url, namespace=namespace) as queue:
        await queue.add_stream(
            {"topic": TOPIC, "id": f"warm-{n}", "delay": DELAY_S} for n in range(WARM_UP_JOBS)
        )
        meter.start()  # blocking, but before the clock starts and after the warm-up
        await queue.add_stream(_specs(0, jobs), batch_size=batch)
        measured = meter.stop(jobs)
    cleanup = DelayQueue(url, namespace=namespace, producer_only=True)
    try:
        _check_and_erase(cleanup, jobs + WARM_UP_JOBS, f"async-stream-{batch}")
    finally:
        cleanup.close()
    return measured


async def async_round(
    url: str, namespace: str, jobs: int, concurrency: int, meter: CpuMeter
) -> Round:
    async with AsyncDelayQueue(url, namespace=namespace) as queue:
        for n in range(WARM_UP_JOBS):
            await queue.add(TOPIC, f"warm-{n}", delay=DELAY_S)
        next_job = iter(range(jobs))

        async def adder() -> None:
            for n in next_job:  # the tasks share one iterator: each job is added once
                await queue.add(TOPIC, f"job-{n}", {"n": n}, delay=DELAY_S)

        meter.start()  # blocking, but before the clock starts and after the warm-up
        await asyncio.gather(*(adder() for _ in range(concurrency)))
        measured = meter.stop(jobs)
    cleanup = DelayQueue(url, namespace=namespace, producer_only=True)
    try:
        _check_and_erase(cleanup, jobs + WARM_UP_JOBS, "async")
    finally:
        cleanup.close()
    return measured


def measure(
    url: str,
    jobs: int,
    concurrency: int,
    rounds: int,
    modes: Sequence[str] = MODES,
    batches: Sequence[int] = (100, 1_000),
) -> list[Result]:
    runs: list[tuple[Producer, Callable[[str, CpuMeter], Round]]] = []
    if "sync" in modes:
        runs.append((Producer("add"), lambda ns, m: sync_round(url, ns, jobs, m)))
    if "async" in modes:
        runs.append(
            (
                Producer("add", is_async=True, tasks=concurrency),
                lambda ns, m: asyncio.run(async_round(url, ns, jobs, concurrency, m)),
            )
        )
    if "many" in modes:
        for size in batches:
            runs.append(
                (
                    Producer("add_many", batch=size),
                    lambda ns, m, size=size: many_round(url, ns, jobs, size, m),  # type: ignore[misc]
                )
            )
    if "stream" in modes:
        for size in batches:
            runs.append(
                (
                    Producer("add_stream", batch=size),
                    lambda ns, m, size=size: stream_round(url, ns, jobs, size, m),  # type: ignore[misc]
                )
            )
    if "async-stream" in modes:
        for size in batches:
            runs.append(
                (
                    Producer("add_stream", is_async=True, batch=size),
                    lambda ns, m, size=size: asyncio.run(  # type: ignore[misc]
                        async_stream_round(url, ns, jobs, size, m)
                    ),
                )
            )
    measured: list[list[Round]] = [[] for _ in runs]
    meter = CpuMeter(url)
    try:
        for r in range(rounds):  # alternated, so a burst of load on the machine hits every mode
            for n, (producer, run) in enumerate(runs):
                found = run(f"speed-{n}-{r}", meter)
                measured[n].append(found)
                print(f"round {r + 1}: {producer.mode:<32} {_shown(found)}", file=sys.stderr)
    finally:
        meter.close()
    results = []
    for (producer, _), found_rounds in zip(runs, measured, strict=True):
        best = max(found_rounds, key=lambda found: found.jobs_per_s)
        results.append(
            Result(
                producer.mode,
                producer.call,
                producer.is_async,
                producer.batch,
                jobs,
                producer.tasks,
                found_rounds,
                best.jobs_per_s,
                best.client_cpu_us_per_job,
                best.redis_cpu_us_per_job,
            )
        )
    return results


def _shown(found: Round) -> str:
    return (
        f"{found.jobs_per_s:>9,.0f} jobs/s, CPU per job: producer "
        f"{found.client_cpu_us_per_job:5.1f} µs, Redis {found.redis_cpu_us_per_job:5.1f} µs"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per mode and round")
    parser.add_argument("--concurrency", type=int, default=100, help="async tasks")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=list(MODES), help="which producers to run"
    )
    parser.add_argument(
        "--batch",
        type=int,
        action="append",
        help="jobs per add_many call and add_stream batch (default 100, 1000)",
    )
    parser.add_argument("--url", help="a Redis URL instead of a private redis-server")
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Redis on core 1, this process on core 0 (when there are 2 cores or more)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every mode's rounds on a private server (or ``--url``): the record ``--json`` prints."""
    batches = args.batch or [100, 1_000]
    pinned = args.pin and can_pin() and not args.url
    if pinned:
        pin_clients()  # before the server starts, which is then moved to its own core
    load = os.getloadavg()
    print(
        f"jobs={args.jobs} concurrency={args.concurrency} rounds={args.rounds} "
        f"modes={','.join(args.modes)} batches={','.join(map(str, batches))} "
        f"load={load[0]:.2f},{load[1]:.2f},{load[2]:.2f} cpus={os.cpu_count()} "
        f"{pinning_text(pinned, 'this producer')}",
        file=sys.stderr,
    )

    def measured(url: str) -> list[Result]:
        return measure(url, args.jobs, args.concurrency, args.rounds, args.modes, batches)

    with tempfile.TemporaryDirectory(prefix="redelay-producer-") as directory:
        if args.url:
            results = measured(args.url)
        else:
            with BenchServer(Path(directory), pin=pinned) as server:
                results = measured(server.url)
    return {
        "load": [*load, os.getloadavg()[0]],
        "pinned": pinned,
        "pinning": pinning_text(pinned, "this producer"),
        "results": [asdict(r) for r in results],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    record = run(args)
    if args.json:
        print(json.dumps(record))
        return 0
    print(f"{'':<32} {'best jobs/s':>11}   CPU per job in the best round")
    for result in record["results"]:
        print(
            f"{result['mode']:<32} {result['best_jobs_per_s']:>11,.0f}   producer "
            f"{result['client_cpu_us_per_job']:5.1f} µs, "
            f"Redis {result['redis_cpu_us_per_job']:5.1f} µs"
        )
    load = record["load"]
    print(f"load average: {load[0]:.2f} before, {load[3]:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
