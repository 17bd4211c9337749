"""Delivery rate, lateness and memory with many delayed jobs pending (issue 15).

For each ``--pending`` N, one private redis-server (the benchmark's: a Unix socket, pinned to
core 1 with every client on core 0, see simulations/bench/server.py) is filled with N delayed
jobs due ``--pending-due-hours`` ahead (random, ~100-byte bodies, ``Store.add_many`` 1,000 a
call), in the namespace and topic the benchmark's worker consumes. Then, on top of them:

- memory: ``used_memory`` growth per pending job, in total, without the audit stream, and
  without the stream and its per-job history index (``<prefix>history``), from ``MEMORY USAGE``
  of each key (see ``usage_samples`` for when it samples); at the end, after the runs below, the
  stream and the index are deleted and ``used_memory`` read again, an exact check of the last;
- delivery: the benchmark's ``immediate`` scenario (simulations/bench/runner.run_scenario):
  ``--deliver-jobs`` jobs due now, one ``redelay-tuned`` worker process (DelayQueue, handler
  concurrency 100, the handler only records), jobs/s from the worker's go to the last delivery;
- lateness: the benchmark's ``steady`` scenario: ``--rate`` jobs/s for ``--seconds`` s from a
  producer process, each due ``--delay-ms`` MIN MAX after it is added; lateness is handler start
  minus due time (simulations/bench/recorder.py), early = negative.

    python -m simulations.bench probe pending_scale  # a smoke run, ~1 min
    python -m simulations.bench probe pending_scale --pending 10000 10000000 --deliver-jobs 50000 \\
        --rate 1000 --seconds 30 --json-out simulations/out/pending_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.clock import SystemClock
from actors.storage.store import Store

from .. import scenarios as bench_scenarios
from ..jobs import BenchJob, now_ms
from ..runner import RunContext, run_scenario
from ..scenarios import FILL_BATCH_JOBS, Scenario
from ..server import BenchServer, can_pin, pin_clients, pinning_text
from ..spec import QUEUE_NAME
from ..systems import BY_NAME
from ..systems.redelay_queue import NAMESPACE

SYSTEM = "redelay-tuned"  # DelayQueue, handler concurrency 100
PENDING_SEQ = 1_000_000_000  # pending jobs' seq: outside every scenario's range, never recorded
EXACT_USAGE_MAX = 1_000_000  # elements up to which MEMORY USAGE counts every one (SAMPLES 0)
USAGE_SAMPLES = 100_000  # elements MEMORY USAGE averages over on a bigger key
PROGRESS_EVERY_S = 10.0
FILL_THREADS = 2
TARGET_RATIO = 0.2  # issue 15: within 20% of the same at 10,000 pending
TARGET_BYTES = 300  # issue 15: <= 300 B per pending job without the audit stream

# What each key is, by its name after the shard prefix (actors/_constants.py).
STRUCTURES = {"jobs": "job pool (HASH)", "due": "due times' index (ZSET)", "audit": "audit STREAM"}
# The delayed set's buckets (lua/_delayed.lua), summed as one line.
BUCKETS = "due:*"
STRUCTURES[BUCKETS] = "due times, in buckets (ZSETs)"
STRUCTURES["history"] = "history index (HASH)"
STRUCTURES["history-previous"] = "history index, previous generation (HASH)"


@dataclass(frozen=True, slots=True)
class KeyUsage:
    key: str
    elements: int
    bytes: int
    samples: int  # 0: every element counted
    seconds: float


def fill(store: Store, pending: int, due_hours: tuple[float, float], seed: int) -> float:
    """Adds ``pending`` delayed jobs, 1,000 per call, from FILL_THREADS threads (one builds its
    batch while another waits for Redis); prints progress on a long fill. Returns jobs/s."""
    low_ms, high_ms = (int(h * 3_600_000) for h in due_hours)
    batches = range(0, pending, FILL_BATCH_JOBS)
    added = [0] * FILL_THREADS

    def add(thread: int) -> None:
        rng = random.Random(seed * 1_000 + thread)
        for first in batches[thread::FILL_THREADS]:
            now, batch = int(now_ms()), []
            for n in range(first, min(pending, first + FILL_BATCH_JOBS)):
                job = BenchJob(PENDING_SEQ + n, now + rng.randint(low_ms, high_ms))
                body = job.body()
                batch.append(store.new_job(QUEUE_NAME, f"pending-{n}", body, due_ms=job.due_ms))
            store.add_many(batch)
            added[thread] += len(batch)

    started = time.monotonic()
    with ThreadPoolExecutor(FILL_THREADS) as pool:
        running = [pool.submit(add, thread) for thread in range(FILL_THREADS)]
        while wait(running, timeout=PROGRESS_EVERY_S).not_done:
            rate = sum(added) / (time.monotonic() - started)
            print(
                f"  filled {sum(added):,} of {pending:,} ({rate:,.0f} jobs/s)",
                file=sys.stderr,
                flush=True,
            )
        for done in running:
            done.result()  # raises what a thread raised
    return pending / max(1e-9, time.monotonic() - started)


def usage_samples(elements: int) -> int:
    """SAMPLES 0 (exact, O(n) inside Redis) up to EXACT_USAGE_MAX elements; past that the
    average of USAGE_SAMPLES elements times the count, so a 10M-element key costs Redis a
    fraction of a second instead of blocking it for seconds (the value is an estimate)."""
    return 0 if elements <= EXACT_USAGE_MAX else USAGE_SAMPLES


def key_usage(server: BenchServer, store: Store) -> list[KeyUsage]:
    client, found = server.client, []
    for name in STRUCTURES:
        if name == BUCKETS:
            found.append(bucket_usage(server, store))
            continue
        key = store.keys.prefix + name
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        size = {"hash": client.hlen, "zset": client.zcard, "stream": client.xlen}.get(kind)
        elements = int(size(key)) if size is not None else 0
        samples = usage_samples(elements)
        started = time.perf_counter()
        server.own_commands += 1
        used: Any = client.memory_usage(key, samples=samples)
        found.append(
            KeyUsage(name, elements, int(used or 0), samples, time.perf_counter() - started)
        )
    return found


def bucket_usage(server: BenchServer, store: Store) -> KeyUsage:
    """MEMORY USAGE of every bucket of the delayed set, summed (each is small: SAMPLES 0)."""
    client, started = server.client, time.perf_counter()
    index: Any = client.zrange(store.keys.delayed, 0, -1)
    names = [n.decode() for n in index]
    elements = used = 0
    for first in range(0, len(names), 1_000):
        pipe = client.pipeline(transaction=False)
        for name in names[first : first + 1_000]:
            pipe.zcard(store.keys.due_bucket(name))
            pipe.memory_usage(store.keys.due_bucket(name), samples=0)
        replies = pipe.execute()
        server.own_commands += len(replies)
        elements += sum(int(n) for n in replies[::2])
        used += sum(int(b or 0) for b in replies[1::2])
    return KeyUsage(BUCKETS, elements, used, 0, time.perf_counter() - started)


def memory_fields(pending: int, grown: int, usage: list[KeyUsage]) -> dict[str, Any]:
    by_key = {u.key: u.bytes for u in usage}
    without_stream = grown - by_key["audit"]
    without_index = without_stream - by_key["history"] - by_key["history-previous"]
    return {
        "used_memory_growth_bytes": grown,
        "bytes_per_pending_job": round(grown / pending, 1),
        "bytes_per_pending_job_without_stream": round(without_stream / pending, 1),
        "bytes_per_pending_job_without_stream_and_index": round(without_index / pending, 1),
        "keys": [
            {
                "key": u.key,
                "what": STRUCTURES[u.key],
                "elements": u.elements,
                "memory_usage_bytes": u.bytes,
                "bytes_per_pending_job": round(u.bytes / pending, 1),
                "samples": u.samples,
                "seconds": round(u.seconds, 3),
            }
            for u in usage
        ],
        # What no key's MEMORY USAGE covers: the key space itself, allocator rounding.
        "rest_bytes_per_pending_job": round((grown - sum(by_key.values())) / pending, 1),
    }


def delete_audit(server: BenchServer, store: Store, baseline: int, pending: int) -> float:
    """Deletes the stream and the index, and returns the exact used_memory growth per pending
    job that is left (what the runs left besides is a few small keys)."""
    server.client.delete(store.keys.audit, *store.keys.history_keys)
    return round((server.settled_stats().used_memory - baseline) / pending, 1)


def scenarios(args: argparse.Namespace) -> tuple[Scenario, Scenario]:
    low, high = args.delay_ms
    immediate = Scenario(
        "immediate", "immediate", args.deliver_jobs, "batch", deliver=True, wait_s=args.wait_s
    )
    steady = bench_scenarios.steady(args.rate, args.seconds, low, high, args.wait_s)
    return immediate, steady


@dataclass
class Filled:
    """One server holding ``pending`` delayed jobs, and what was measured on it."""

    pending: int
    server: BenchServer
    store: Store
    baseline: int  # used_memory before the fill
    record: dict[str, Any]

    def nothing_in_flight(self) -> bool:
        """No job of the benchmark's topic ready or leased: every delivered one was acked."""
        counts = self.store.stats().get(QUEUE_NAME, {})
        return counts.get("ready", 0) == 0 and counts.get("leased", 0) == 0


