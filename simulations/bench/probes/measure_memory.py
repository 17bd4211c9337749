"""Measures Redis memory per pending job on a private redis-server.

Adds ``--jobs`` delayed jobs (due in the future, so they stay pending) with JSON bodies of
``--body-bytes`` bytes, and reports INFO ``used_memory`` deltas: with the audit stream, and again
after deleting the audit key and the per-job history index, so the cost of the job itself and
of its ``added`` event are told apart. Then ``--lifecycle-jobs`` jobs run to completion (added,
carried, leased, acked) in another namespace, to measure what a finished job leaves in the audit
stream and its index. One ``--seed`` drives the
ids and due times, so a run is repeatable.

    python -m simulations.bench probe measure_memory            # 100,000 jobs, ~100-byte bodies
    python -m simulations.bench probe measure_memory --json  # the same numbers as one JSON object

The server binary is found like the tests find it (``REDELAY_REDIS_SERVER``, ``PATH``, then the
``embedded`` extra), so the numbers can be taken on Redis 6.2 as well as 7.x.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from actors.clock import FakeClock
from actors.server.embedded import server_version
from actors.storage.scripts import sources
from actors.storage.store import Store

from ..server import BenchServer

NAMESPACE = "memory"
LIFECYCLE_NAMESPACE = "memory-lifecycle"
TOPIC = "orders"
BATCH_JOBS = 1_000
DELAY_MIN_MS = 3_600_000  # an hour: nothing becomes due while we measure
DELAY_MAX_MS = 30 * 24 * 3_600_000


@dataclass(frozen=True)
class Result:
    redis_version: str
    jobs: int
    body_bytes: int
    seed: int
    per_ms: int  # 0: due at random 1 h to 30 d ahead; else each batch in order, this many a ms
    used_memory_before_bytes: int
    used_memory_with_audit_bytes: int
    used_memory_without_audit_bytes: int
    per_job_with_audit_bytes: float
    per_job_without_audit_bytes: float
    per_audit_entry_bytes: float
    key_usage_bytes: dict[str, int]
    add_seconds: float
    lifecycle_jobs: int
    lifecycle_audit_entries: int
    lifecycle_per_audit_entry_bytes: float
    per_job_history_index_bytes: float  # MEMORY USAGE of <prefix>history per pending job
    lifecycle_history_index_bytes_per_job: float  # the same per job run to completion


def body_of_size(body_bytes: int, n: int) -> dict[str, object]:
    """A JSON object whose orjson encoding is exactly ``body_bytes`` long (when that is >= 30)."""
    body: dict[str, object] = {"order": n, "pad": ""}
    overhead_bytes = len(json.dumps(body, separators=(",", ":")))
    body["pad"] = "x" * max(0, body_bytes - overhead_bytes)
    return body


def used_memory_bytes(client: redis.Redis) -> int:
    # A big DEL may be freed in the background (lazyfree); wait until nothing is pending.
    deadline = time.monotonic() + 30
    while True:
        info = client.info("memory")
        if int(info.get("lazyfree_pending_objects", 0)) == 0 or time.monotonic() > deadline:
            return int(info["used_memory"])
        time.sleep(0.05)


def key_usage_bytes(client: redis.Redis, store: Store) -> dict[str, int]:
    """MEMORY USAGE of each key of the shard (SAMPLES 0: every element, exact but O(n))."""
    usage: dict[str, int] = {}
    buckets = 0
    bucket_prefix = store.keys.due_bucket("").removeprefix(store.keys.prefix)
    for raw in client.scan_iter(match=f"{store.keys.prefix}*", count=1_000):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        size = int(client.memory_usage(name, samples=0) or 0)
        name = name.removeprefix(store.keys.prefix)
        if name.startswith(bucket_prefix):  # the delayed set's buckets: one line for all
            buckets += 1
            name = f"{bucket_prefix}* ({{buckets}} buckets)"
        usage[name] = usage.get(name, 0) + size
    return {k.format(buckets=f"{buckets:,}"): v for k, v in sorted(usage.items())}


def add_jobs(
    store: Store, jobs: int, body_bytes: int, rng: random.Random, per_ms: int = 0
) -> float:
    """Adds the jobs in batches; returns the seconds it took. ``per_ms`` 0: each job due at
    random 1 hour to 30 days ahead; else each batch due an hour ahead, ``per_ms`` jobs a ms in
    order (a batch given one delay: all of it in one ms), the store's fake clock a second later
    for the next batch. The delayed set's buckets never cut a run of jobs due in one ms."""
    started = time.perf_counter()
    clock = store.clock
    for first in range(0, jobs, BATCH_JOBS):
        numbers = range(first, min(jobs, first + BATCH_JOBS))
        if per_ms:
            dues = [clock.now_ms() + DELAY_MIN_MS + (n - first) // per_ms for n in numbers]
        else:
            dues = [clock.now_ms() + rng.randint(DELAY_MIN_MS, DELAY_MAX_MS) for _ in numbers]
        batch = [
            store.new_job(TOPIC, f"order-{n:08d}", body_of_size(body_bytes, n), due_ms=due)
            for n, due in zip(numbers, dues, strict=True)
        ]
        store.add_many(batch)
        if per_ms and isinstance(clock, FakeClock):
            clock.advance(1_000)
    return time.perf_counter() - started


def run_lifecycles(client: redis.Redis, jobs: int, body_bytes: int) -> tuple[int, int, int]:
    """Runs jobs through added, ready, leased, acked; returns (audit entries, audit bytes, bytes
    of the per-job history index)."""
    clock = FakeClock()
    store = Store(client, LIFECYCLE_NAMESPACE, clock)
    for first in range(0, jobs, BATCH_JOBS):
        numbers = range(first, min(jobs, first + BATCH_JOBS))
        store.add_many(
            [store.new_job(TOPIC, f"order-{n:08d}", body_of_size(body_bytes, n), delay_ms=1)
             for n in numbers]
        )  # fmt: skip
        clock.advance(1)
        store.carry(limit=BATCH_JOBS)
        leases = store.lease(TOPIC, BATCH_JOBS, consumer="measure")
        store.ack_many([(lease.topic, lease.id, lease.token) for lease in leases])
    entries = int(client.xlen(store.keys.audit))
    index_bytes = sum(int(client.memory_usage(k, samples=0) or 0) for k in store.keys.history_keys)
    return entries, int(client.memory_usage(store.keys.audit, samples=0) or 0), index_bytes


def measure(jobs: int, body_bytes: int, seed: int, lifecycle_jobs: int, per_ms: int = 0) -> Result:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="redelay-memory-") as directory:
        server = BenchServer(Path(directory))
        try:
            client = server.process.client()
            # Load every script first, so the script cache is in the baseline and not per job.
            for _, source in sources().values():
                client.script_load(source)
            store = Store(client, NAMESPACE, FakeClock())
            before = used_memory_bytes(client)
            add_seconds = add_jobs(store, jobs, body_bytes, rng, per_ms)
            with_audit = used_memory_bytes(client)
            usage = key_usage_bytes(client, store)
            audit_entries = int(client.xlen(store.keys.audit))
            # The per-job history index is part of the audit trail: it goes with the stream.
            client.delete(store.keys.audit, *store.keys.history_keys)
            without_audit = used_memory_bytes(client)
            lifecycle_entries, lifecycle_bytes, lifecycle_index = (0, 0, 0)
            if lifecycle_jobs:
                lifecycle_entries, lifecycle_bytes, lifecycle_index = run_lifecycles(
                    client, lifecycle_jobs, body_bytes
                )
            client.close()
        finally:
            server.stop()
    version = ".".join(str(part) for part in server_version(server.process.binary))
    return Result(
        redis_version=version,
        jobs=jobs,
        body_bytes=body_bytes,
        seed=seed,
        per_ms=per_ms,
        used_memory_before_bytes=before,
        used_memory_with_audit_bytes=with_audit,
        used_memory_without_audit_bytes=without_audit,
        per_job_with_audit_bytes=round((with_audit - before) / jobs, 1),
        per_job_without_audit_bytes=round((without_audit - before) / jobs, 1),
        per_audit_entry_bytes=round((with_audit - without_audit) / max(1, audit_entries), 1),
        key_usage_bytes=usage,
        add_seconds=round(add_seconds, 2),
        lifecycle_jobs=lifecycle_jobs,
        lifecycle_audit_entries=lifecycle_entries,
        lifecycle_per_audit_entry_bytes=round(lifecycle_bytes / max(1, lifecycle_entries), 1),
        per_job_history_index_bytes=round(
            (usage.get("history", 0) + usage.get("history-previous", 0)) / jobs, 1
        ),
        lifecycle_history_index_bytes_per_job=round(lifecycle_index / max(1, lifecycle_jobs), 1),
    )


