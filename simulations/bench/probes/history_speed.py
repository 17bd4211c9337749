"""How long one job's history takes on long audit streams: the API and ``redelay history``.

Starts a private redis-server on a Unix socket (or uses ``--url``). For each stream length it
adds three probe jobs first, so their entries are the oldest in the stream: one still delayed,
one dead (its topic has no retries) and one acked. Then it runs filler jobs (added due now,
leased and acked in batches of 1,000: three entries each) until the stream holds the length
asked for, and measures:

- ``DelayQueue.history`` of each probe, ``--api-calls`` times: median, p99 and max;
- ``redelay history TOPIC ID --json`` of each probe as a fresh process, ``--cli-runs`` times:
  the median wall time, which includes starting Python and importing redelay and redis-py
  (``redelay --help`` is timed too, as that floor);
- once per length, ``redelay history --scan`` of the delayed probe: the full scan the index
  replaces;
- the memory of the index keys (MEMORY USAGE), and Redis CPU per audit entry while filling.

The package is byte-compiled first (``compileall``), as an installed wheel is: a checkout run
with ``PYTHONDONTWRITEBYTECODE`` set would otherwise compile redelay's modules from source in
every command. The load average is printed with the figures, and each command's CPU time next to
its wall time: on a busy machine the wall time is mostly waiting for a core. Exit 1 when a target
of the issue is missed: 50 ms through the API (p99), 0.5 s through the command (median).

    python -m simulations.bench probe history_speed  # 10k, 100k and 1M entries
    python -m simulations.bench probe history_speed --entries 10000 --json
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from actors import DelayQueue, TopicConfig
from actors.storage.store import Store

from ..server import BenchServer

FILL_TOPIC = "fill"
PROBE_TOPIC = "probe"
DEAD_TOPIC = "probe.dies"
BATCH = 1_000
API_TARGET_S = 0.050
CLI_TARGET_S = 0.5


@dataclass
class Probe:
    state: str
    topic: str
    id: str
    events: int = 0
    api_median_ms: float = 0.0
    api_p99_ms: float = 0.0
    api_max_ms: float = 0.0
    cli_median_s: float = 0.0
    cli_cpu_median_s: float = 0.0


@dataclass
class Size:
    entries: int
    fill_s: float
    redis_cpu_us_per_entry: float
    index_bytes: int
    stream_bytes: int
    indexed_jobs: int
    cli_help_median_s: float
    cli_help_cpu_median_s: float
    scan_s: float
    probes: list[Probe] = field(default_factory=list)


def redis_cpu_s(store: Store) -> float:
    info = store.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def add_probes(store: Store) -> list[Probe]:
    # One retry, due at once: the probe fails twice and is dead.
    store.configure_topic(DEAD_TOPIC, TopicConfig(retry_ms=(1,), lease_ms=30_000))
    store.add(store.new_job(PROBE_TOPIC, "delayed", {"n": 1}, delay_ms=86_400_000))
    store.add(store.new_job(DEAD_TOPIC, "dead", {"n": 2}))
    (lease,) = store.lease(DEAD_TOPIC, 1)
    store.fail(DEAD_TOPIC, "dead", lease.token, "probe: fails", retry_after_ms=0)
    (lease,) = store.lease(DEAD_TOPIC, 1)
    if store.fail(DEAD_TOPIC, "dead", lease.token, "probe: fails for good") != "dead":
        raise SystemExit("the dead probe did not die")
    store.add(store.new_job(PROBE_TOPIC, "acked", {"n": 3}))
    (lease,) = store.lease(PROBE_TOPIC, 1)
    store.ack(PROBE_TOPIC, "acked", lease.token)
    return [
        Probe("delayed", PROBE_TOPIC, "delayed"),
        Probe("dead", DEAD_TOPIC, "dead"),
        Probe("acked", PROBE_TOPIC, "acked"),
    ]


def fill(store: Store, entries: int) -> None:
    """Runs filler jobs, a batch at a time, until the stream holds ``entries`` entries."""
    n = 0
    while store.audit_length() < entries:
        left = max(1, (entries - store.audit_length()) // 3)
        size = min(BATCH, left)
        store.add_many([store.new_job(FILL_TOPIC, f"f{n + j}") for j in range(size)])
        n += size
        leases = store.lease(FILL_TOPIC, size)
        store.ack_many([(FILL_TOPIC, x.id, x.token) for x in leases])


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_s(command: Sequence[str]) -> tuple[float, float]:
    """The wall time and the CPU time (user + system) of one run of ``command``."""
    cpu_before = children_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
    return elapsed, children_cpu_s() - cpu_before


def redelay_command() -> list[str]:
    script = Path(sys.executable).with_name("redelay")
    return [str(script)] if script.exists() else [sys.executable, "-m", "actors.cli"]


def measure_size(url: str, namespace: str, entries: int, api_calls: int, cli_runs: int) -> Size:
    queue = DelayQueue(url, namespace=namespace, producer_only=True)
    store = queue.store
    try:
        store.erase()
        probes = add_probes(store)
        cpu_before = redis_cpu_s(store)
        started = time.perf_counter()
        fill(store, entries)
        fill_s = time.perf_counter() - started
        length = store.audit_length()
        cpu_us = (redis_cpu_s(store) - cpu_before) * 1e6 / max(1, length)
        cli = [*redelay_command(), "--redis", url, "--namespace", namespace]
        for probe in probes:
            probe.events = len(queue.history(probe.topic, probe.id))
            if probe.events == 0:
                raise SystemExit(f"no history for the {probe.state} probe")
            samples: list[float] = []
            for _ in range(api_calls):
                t0 = time.perf_counter()
                queue.history(probe.topic, probe.id)
                samples.append(time.perf_counter() - t0)
            samples.sort()
            probe.api_median_ms = statistics.median(samples) * 1e3
            probe.api_p99_ms = samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e3
            probe.api_max_ms = samples[-1] * 1e3
            runs = [
                timed_s([*cli, "history", probe.topic, probe.id, "--json"]) for _ in range(cli_runs)
            ]
            probe.cli_median_s = statistics.median(wall for wall, _ in runs)
            probe.cli_cpu_median_s = statistics.median(cpu for _, cpu in runs)
        helps = [timed_s([*redelay_command(), "--help"]) for _ in range(cli_runs)]
        scan_s, _ = timed_s([*cli, "history", PROBE_TOPIC, "delayed", "--scan", "--json"])
        keys = store.keys
        return Size(
            entries=length,
            fill_s=fill_s,
            redis_cpu_us_per_entry=cpu_us,
            index_bytes=sum(int(store.client.memory_usage(k) or 0) for k in keys.history_keys),
            stream_bytes=int(store.client.memory_usage(keys.audit) or 0),
            indexed_jobs=sum(int(store.client.hlen(k)) for k in keys.history_keys),
            cli_help_median_s=statistics.median(wall for wall, _ in helps),
            cli_help_cpu_median_s=statistics.median(cpu for _, cpu in helps),
            scan_s=scan_s,
            probes=probes,
        )
    finally:
        store.erase()
        queue.close()


def report(size: Size) -> str:
    lines = [
        f"stream of {size.entries:,} entries (filled in {size.fill_s:.1f}s, Redis CPU "
        f"{size.redis_cpu_us_per_entry:.1f} us/entry); index {size.index_bytes / 1e6:.1f} MB for "
        f"{size.indexed_jobs:,} jobs "
        f"(stream {size.stream_bytes / 1e6:.1f} MB)",
    ]
    for p in size.probes:
        lines.append(
            f"  {p.state:<8} {p.events} events  API median {p.api_median_ms:.2f} ms, "
            f"p99 {p.api_p99_ms:.2f} ms, max {p.api_max_ms:.2f} ms;  "
            f"redelay history median {p.cli_median_s:.3f} s (CPU {p.cli_cpu_median_s:.3f} s)"
        )
    lines.append(
        f"  redelay --help median {size.cli_help_median_s:.3f} s "
        f"(CPU {size.cli_help_cpu_median_s:.3f} s);  "
        f"redelay history --scan {size.scan_s:.3f} s"
    )
    return "\n".join(lines)


def missed(sizes: Sequence[Size]) -> list[str]:
    found = []
    for size in sizes:
        for p in size.probes:
            if p.api_p99_ms > API_TARGET_S * 1e3:
                found.append(f"{size.entries:,} entries, {p.state}: API p99 {p.api_p99_ms:.1f} ms")
            if p.cli_median_s > CLI_TARGET_S:
                found.append(f"{size.entries:,} entries, {p.state}: CLI {p.cli_median_s:.3f} s")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--entries", default="10000,100000,1000000", help="stream lengths, comma separated"
    )
    parser.add_argument("--api-calls", type=int, default=200, help="history calls per probe")
    parser.add_argument("--cli-runs", type=int, default=5, help="command runs per probe")
    parser.add_argument("--url", help="a Redis URL instead of a private redis-server")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.entries.split(",")]
    compileall.compile_dir(str(resources.files("actors")), quiet=1)
    load = os.getloadavg()
    print(
        f"entries={lengths} api_calls={args.api_calls} cli_runs={args.cli_runs} "
        f"load={load[0]:.2f},{load[1]:.2f},{load[2]:.2f} cpus={os.cpu_count()}",
        file=sys.stderr,
    )
    sizes: list[Size] = []
    with tempfile.TemporaryDirectory(prefix="redelay-history-") as directory:
        server = None if args.url else BenchServer(Path(directory))
        url = args.url or (server.url if server else "")
        try:
            for n, length in enumerate(lengths):
                size = measure_size(
                    url, f"history-speed-{n}", length, args.api_calls, args.cli_runs
                )
                sizes.append(size)
                if not args.json:
                    print(report(size), flush=True)
        finally:
            if server is not None:
                server.stop()
    load_after = os.getloadavg()[0]
    problems = missed(sizes)
    if args.json:
        print(json.dumps({"load": [*load, load_after], "sizes": [asdict(s) for s in sizes]}))
    else:
        print(f"load average: {load[0]:.2f} before, {load_after:.2f} after")
    for problem in problems:
        print(f"target missed: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