def filled_server(pending: int, args: argparse.Namespace, workdir: Path) -> Filled:
    server = BenchServer(workdir / f"redis-{pending}")
    store = Store(server.client, NAMESPACE, SystemClock())
    # Load the add script (and its memory) before the baseline: a one-off, not per job.
    store.add_many([store.new_job("warm-up", "0", None, delay_ms=1)])
    store.cancel("warm-up", "0")
    baseline = server.settled_stats().used_memory
    print(f"pending {pending:,}: filling", file=sys.stderr, flush=True)
    fill_rate = fill(store, pending, tuple(args.pending_due_hours), args.seed)
    grown = server.settled_stats().used_memory - baseline
    record: dict[str, Any] = {"pending": pending, "fill_jobs_per_s": round(fill_rate)}
    record["memory"] = memory_fields(pending, grown, key_usage(server, store))
    record["redis_version"] = server.version()
    record["immediate"], record["steady"] = [], []
    return Filled(pending, server, store, baseline, record)


def summary(runs: list[dict[str, Any]], fields: tuple[str, ...]) -> dict[str, Any]:
    """Median, min and max of each field over the repeats (None where a run had none)."""
    found: dict[str, Any] = {}
    for name in fields:
        values = [r[name] for r in runs if r.get(name) is not None]
        found[name] = None if not values else round(statistics.median(values), 3)
        found[name + "_range"] = None if not values else [min(values), max(values)]
    for name in ("jobs", "delivered", "missing", "duplicates", "early_deliveries"):
        found[name] = sum(int(r.get(name) or 0) for r in runs)
    return found


