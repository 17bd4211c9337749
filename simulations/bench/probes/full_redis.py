"""A full Redis drains itself: measures how, on every Redis binary found.

A worker (``--concurrency`` handlers) runs on a private redis-server; ``--jobs`` jobs are
added, due ``--delay-s`` after the adds end; then ``maxmemory`` is set ``--headroom-bytes``
above ``used_memory`` (``noeviction``), so Redis is full by the time they fall due. Printed
per binary: how long the worker took from the first due time to the last delivery, the peak of
``used_memory`` above ``maxmemory`` meanwhile (sampled every 5 ms by another connection),
whether every job was delivered exactly once and none is left, and whether an add was refused
while full.

    python -m simulations.bench probe full_redis  # 20,000 jobs, concurrency 32, 20 kB headroom
    python -m simulations.bench probe full_redis --json

Exit codes: 0 all good, 1 a job was lost or delivered twice, 2 not drained within ``--timeout-s``.
No randomness: job ids are numbered, so a run repeats up to timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import redis

from actors import DelayQueue, Job, RedisFullError
from actors.server.embedded import RedisProcess, candidate_binaries, server_version

TOPIC = "orders"
BATCH_JOBS = 1_000
SAMPLE_S = 0.005
ADD_RATE_PER_S = 4_000  # a slow machine's; the jobs fall due --delay-s after that long


@dataclass(frozen=True)
class Result:
    redis_version: str
    jobs: int
    concurrency: int
    headroom_bytes: int
    maxmemory_bytes: int
    add_refused_while_full: bool
    drain_seconds: float | None
    peak_over_maxmemory_bytes: int
    delivered: int
    delivered_twice: int
    left_in_redis: int


class MemorySampler(threading.Thread):
    """The highest ``used_memory`` seen, on its own connection, until stopped."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.peak_bytes = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            used = int(self.client.info("memory")["used_memory"])
            self.peak_bytes = max(self.peak_bytes, used)


def run_one(binary: str, jobs: int, concurrency: int, headroom: int, delay_s: float,
            timeout_s: float) -> Result:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="redelay-full-") as directory:
        server = RedisProcess(directory, binary=binary).start()
        client = server.client()
        try:
            return drain(server, client, jobs, concurrency, headroom, delay_s, timeout_s)
        finally:
            client.close()
            server.kill()


def drain(server: RedisProcess, client: redis.Redis, jobs: int, concurrency: int,
          headroom: int, delay_s: float, timeout_s: float) -> Result:  # fmt: skip
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    all_seen = threading.Event()

    def handle(job: Job) -> None:
        with lock:
            seen[job.id] += 1
            if len(seen) == jobs:
                all_seen.set()

    queue = DelayQueue(server.url, namespace="full")
    queue.handler(TOPIC, concurrency=concurrency)(handle)
    queue.start()
    try:
        # Due --delay-s after the adds end (time allowed: ADD_RATE), so Redis is full before.
        due_at = time.time() + jobs / ADD_RATE_PER_S + delay_s
        for first in range(0, jobs, BATCH_JOBS):
            queue.add_many(
                {"topic": TOPIC, "id": f"j{n}", "body": {"order": n}, "at": due_at}
                for n in range(first, min(first + BATCH_JOBS, jobs))
            )
        if time.time() > due_at - delay_s / 2:
            raise SystemExit(f"adding {jobs} jobs took too long (machine busy?): rerun")
        maxmemory = int(client.info("memory")["used_memory"]) + headroom
        client.config_set("maxmemory", maxmemory)
        sampler = MemorySampler(server.client())
        sampler.start()
        refused = False
        try:
            for n in range(10_000):  # fill the headroom: is an add refused now?
                queue.add(TOPIC, f"extra{n}", "x" * 1_000, delay=3_600)
        except RedisFullError:
            refused = True
        drained = all_seen.wait(max(0.0, due_at - time.time()) + timeout_s)
        drain_s = time.time() - due_at if drained else None
        sampler.done.set()
        sampler.join()
        # The last handlers have run; their acks may still be on the way.
        left_by = time.monotonic() + 10
        while (left := unfinished(queue)) and time.monotonic() < left_by:
            time.sleep(0.05)
    finally:
        queue.stop(grace=10)
    return Result(
        redis_version=".".join(map(str, server_version(server.binary))),
        jobs=jobs,
        concurrency=concurrency,
        headroom_bytes=headroom,
        maxmemory_bytes=maxmemory,
        add_refused_while_full=refused,
        drain_seconds=None if drain_s is None else round(drain_s, 2),
        peak_over_maxmemory_bytes=max(0, sampler.peak_bytes - maxmemory),
        delivered=len(seen),
        delivered_twice=sum(1 for count in seen.values() if count > 1),
        left_in_redis=left,
    )


def unfinished(queue: DelayQueue) -> int:
    """Jobs of the run still in Redis (the extra ones wait an hour in the delayed set)."""
    states = queue.stats().get(TOPIC, {})
    return sum(count for state, count in states.items() if state != "delayed")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--headroom-bytes", type=int, default=20_000)
    parser.add_argument("--delay-s", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = [
        run_one(binary, args.jobs, args.concurrency, args.headroom_bytes, args.delay_s,
                args.timeout_s)
        for binary in candidate_binaries()
    ]  # fmt: skip
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print("redis | jobs | drained in | peak above maxmemory | delivered once | left | "
              "add refused")  # fmt: skip
        for r in results:
            drained = "not drained" if r.drain_seconds is None else f"{r.drain_seconds:.1f} s"
            once = r.delivered == r.jobs and r.delivered_twice == 0
            print(
                f"{r.redis_version} | {r.jobs:,} | {drained} | "
                f"{r.peak_over_maxmemory_bytes / 1000:.0f} kB | {'yes' if once else 'NO'} | "
                f"{r.left_in_redis} | {'yes' if r.add_refused_while_full else 'NO'}"
            )
    if any(r.delivered != r.jobs or r.delivered_twice or r.left_in_redis for r in results):
        return 1
    if any(r.drain_seconds is None for r in results):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