def report(result: Result) -> str:
    lines = [
        f"redis {result.redis_version}: {result.jobs} delayed jobs, "
        f"{result.body_bytes}-byte JSON bodies, seed {result.seed}, "
        + (f"{result.per_ms} due per ms" if result.per_ms else "due at random"),
        f"  used_memory before          {result.used_memory_before_bytes:>14,} bytes",
        f"  used_memory with audit      {result.used_memory_with_audit_bytes:>14,} bytes",
        f"  used_memory audit deleted   {result.used_memory_without_audit_bytes:>14,} bytes",
        f"  per job, with audit stream  {result.per_job_with_audit_bytes:>14,.1f} bytes",
        f"  per job, without audit      {result.per_job_without_audit_bytes:>14,.1f} bytes",
        f"  per audit entry             {result.per_audit_entry_bytes:>14,.1f} bytes",
        "  MEMORY USAGE per key (before deleting the audit stream):",
    ]
    lines += [f"    {name:<24}{size:>14,} bytes" for name, size in result.key_usage_bytes.items()]
    lines.append(f"  adding took {result.add_seconds} s")
    if result.lifecycle_jobs:
        lines.append(
            f"  {result.lifecycle_jobs} jobs run to completion left "
            f"{result.lifecycle_audit_entries} audit entries, "
            f"{result.lifecycle_per_audit_entry_bytes:,.1f} bytes each (MEMORY USAGE), and "
            f"{result.lifecycle_history_index_bytes_per_job:,.1f} bytes of history index per job"
        )
    lines.append(
        f"  history index per pending job {result.per_job_history_index_bytes:>12,.1f} bytes"
    )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.bench probe measure_memory",
        description="Measure Redis memory per pending job on a private redis-server.",
    )
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs to add (default 100000)")
    parser.add_argument(
        "--body-bytes", type=int, default=100, help="JSON body size in bytes (default 100)"
    )
    parser.add_argument(
        "--lifecycle-jobs",
        type=int,
        default=50_000,
        help="jobs to run to completion to measure their audit entries (default 50000; 0 skips)",
    )
    parser.add_argument("--seed", type=int, default=1, help="drives ids and due times")
    parser.add_argument(
        "--per-ms",
        type=int,
        default=0,
        help="each batch of 1,000 due an hour ahead, this many jobs a ms (1000: one delay for the"
        " batch); default 0: each job due at random 1 hour to 30 days ahead",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.body_bytes < 0 or args.lifecycle_jobs < 0 or args.per_ms < 0:
        parser.error(
            "--jobs must be at least 1, --body-bytes, --lifecycle-jobs and --per-ms at least 0"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.json:
        print(
            f"settings: jobs={args.jobs} body_bytes={args.body_bytes} "
            f"lifecycle_jobs={args.lifecycle_jobs} seed={args.seed} per_ms={args.per_ms}"
        )
    result = measure(args.jobs, args.body_bytes, args.seed, args.lifecycle_jobs, args.per_ms)
    print(json.dumps(asdict(result)) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