IMMEDIATE_FIELDS = ("delivered_jobs_per_s", "redis_cpu_ms_per_1k_jobs", "client_cpu_ms_per_1k_jobs")
STEADY_FIELDS = (
    "lateness_ms_p50",
    "lateness_ms_p99",
    "lateness_ms_max",
    "redis_cpu_ms_per_1k_jobs",
)


def run_all(
    args: argparse.Namespace, workdir: Path, code_dir: Path | None = None
) -> list[dict[str, Any]]:
    """Fills one server per N, then runs the scenarios on each in turn, ``--repeat`` times, so
    a change in the machine's load (other work shares it) hits every N alike. ``code_dir``: the
    code snapshot the worker and producer import (simulations.bench's, see snapshot_code)."""
    servers: list[Filled] = []
    try:
        for pending in args.pending:
            servers.append(filled_server(pending, args, workdir))
        context = RunContext(workdir=workdir, seed=args.seed, code_dir=code_dir)
        for n in range(args.repeat):
            for scenario in scenarios(args):
                for one in servers:
                    print(
                        f"pending {one.pending:,}: {scenario.name} {n + 1}",
                        file=sys.stderr,
                        flush=True,
                    )
                    # The next scenario reuses the job ids: the worker's last acks must land.
                    record = run_scenario(
                        BY_NAME[SYSTEM], scenario, context, one.server, one.nothing_in_flight
                    )
                    record.pop("lateness_ms_quantiles", None)
                    one.record[scenario.kind].append(record)
        for one in servers:
            one.record["memory"]["bytes_per_pending_job_without_stream_and_index_exact"] = (
                delete_audit(one.server, one.store, one.baseline, one.pending)
            )
            one.record["immediate_summary"] = summary(one.record["immediate"], IMMEDIATE_FIELDS)
            one.record["steady_summary"] = summary(one.record["steady"], STEADY_FIELDS)
    finally:
        for one in servers:
            one.server.stop()
    return [one.record for one in servers]


