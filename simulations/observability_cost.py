"""What observability costs a worker: delivered jobs/s and worker CPU per job with metrics and
traces off, metrics on, traces on, and both on.

Each run is simulations/delivery_speed's: one worker, a no-op handler, N jobs due now, measured
from the first handler call to the last ack. The modes are alternated within each repeat, each
repeat starting one mode later, so a change in the machine's load hits all of them; medians are
printed, with the cost of each mode against "off". CPU per job (this process's CPU time over the
jobs delivered) varies less than jobs/s on a shared machine, so the metrics limit is checked on
it: the exit status is 1 when metrics cost 5% or more.

- metrics: Prometheus recording (actors.metrics.registry), the ``metrics`` extra;
- traces: an OpenTelemetry SDK TracerProvider for the producer and the worker, its spans batched
  (BatchSpanProcessor) to an exporter that counts and drops them, so the cost is making spans,
  not shipping them; needs opentelemetry-sdk (the ``test`` extra). "off" has the OpenTelemetry
  API installed but no SDK: its no-op spans are what a process without tracing set up pays.

    python -m simulations.observability_cost --jobs 20000 --concurrency 100 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from actors.server.embedded import RedisProcess
from simulations.delivery_speed import Run, measure

MODES = {"off": (False, False), "metrics": (True, False), "traces": (False, True)}
MODES["both"] = (True, True)
METRICS_LIMIT = 0.05


class Traced:
    """A TracerProvider whose spans are batched to an exporter that only counts them."""

    def __init__(self) -> None:
        try:
            from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                SpanExporter,
                SpanExportResult,
            )
        except ModuleNotFoundError as exc:  # pragma: no cover - the message is the point
            raise SystemExit(f"traces need opentelemetry-sdk (the test extra): {exc}") from exc

        counted = self

        class Counting(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                counted.spans += len(spans)
                return SpanExportResult.SUCCESS

        self.spans = 0
        self.provider: Any = TracerProvider()
        # A queue big enough for every add's send span: the adds come in bursts of 1,000, and
        # a dropped span would leave the check in run_mode unable to say all were made.
        self.provider.add_span_processor(BatchSpanProcessor(Counting(), max_queue_size=1 << 17))

    def close(self) -> int:
        """Flushes and shuts the provider down; returns how many spans were exported."""
        self.provider.shutdown()
        return self.spans


def run_mode(url: str, namespace: str, args: argparse.Namespace, mode: str) -> Run:
    metrics, traces = MODES[mode]
    traced = Traced() if traces else None
    result = measure(
        url,
        namespace,
        args.jobs,
        args.concurrency,
        args.timeout,
        metrics,
        None if traced is None else traced.provider,
    )
    if traced is not None:
        exported = traced.close()
        # A send span and a process span per job, or the run did not measure what it says.
        if exported != 2 * args.jobs:
            raise SystemExit(f"{mode}: {exported} spans exported, expected {2 * args.jobs}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    args = parser.parse_args()
    modes: list[str] = args.modes
    print(
        f"jobs {args.jobs:,}, concurrency {args.concurrency}, repeat {args.repeat}, "
        f"modes {' '.join(modes)} (alternated, each repeat starting one later)"
    )
    runs: dict[str, list[Run]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as directory, RedisProcess(directory) as server:
        for n in range(args.repeat):
            # Each repeat starts one mode later, so no mode always runs first or after another.
            for mode in modes[n % len(modes) :] + modes[: n % len(modes)]:
                runs[mode].append(run_mode(server.url, f"cost{n}{mode}", args, mode))
    rate = {m: statistics.median(r.jobs_per_s for r in done) for m, done in runs.items()}
    cpu = {m: statistics.median(r.worker_cpu_us_per_job for r in done) for m, done in runs.items()}
    header = f"{'mode':8} {'jobs/s (median)':>16} {'worker CPU/job':>15} {'vs off':>16}"
    print(f"{header}  runs (jobs/s)")
    for mode, done in runs.items():
        versus = ""
        if "off" in rate and mode != "off":
            versus = f"{rate[mode] / rate['off'] - 1:+.1%} {cpu[mode] / cpu['off'] - 1:+.1%}"
        redis_us = statistics.median(r.redis_cpu_us_per_job for r in done)
        each = ", ".join(f"{r.jobs_per_s:,.0f}" for r in done)
        print(
            f"{mode:8} {rate[mode]:>16,.0f} {cpu[mode]:>12.1f} us {versus:>16}  ({each}); "
            f"Redis CPU/job {redis_us:.1f} us"
        )
    print("vs off: change in jobs/s, then in worker CPU per job")
    if "off" in cpu and "metrics" in cpu:
        cost = cpu["metrics"] / cpu["off"] - 1
        verdict = "ok" if cost < METRICS_LIMIT else "OVER THE LIMIT"
        print(f"metrics cost {cost:+.1%} worker CPU per job (limit {METRICS_LIMIT:.0%}): {verdict}")
        if cost >= METRICS_LIMIT:
            sys.exit(1)


if __name__ == "__main__":
    main()
