"""Client CPU per script call: redis-py's own path against redelay's held connections.

Starts a private redis-server on a Unix socket (or uses ``--url``), loads a script that does
nothing (``return 0``), and sends it with an add's number of keys and arguments, ``--calls``
times per round, in four ways: one EVALSHA through ``Redis.execute_command`` and through
:class:`actors.storage.held_connections.HeldConnections`, and a pipeline of two (what a worker's
ack-and-lease sends) through ``Redis.pipeline`` and through the held connections. The script does
no work, so what differs is the client's: this process's CPU (``time.thread_time``) per call.
Rounds alternate the ways, and the best round of each is reported, since a shared machine's noise
only ever slows a round down.

With ``--asyncio`` the ways are the async producer's instead: a pipeline of two on
``redis.asyncio`` and the same on
:class:`actors.storage.async_held_connections.AsyncHeldConnections`, awaited one after another
on one event loop (the loop's own CPU included).

    python -m simulations.call_overhead                  # 10,000 calls, 5 rounds
    python -m simulations.call_overhead --calls 2000 --rounds 3 --json
    python -m simulations.call_overhead --asyncio
    python -m simulations.call_overhead --cores apart      # as make bench pins them
    python -m simulations.call_overhead --cores together   # Redis and this process on core 0

The calls/s of "held connection, one call" is the round trip's floor: no producer that waits for
each reply (``DelayQueue.add`` in a loop) can go faster on that machine. ``--cores`` says where
the private server and this process run: ``apart`` (Redis on core 1, this process on core 0, as
``make bench`` pins them), ``together`` (both on core 0) or ``any`` (where the kernel puts them,
the default). On a virtual machine a wake-up sent to another core can cost more than the call
itself, so the two can differ several times over (docs/benchmarks.md, the producers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis
import redis.asyncio as aredis

from actors.server.embedded import RedisProcess
from actors.storage.async_held_connections import AsyncHeldConnections
from actors.storage.held_connections import HeldConnections

from .bench.server import CLIENT_CORE, REDIS_CORE, can_pin, pin_process

# Where --cores puts (this process, the private redis-server); None: wherever the kernel does.
CORES = {"apart": (CLIENT_CORE, REDIS_CORE), "together": (CLIENT_CORE, CLIENT_CORE), "any": None}

# An add call's shape: 6 keys and 10 arguments (see actors/storage/calls.py).
KEYS = [f"bench:{n}" for n in range(6)]
ARGS = ["1763939000000", "MAXLEN", "1000000", "bench:", "", "1", "t|job-1", "1763939001000"]
ARGS += ["x" * 40, "y" * 20]


def ways(client: redis.Redis, sha: str) -> dict[str, Callable[[], Any]]:
    command = ("EVALSHA", sha, len(KEYS), *KEYS, *ARGS)
    held = HeldConnections(client)

    def pipeline() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        return pipe.execute(raise_on_error=False)

    return {
        "redis-py execute_command": lambda: client.execute_command(*command),  # type: ignore[no-untyped-call]
        "held connection, one call": lambda: held.call(*command),
        "redis-py pipeline of 2": pipeline,
        "held connection, pipeline of 2": lambda: held.pipeline([command, command]),
    }


def async_ways(client: aredis.Redis, sha: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    command = ("EVALSHA", sha, len(KEYS), *KEYS, *ARGS)
    held = AsyncHeldConnections(client)

    async def pipeline() -> Any:
        async with client.pipeline(transaction=False) as pipe:
            pipe.execute_command(*command)
            pipe.execute_command(*command)
            return await pipe.execute(raise_on_error=False)

    return {
        "redis.asyncio pipeline of 2": pipeline,
        "held async connection, pipeline of 2": lambda: held.pipeline([command, command]),
    }


Best = dict[str, tuple[float, float]]


def keep_best(best: Best, name: str, calls: int, started_cpu: float, started: float) -> None:
    cpu_us = (time.thread_time() - started_cpu) / calls * 1e6
    per_s = calls / (time.perf_counter() - started)
    if name not in best or cpu_us < best[name][0]:
        best[name] = (cpu_us, per_s)


def measure(url: str, calls: int, rounds: int) -> Best:
    client = redis.Redis.from_url(url)
    sha = client.script_load("return 0")
    timed = ways(client, sha)
    best: Best = {}
    for _ in range(rounds):
        for name, call in timed.items():
            call()  # connects, warms up
            started_cpu, started = time.thread_time(), time.perf_counter()
            for _ in range(calls):
                call()
            keep_best(best, name, calls, started_cpu, started)
    client.close()
    return best


async def measure_async(url: str, calls: int, rounds: int) -> Best:
    client = aredis.Redis.from_url(url)
    sha = await client.script_load("return 0")
    timed = async_ways(client, sha)
    best: Best = {}
    for _ in range(rounds):
        for name, call in timed.items():
            await call()  # connects, warms up
            started_cpu, started = time.thread_time(), time.perf_counter()
            for _ in range(calls):
                await call()
            keep_best(best, name, calls, started_cpu, started)
    await client.aclose()
    return best


def measured(url: str, args: argparse.Namespace) -> Best:
    if args.asyncio:
        return asyncio.run(measure_async(url, args.calls, args.rounds))
    return measure(url, args.calls, args.rounds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.call_overhead", description=__doc__
    )
    parser.add_argument("--calls", type=int, default=10_000, help="calls per way and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", help="a Redis URL instead of a private redis-server")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument(
        "--asyncio", action="store_true", help="time the async producer's ways instead"
    )
    parser.add_argument(
        "--cores",
        choices=list(CORES),
        default="any",
        help="the private server and this process: on cores apart, together, or any",
    )
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    cores = CORES[args.cores]
    if cores is not None and (args.url or not can_pin()):
        parser.error("--cores apart|together needs 2 cores or more and a private server (no --url)")
    load_before = os.getloadavg()[0]
    if args.url:
        best = measured(args.url, args)
    else:
        with (
            tempfile.TemporaryDirectory(prefix="redelay-calls-") as directory,
            RedisProcess(directory) as server,
        ):
            if cores is None:
                best = measured(server.url, args)
            else:
                assert server.process is not None
                pin_process(server.process.pid, cores[1])
                allowed = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {cores[0]})
                try:
                    best = measured(server.url, args)
                finally:  # main() may run inside another program (a test): give its cores back
                    os.sched_setaffinity(0, allowed)
    results = {
        name: {"client_cpu_us": cpu, "calls_per_s": rate} for name, (cpu, rate) in best.items()
    }
    load_after = os.getloadavg()[0]
    if args.json:
        report = {
            "results": results,
            "cores": args.cores,
            "load_before": load_before,
            "load_after": load_after,
        }
        json.dump(report, sys.stdout)
        print()
        return 0
    print(f"{'way':38} {'client CPU per call':>20} {'calls/s':>10}")
    for name, row in results.items():
        print(f"{name:38} {row['client_cpu_us']:17.1f} µs {row['calls_per_s']:10,.0f}")
    print(f"cores: {args.cores}; load average: {load_before:.2f} before, {load_after:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
