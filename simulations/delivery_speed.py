"""Delivery speed on the public API: one worker, a no-op handler, N jobs due now.

Adds the jobs with add_many before the worker starts, then measures jobs per second from the
first handler call to the moment the namespace holds no ready or leased job (every job acked),
and the CPU time spent meanwhile per job, by this process (the worker's threads) and by Redis:
on a busy machine the rate varies from run to run, the CPU per job much less.
A quick check for changes to the wake and fetch paths; the full benchmark is simulations/bench.
``--metrics both`` alternates runs without and with Prometheus metrics (actors.metrics), to
measure what recording costs; ``--prefetch 0 90`` alternates handler prefetch settings (jobs
leased beyond the handler threads), to measure what larger lease batches buy.

    python -m simulations.delivery_speed --jobs 20000 --concurrency 10 100
    python -m simulations.delivery_speed --concurrency 100 --metrics both --repeat 5
    python -m simulations.delivery_speed --concurrency 10 --prefetch 0 90 990 --repeat 3
    python -m simulations.delivery_speed --jobs 100000 --concurrency 100 --prefetch 0 90 400 --pin
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis

from actors import DelayQueue, Job
from actors.server.embedded import RedisProcess

from .bench.server import REDIS_CORE, can_pin, pin_clients, pin_process, pinning_text

_ADD_BATCH = 1_000


@dataclass(frozen=True, slots=True)
class Run:
    jobs_per_s: float
    worker_cpu_us_per_job: float
    redis_cpu_us_per_job: float


def _redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(
    url: str,
    namespace: str,
    jobs: int,
    concurrency: int,
    timeout_s: float,
    metrics: bool = False,
    tracer_provider: Any = None,
    prefetch: int = 0,
) -> Run:
    """Jobs per second and CPU per job, first handler call to last ack. ``tracer_provider``:
    the OpenTelemetry provider of the producer and the worker (simulations/observability_cost)."""
    admin = redis.Redis.from_url(url)
    producer = DelayQueue(url, namespace, producer_only=True, tracer_provider=tracer_provider)
    for start in range(0, jobs, _ADD_BATCH):
        producer.add_many(
            {"topic": "speed", "id": str(n)} for n in range(start, min(start + _ADD_BATCH, jobs))
        )
    first_call: list[tuple[float, float, float]] = []  # wall, this process's CPU, Redis CPU
    lock = threading.Lock()

    worker = DelayQueue(url, namespace, tracer_provider=tracer_provider)

    @worker.handler("speed", concurrency=concurrency, prefetch=prefetch)
    def handle(job: Job) -> None:
        if not first_call:
            with lock:
                if not first_call:
                    first_call.append((time.perf_counter(), time.process_time(), -1.0))

    if metrics:
        from actors.metrics import registry  # the metrics extra

        registry(worker)
    redis_before = _redis_cpu_s(admin)  # the worker's start is not much next to 20k jobs
    worker.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            counts = producer.stats().get("speed", {})
            if first_call and counts.get("ready", 0) == 0 and counts.get("leased", 0) == 0:
                finished = (time.perf_counter(), time.process_time(), _redis_cpu_s(admin))
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"not delivered within {timeout_s}s: {counts}")
            time.sleep(0.005)  # polling the counters; the resolution this measure needs
    finally:
        worker.stop(grace=5)
        producer.close()
        admin.close()
    wall_s, cpu_s, _ = first_call[0]
    return Run(
        jobs_per_s=jobs / (finished[0] - wall_s),
        worker_cpu_us_per_job=(finished[1] - cpu_s) / jobs * 1e6,
        redis_cpu_us_per_job=(finished[2] - redis_before) / jobs * 1e6,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--metrics",
        choices=("off", "on", "both"),
        default="off",
        help="record Prometheus metrics; both: alternate runs without and with (default off)",
    )
    parser.add_argument(
        "--prefetch",
        type=int,
        nargs="+",
        default=[0],
        help="the handler's prefetch; several values are alternated (default 0)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="Redis on core 1 and this process on core 0, as the benchmark pins them",
    )
    args = parser.parse_args()
    if any(p < 0 for p in args.prefetch):
        parser.error("--prefetch: each value must be 0 or more")
    modes = [
        (metrics, prefetch)
        for metrics in {"off": [False], "on": [True], "both": [False, True]}[args.metrics]
        for prefetch in args.prefetch
    ]
    with tempfile.TemporaryDirectory() as directory, RedisProcess(directory) as server:
        if args.pin:
            assert server.process is not None
            pin_process(server.process.pid, REDIS_CORE)
            pin_clients()  # before the worker's threads start: they inherit it
            print(pinning_text(can_pin()))
        for concurrency in args.concurrency:
            runs: dict[tuple[bool, int], list[Run]] = {mode: [] for mode in modes}
            for n in range(args.repeat):
                for mode in modes:  # alternated, so a change in the machine's load hits all
                    metrics, prefetch = mode
                    namespace = f"speed{concurrency}x{n}{'m' if metrics else ''}p{prefetch}"
                    runs[mode].append(
                        measure(
                            server.url,
                            namespace,
                            args.jobs,
                            concurrency,
                            args.timeout,
                            metrics,
                            prefetch=prefetch,
                        )
                    )
            for (metrics, prefetch), done in runs.items():
                rates = ", ".join(f"{r.jobs_per_s:,.0f}" for r in done)
                worker_us = statistics.median(r.worker_cpu_us_per_job for r in done)
                redis_us = statistics.median(r.redis_cpu_us_per_job for r in done)
                median_rate = statistics.median(r.jobs_per_s for r in done)
                label = f" metrics {'on' if metrics else 'off'}" if args.metrics == "both" else ""
                if len(args.prefetch) > 1 or prefetch:
                    label += f" prefetch {prefetch}"
                print(
                    f"concurrency {concurrency}{label}: {max(r.jobs_per_s for r in done):,.0f} "
                    f"jobs/s best of ({rates}); median {median_rate:,.0f}; "
                    f"CPU per job (median): worker {worker_us:.0f} us, Redis {redis_us:.0f} us"
                )


if __name__ == "__main__":
    main()