def compare(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest N against the smallest: the ratios issue 15 sets a 20% bound on (medians)."""
    small, large = records[0], records[-1]

    def ratio(kind: str, field: str) -> float | None:
        a, b = small[kind + "_summary"].get(field), large[kind + "_summary"].get(field)
        return None if not a or b is None else round(b / a, 3)

    rate = ratio("immediate", "delivered_jobs_per_s")
    p50, p99 = ratio("steady", "lateness_ms_p50"), ratio("steady", "lateness_ms_p99")
    within = [abs(x - 1) <= TARGET_RATIO for x in (rate, p50, p99) if x is not None]
    per_job = large["memory"]["bytes_per_pending_job_without_stream"]
    return {
        "small_pending": small["pending"],
        "large_pending": large["pending"],
        "delivery_rate_ratio": rate,
        "lateness_p50_ratio": p50,
        "lateness_p99_ratio": p99,
        "within_20_percent": all(within) and len(within) == 3,
        "bytes_per_pending_job_without_stream": per_job,
        "memory_target_met": per_job <= TARGET_BYTES,
    }


def _spread(summary: dict[str, Any], name: str, unit: str = "") -> str:
    low, high = summary[name + "_range"] or (None, None)
    return f"{summary[name]:,}{unit} ({low:,}-{high:,})" if low is not None else "none"


def report(result: dict[str, Any]) -> str:
    lines = [
        f"machine: {result['cpus']} cores; {result['pinning']}",
        f"load average at start {result['load_average_start']}, "
        f"at end {result['load_average_end']}",
        f"median (min-max) of {result['settings']['repeat']} runs per N, alternated between N",
    ]
    for r in result["runs"]:
        m, im, st = r["memory"], r["immediate_summary"], r["steady_summary"]
        lines += [
            f"pending {r['pending']:,} (Redis {r['redis_version']}; filled at "
            f"{r['fill_jobs_per_s']:,} jobs/s):",
            f"  memory per pending job: {m['bytes_per_pending_job']:,.1f} B in total, "
            f"{m['bytes_per_pending_job_without_stream']:,.1f} B without the audit stream, "
            f"{m['bytes_per_pending_job_without_stream_and_index']:,.1f} B without the stream and "
            f"the history index ({m['bytes_per_pending_job_without_stream_and_index_exact']:,.1f}"
            " B measured by deleting both at the end)",
        ]
        for k in m["keys"]:
            how = "exact" if k["samples"] == 0 else f"SAMPLES {k['samples']:,}"
            lines.append(
                f"    {k['what']:<22}{k['elements']:>12,} elements {k['memory_usage_bytes']:>15,} B"
                f" = {k['bytes_per_pending_job']:>7,.1f} B/job  ({how}, {k['seconds']:.2f} s)"
            )
        lines.append(f"    not in any key's MEMORY USAGE: {m['rest_bytes_per_pending_job']} B/job")
        lines.append(
            f"  delivery: {im['delivered']:,} of {im['jobs']:,} jobs due now delivered (all runs), "
            f"{_spread(im, 'delivered_jobs_per_s')} jobs/s, {im['duplicates']} duplicates; "
            f"Redis CPU {_spread(im, 'redis_cpu_ms_per_1k_jobs')} ms per 1k jobs"
        )
        lines.append(
            f"  steady: {st['delivered']:,} of {st['jobs']:,} delivered (all runs), lateness p50 "
            f"{_spread(st, 'lateness_ms_p50', ' ms')}, p99 {_spread(st, 'lateness_ms_p99', ' ms')},"
            f" max {_spread(st, 'lateness_ms_max', ' ms')}, early {st['early_deliveries']}, "
            f"duplicates {st['duplicates']}"
        )
    if len(result["runs"]) > 1:
        c = result["comparison"]
        lines.append(
            f"{c['large_pending']:,} against {c['small_pending']:,} pending (medians): delivery "
            f"rate x{c['delivery_rate_ratio']}, lateness p50 x{c['lateness_p50_ratio']}, p99 x"
            f"{c['lateness_p99_ratio']} (within 20%: {c['within_20_percent']}); "
            f"{c['bytes_per_pending_job_without_stream']} B per pending job without the stream "
            f"(<= {TARGET_BYTES} B: {c['memory_target_met']})"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.bench probe pending_scale", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--pending", type=int, nargs="+", default=[1_000, 20_000])
    parser.add_argument("--pending-due-hours", type=float, nargs=2, default=[1.0, 24.0])
    parser.add_argument("--deliver-jobs", type=int, default=5_000, help="jobs due now")
    parser.add_argument("--rate", type=int, default=500, help="steady jobs/s")
    parser.add_argument("--seconds", type=float, default=5.0, help="steady duration")
    parser.add_argument("--delay-ms", type=int, nargs=2, default=[1_000, 3_000])
    parser.add_argument("--wait-s", type=float, default=60.0, help="wait for the last deliveries")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each scenario per N")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--json-out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if (
        min(args.pending) < 1
        or args.deliver_jobs < 1
        or args.rate < 1
        or args.seconds <= 0
        or args.repeat < 1
    ):
        parser.error("--pending, --deliver-jobs, --rate, --seconds and --repeat must be positive")
    return args


def measure(args: argparse.Namespace, code_dir: Path | None = None) -> dict[str, Any]:
    """The whole measurement as one JSON-able dict (simulations.bench calls it as a section of
    its run). The caller pins its process first (pin_clients) when it wants the pinned split."""
    pinning = pinning_text(can_pin())
    result: dict[str, Any] = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "pinning": pinning,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="redelay-pending-") as directory:
        result["runs"] = run_all(args, Path(directory), code_dir)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if len(result["runs"]) > 1:
        result["comparison"] = compare(result["runs"])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pin_clients()  # Redis gets core 1, every client (this, producers, workers) core 0
    result = measure(args)
    text = json.dumps(result)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(text)
    print(text if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
