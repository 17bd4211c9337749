"""Redis CPU per delivered job with many delayed jobs pending, on the Store alone (issue 15).

``simulations/bench/probes/pending_scale.py`` measures the same question through a worker process,
where the worker's own CPU bounds the rate; this drives the scripts from one loop (carry, then lease
and ack ``--batch`` at a time), so the figure is Redis's. For each N, a fresh private redis-server
(a Unix socket; pinned to core 1 and this process to core 0 where there are two cores) is filled
with N delayed jobs (~100-byte bodies, due 1 to 24 hours ahead, 1,000 per ``add_many``), then
``--deliver-jobs`` jobs due now are added (1,000 per ``add_many``) and delivered. For each of the
two phases it prints jobs/s, Redis CPU per job (INFO cpu) and the commands inside the scripts that
cost most per job (INFO commandstats, reset before each phase), so the part that grows with N has a
name: the add writes each job into the job pool of N fields, the delivery reads and deletes it
there. (Before a pending job's `added` id was kept in its record, the add also wrote a field into an
index of N fields.)

Then it drops the index generation the delivery left behind the way the scripts do (the stream
trimmed past the current generation's start, one more ack), and prints what that drop cost: the
ack's own time, how long Redis's background thread took to free the generation, the Redis CPU
it spent (all threads; one pinned core is shared by both) and the slowest PING while it ran,
because a cost paid once per generation shows in no per-job figure. With ``--free-core`` Redis's
freeing thread (``bio_lazy_free``) is moved to the client core, where this loop mostly waits,
so the main thread keeps its core to itself: what Redis's ``bio_cpulist`` setting would do.

To compare two versions, run it from each checkout (``PYTHONPATH=<checkout>``): the scripts'
keys are the code's, so one version's scripts cannot run under the other's Store.

    python -m simulations.bench probe pending_store_loop --pending 10000 10000000
    python -m simulations.bench probe pending_store_loop --pending 10000000 --free-core
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actors.clock import SystemClock
from actors.storage.keys import HISTORY_GENERATION_FIELD
from actors.storage.store import Store

from ..server import (
    CLIENT_CORE,
    BenchServer,
    can_pin,
    pin_clients,
    pin_threads,
    pinning_text,
)

TOPIC = "pending"
FILL_BATCH_JOBS = 1_000
PROGRESS_EVERY_JOBS = 1_000_000
SHOWN_COMMANDS = 8  # the commands a report lists, costliest per job first
FREE_TIMEOUT_S = 120.0  # a 10,000,000-field generation frees in seconds; give up long after
FREE_THREAD = "bio_lazy_free"  # Redis's thread for what UNLINK and lazyfree drop


@dataclass(slots=True)
class CommandCost:
    command: str
    calls: int
    usec_per_job: float


@dataclass(slots=True)
class AddPhase:
    """Adding the jobs due now on top of the N pending, before the delivery."""

    jobs: int
    jobs_per_s: float
    redis_cpu_us_per_job: float
    commands: list[CommandCost] = field(default_factory=list)


@dataclass(slots=True)
class LoopRun:
    pending: int
    delivered: int
    fill_s: float
    add: AddPhase
    jobs_per_s: float
    redis_cpu_us_per_job: float
    # With what Redis's background thread spent freeing what the delivery dropped (an UNLINKed
    # index generation), waited for after the delivery: a cost paid once per generation.
    redis_cpu_us_per_job_with_frees: float
    commands: list[CommandCost] = field(default_factory=list)
    drop: GenerationDrop | None = None


@dataclass(slots=True)
class GenerationDrop:
    """What dropping one whole index generation cost (rotate_history_index's UNLINK)."""

    fields: int  # the dropped generation's fields
    free_thread_core: str  # where the freeing thread ran: "Redis's core", "the client core", ...
    ack_ms: float  # the ack call that dropped it, round trip
    free_ms: float  # from before that ack until Redis had no lazily freed object left
    redis_cpu_ms: float  # the Redis process's CPU over the same time, every thread
    ping_max_ms: float  # the slowest PING sent while the generation was being freed
    pings: int


def fill(store: Store, pending: int, seed: int) -> float:
    """Adds ``pending`` delayed jobs due 1 to 24 hours ahead; returns the seconds it took."""
    rng, body = random.Random(seed), {"order": "x" * 90}
    started = time.perf_counter()
    for first in range(0, pending, FILL_BATCH_JOBS):
        last = min(pending, first + FILL_BATCH_JOBS)
        store.add_many(
            [
                store.new_job(TOPIC, f"p{n}", body, delay_ms=rng.randint(3_600_000, 86_400_000))
                for n in range(first, last)
            ]
        )
        if last % PROGRESS_EVERY_JOBS == 0:
            print(f"  filled {last:,} of {pending:,}", file=sys.stderr, flush=True)
    return time.perf_counter() - started


def deliver(store: Store, jobs: int, batch: int) -> int:
    """Carries every due job, then leases and acks ``batch`` at a time; returns jobs acked."""
    while store.carry()[0]:
        pass
    done = 0
    while done < jobs:
        leases = store.lease(TOPIC, batch)
        if not leases:
            break
        store.ack_many([(x.topic, x.id, x.token) for x in leases])
        done += len(leases)
    return done


def drop_generation(
    server: BenchServer, store: Store, free_core: bool = False
) -> GenerationDrop | None:
    """Trims the stream past the current generation's start, so that the next ack drops the
    previous generation (UNLINK) and renames the current one in its place, then acks one job and
    PINGs Redis until the background free is done. None when there is no previous generation."""
    client, keys = server.client, store.keys
    fields = int(client.hlen(keys.history_previous))
    fields -= int(client.hexists(keys.history_previous, HISTORY_GENERATION_FIELD))
    start = client.hget(keys.history, HISTORY_GENERATION_FIELD)
    if fields == 0 or start is None:
        return None
    began_ms = int(start.split()[-1])
    # Exact: an approximate trim keeps the stream node that holds older entries, and the ack
    # would then find one of them and keep the generation.
    client.xtrim(keys.audit, minid=f"{began_ms + 1}-0", approximate=False)
    where = "Redis's core" if can_pin() else "not pinned"
    if free_core and pin_threads(server.pid, CLIENT_CORE, named=FREE_THREAD):
        where = "the client core"
    store.add_many([store.new_job(TOPIC, "drop", {"n": 0})])
    store.carry()
    leases = store.lease(TOPIC, 1)
    cpu_before, started = server.stats().cpu_ms, time.perf_counter()
    store.ack_many([(x.topic, x.id, x.token) for x in leases])
    ack_ms = (time.perf_counter() - started) * 1000
    pings, ping_max_ms = 0, 0.0
    while time.perf_counter() - started < FREE_TIMEOUT_S:
        sent = time.perf_counter()
        client.ping()
        pings, ping_max_ms = pings + 1, max(ping_max_ms, (time.perf_counter() - sent) * 1000)
        if int(client.info("memory").get("lazyfree_pending_objects", 0)) == 0:
            break
    free_ms = (time.perf_counter() - started) * 1000
    # The generation that was current is now the previous one: the ack rotated, so it dropped.
    if client.hget(keys.history_previous, HISTORY_GENERATION_FIELD) != start:
        raise RuntimeError("the ack did not drop the previous index generation")
    return GenerationDrop(
        fields=fields,
        free_thread_core=where,
        ack_ms=round(ack_ms, 2),
        free_ms=round(free_ms, 2),
        redis_cpu_ms=round(server.stats().cpu_ms - cpu_before, 1),
        ping_max_ms=round(ping_max_ms, 2),
        pings=pings,
    )


def command_costs(stats: dict[str, Any], jobs: int) -> list[CommandCost]:
    """INFO commandstats as usec per delivered job, costliest first (evalsha is the scripts'
    whole time, the rest are the commands inside them)."""
    found = [
        CommandCost(name.removeprefix("cmdstat_"), int(v["calls"]), int(v["usec"]) / jobs)
        for name, v in stats.items()
        if name.startswith("cmdstat_") and not name.startswith(("cmdstat_config", "cmdstat_info"))
    ]
    return sorted(found, key=lambda c: -c.usec_per_job)


def add_due_now(server: BenchServer, store: Store, jobs: int) -> AddPhase:
    """Adds ``jobs`` jobs due now, 1,000 per call, and what that cost Redis."""
    server.client.config_resetstat()
    cpu_before, started = server.stats().cpu_ms, time.perf_counter()
    for first in range(0, jobs, FILL_BATCH_JOBS):
        last = min(jobs, first + FILL_BATCH_JOBS)
        store.add_many([store.new_job(TOPIC, f"now{n}", {"n": n}) for n in range(first, last)])
    elapsed, cpu_ms = time.perf_counter() - started, server.stats().cpu_ms - cpu_before
    return AddPhase(
        jobs=jobs,
        jobs_per_s=round(jobs / elapsed),
        redis_cpu_us_per_job=round(cpu_ms * 1000 / jobs, 1),
        commands=command_costs(server.client.info("commandstats"), jobs),
    )


def measure_one(
    pending: int,
    deliver_jobs: int,
    batch: int,
    seed: int,
    workdir: Path,
    free_core: bool = False,
) -> LoopRun:
    server = BenchServer(workdir)
    try:
        store = Store(server.client, "loop", SystemClock())
        fill_s = fill(store, pending, seed)
        added = add_due_now(server, store, deliver_jobs)
        server.client.config_resetstat()
        cpu_before, started = server.stats().cpu_ms, time.perf_counter()
        delivered = deliver(store, deliver_jobs, batch)
        elapsed, cpu_ms = time.perf_counter() - started, server.stats().cpu_ms - cpu_before
        with_frees_ms = server.settled_stats().cpu_ms - cpu_before
        commands = command_costs(server.client.info("commandstats"), max(1, delivered))
        return LoopRun(
            pending=pending,
            delivered=delivered,
            fill_s=round(fill_s, 1),
            add=added,
            jobs_per_s=round(delivered / elapsed),
            redis_cpu_us_per_job=round(cpu_ms * 1000 / max(1, delivered), 1),
            redis_cpu_us_per_job_with_frees=round(with_frees_ms * 1000 / max(1, delivered), 1),
            commands=commands,
            drop=drop_generation(server, store, free_core),
        )
    finally:
        server.stop()


def _command_lines(costs: list[CommandCost]) -> list[str]:
    return [
        f"  {cost.command:<16} {cost.calls:>8} calls  {cost.usec_per_job:6.2f} us/job"
        for cost in costs[:SHOWN_COMMANDS]
    ]


def report(runs: list[LoopRun], pinning: str) -> str:
    lines = [f"pending store loop ({pinning})"]
    for run in runs:
        lines.append(
            f"N={run.pending:,} (filled in {run.fill_s} s): added {run.add.jobs:,} jobs due now "
            f"at {run.add.jobs_per_s:,} jobs/s, Redis CPU {run.add.redis_cpu_us_per_job} us per job"
        )
        lines += _command_lines(run.add.commands)
        lines.append(
            f"N={run.pending:,}: {run.delivered:,} delivered, {run.jobs_per_s:,} jobs/s, "
            f"Redis CPU {run.redis_cpu_us_per_job} us per job, "
            f"{run.redis_cpu_us_per_job_with_frees} with the frees after it"
        )
        lines += _command_lines(run.commands)
        if run.drop is not None:
            d = run.drop
            lines.append(
                f"  dropping the previous index generation ({d.fields:,} fields): the ack took "
                f"{d.ack_ms} ms, freed in {d.free_ms:,} ms on {d.free_thread_core}, Redis CPU "
                f"{d.redis_cpu_ms:,} ms, slowest of {d.pings:,} PINGs meanwhile {d.ping_max_ms} ms"
            )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--deliver-jobs", type=int, default=50_000, help="jobs due now")
    parser.add_argument("--batch", type=int, default=100, help="jobs per lease and ack call")
    parser.add_argument(
        "--free-core",
        action="store_true",
        help=f"run Redis's {FREE_THREAD} thread on the client core for the generation drop",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if min(args.pending) < 0 or args.deliver_jobs < 1 or args.batch < 1:
        parser.error("--pending must be 0 or more, --deliver-jobs and --batch positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pin_clients()
    pinning = pinning_text(can_pin())
    runs = []
    with tempfile.TemporaryDirectory(prefix="redelay-store-loop-") as directory:
        for n, pending in enumerate(args.pending):
            workdir = Path(directory) / str(n)
            workdir.mkdir()
            runs.append(
                measure_one(
                    pending, args.deliver_jobs, args.batch, args.seed, workdir, args.free_core
                )
            )
    if args.json:
        print(json.dumps({"pinning": pinning, "runs": [asdict(r) for r in runs]}))
    else:
        print(report(runs, pinning))
    return 0 if all(r.delivered == args.deliver_jobs for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
