"""Where a delayed job's lateness goes, hop by hop (issue 15: lateness p99 <= 3 ms).

Runs the benchmark's ``steady`` scenario (simulations/bench/runner.run_scenario: a producer
process adding ``--rate`` jobs/s, each due ``--delay-ms`` MIN MAX later, and one worker process)
for each system and rate, on a private redis-server pinned like the benchmark's (Redis on core 1,
every client on core 0). Then it splits the lateness the worker's handler saw (handler start minus
due time) with the audit stream the scripts wrote on the way:

- carry: due time to the carry that moved the job to its ready list (the ``ready`` event);
- lease: that carry to the lease that handed the job to the worker (the ``leased`` event);
- hand-off: the lease to the handler's start, in the worker (the lease's reply, the actors'
  messages, a handler thread): each job's lateness as the benchmark's recorder wrote it (beside
  the job's seq, which names it) less its due-to-lease time.

And for the slowest 1% (the jobs at or past the p99 of the lateness), each hop's mean: where the
tail's time goes, which the hops' own p99s do not say, since a job late in one hop need not be
late in another.

An event's time is its ``ms`` field, the caller's clock in whole milliseconds (truncated), while
due times are whole milliseconds too. So a hop's percentiles are in whole ms, and the mean of a
hop that starts at a due time reads half a millisecond short on average: the means below add it
back (``TRUNCATION_MS``). The second hop's two ends are both truncated, so nothing is added; the
hand-off starts at a truncated time and ends at an exact one, so it reads half a millisecond long
on average (each job's up to one): its mean takes the half off, its percentiles keep it. Half a
millisecond is right for an instant placed anywhere in its millisecond. Since the clock's timers
wake at a millisecond's start (SystemClock.seconds_until, 2026-11-29) a carry falls early in its
millisecond, so the corrected carry mean reads high and the lease and hand-off means low, by up
to half a millisecond between them; the sum of the hops, the lateness, is exact either way.

The lateness mean is the mean of every delivered job's lateness. (Up to 2026-11-29 it was the mean
of the record's 101 quantile points, of which the max is one: a single job late by 160 ms, one
whose producer added it after its due time, moved it by 1.6 ms, and with it the hand-off, then
the mean lateness less the other hops.)

With ``--pending N`` each server is first filled with N delayed jobs due 1 to 24 hours ahead
(``simulations.bench.probes.pending_scale.fill``, in the worker's topic), so the hops show where
lateness grows with a large backlog (issue 15: within 20% at 10,000,000 pending); only the audit
entries written after the fill are read.

    python -m simulations.bench probe lateness_hops  # redelay, redelay-tuned, the store loop
    python -m simulations.bench probe lateness_hops --systems redelay --rates 5000 --seconds 30 \
        --json
    python -m simulations.bench probe lateness_hops --systems redelay-tuned --rates 1000 \
        --pending 10000000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.clock import SystemClock
from actors.storage.calls import decoded
from actors.storage.store import Store
from actors.values import AuditEntry

from .. import scenarios
from ..jobs import job_id
from ..runner import RunContext, run_scenario
from ..scenarios import Scenario
from ..server import BenchServer, can_pin, pin_clients, pinning_text
from ..stats import percentile
from ..systems import BY_NAME
from ..systems.redelay_queue import NAMESPACE
from .pending_scale import fill

SYSTEMS = ("redelay", "redelay-tuned", "redelay-store")
TRUNCATION_MS = 0.5  # the mean shortfall of a whole-ms reading of a uniformly placed instant
TAIL_FRACTION = 0.99  # the tail split: jobs at or past this percentile of the lateness
WAIT_S = 5.0  # for the last deliveries, after the longest delay
PENDING_DUE_HOURS = (1.0, 24.0)  # --pending jobs: due long after every run


@dataclass
class JobTimes:
    """One job's first attempt: its due time and when it was carried and leased (whole ms)."""

    due_ms: int | None = None
    ready_ms: int | None = None
    leased_ms: int | None = None


@dataclass
class HopStats:
    jobs: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float

    @staticmethod
    def of(values: Sequence[float], mean_correction: float = 0.0) -> HopStats | None:
        if not values:
            return None
        ordered = sorted(values)
        return HopStats(
            len(ordered),
            round(statistics.fmean(ordered) + mean_correction, 3),
            round(percentile(ordered, 0.50), 3),  # nearest rank, as the benchmark's lateness
            round(percentile(ordered, 0.99), 3),
            round(ordered[-1], 3),
        )


@dataclass
class TailSplit:
    """The slowest jobs' mean time in each hop (corrected as the hops' own means)."""

    jobs: int
    lateness_from_ms: float  # the percentile of the lateness they are at or past
    carry_mean_ms: float
    lease_mean_ms: float
    hand_off_mean_ms: float


@dataclass
class Hops:
    carry: HopStats | None
    lease: HopStats | None
    due_to_lease: HopStats | None
    jobs_seen: int  # delayed jobs with all three events
    jobs_not_carried: int = 0  # added due now (no carry), or no lease yet: left out
    hand_off: HopStats | None = None  # only with each job's lateness
    tail: TailSplit | None = None  # likewise
    jobs_without_lateness: int = 0  # with all three events, but not delivered (or not by seq)
    extra: dict[str, Any] = field(default_factory=dict)


def job_times(entries: Iterable[AuditEntry]) -> dict[tuple[str, str], JobTimes]:
    """Each job's due, carry and first lease times, from its audit entries (any order of jobs,
    each job's own entries oldest first)."""
    jobs: dict[tuple[str, str], JobTimes] = {}
    for _, fields in entries:
        event = fields.get("e")
        key = (fields.get("t", ""), fields.get("i", ""))
        if event == "added":
            jobs.setdefault(key, JobTimes()).due_ms = int(fields["due"])
        elif event == "ready" and key in jobs and jobs[key].ready_ms is None:
            jobs[key].ready_ms = int(fields["ms"])
        elif event == "leased" and key in jobs and jobs[key].leased_ms is None:
            jobs[key].leased_ms = int(fields["ms"])
    return jobs


def hops(
    jobs: dict[tuple[str, str], JobTimes], lateness_by_id: Mapping[str, float] | None = None
) -> Hops:
    """Each hop's figures over the jobs with all three events; with ``lateness_by_id`` (each
    delivered job's lateness by its id) the hand-off and the tail's split too."""
    carry: list[float] = []
    lease: list[float] = []
    both: list[float] = []
    # (lateness, carry, lease, hand-off) of each job whose lateness is known
    split: list[tuple[float, float, float, float]] = []
    left_out = without_lateness = 0
    for (_, job), times in jobs.items():
        if times.due_ms is None or times.ready_ms is None or times.leased_ms is None:
            left_out += 1
            continue
        carry.append(times.ready_ms - times.due_ms)
        lease.append(times.leased_ms - times.ready_ms)
        both.append(times.leased_ms - times.due_ms)
        lateness = None if lateness_by_id is None else lateness_by_id.get(job)
        if lateness is None:
            without_lateness += 1
        else:
            split.append((lateness, carry[-1], lease[-1], lateness - both[-1]))
    found = Hops(
        HopStats.of(carry, TRUNCATION_MS),
        HopStats.of(lease),
        HopStats.of(both, TRUNCATION_MS),
        len(carry),
        left_out,
    )
    if lateness_by_id is not None:
        found.jobs_without_lateness = without_lateness
        found.hand_off = HopStats.of([row[3] for row in split], -TRUNCATION_MS)
        found.tail = tail_split(split)
    return found


def tail_split(split: Sequence[tuple[float, float, float, float]]) -> TailSplit | None:
    """The hops' means over the slowest jobs, from the TAIL_FRACTION percentile of the lateness
    up (rows: lateness, carry, lease, hand-off)."""
    if not split:
        return None
    ordered = sorted(split)
    # From the percentile's own rank (nearest rank, as percentile()) to the slowest: a fixed
    # count, however many jobs tie at the cut.
    tail = ordered[max(1, math.ceil(TAIL_FRACTION * len(ordered))) - 1 :]
    return TailSplit(
        len(tail),
        round(tail[0][0], 3),
        round(statistics.fmean(row[1] for row in tail) + TRUNCATION_MS, 3),
        round(statistics.fmean(row[2] for row in tail), 3),
        round(statistics.fmean(row[3] for row in tail) - TRUNCATION_MS, 3),
    )


def steady(rate: int, seconds: float, delay_ms: tuple[int, int]) -> Scenario:
    return scenarios.steady(rate, seconds, delay_ms[0], delay_ms[1], WAIT_S)


def measure_one(
    system: str, scenario: Scenario, workdir: Path, seed: int, pending: int = 0
) -> dict[str, Any]:
    """One steady run on a fresh server (first filled with ``pending`` delayed jobs); the
    record's lateness with the audit stream's hops."""
    server = BenchServer(workdir / f"redis-{system}-{scenario.name}-{pending}")
    try:
        store = Store(server.client, NAMESPACE, SystemClock())
        if pending:
            print(f"filling {pending:,} pending jobs", file=sys.stderr, flush=True)
            fill(store, pending, PENDING_DUE_HOURS, seed)
        # The run's own entries are those after the fill's last one. A time ("<ms>-0") would
        # also take in the fill's entries written in the millisecond the run began.
        last = server.client.xrevrange(store.keys.audit, count=1)
        start = "(" + decoded(last[0][0]) if last else "-"
        record = run_scenario(
            BY_NAME[system],
            scenario,
            RunContext(workdir=workdir, seed=seed),
            server,
            per_job=True,
        )
        lateness_by_seq: dict[int, float] = record.pop("lateness_ms_by_seq", {})
        lateness_by_id = {job_id(seq): ms for seq, ms in lateness_by_seq.items()}
        found = hops(job_times(store.iter_audit(start=start)), lateness_by_id)
    finally:
        server.stop()
    lateness = list(lateness_by_seq.values())
    lateness_mean = round(statistics.fmean(lateness), 3) if lateness else None
    return {
        "system": system,
        "rate": scenario.rate_per_s,
        "pending": pending,
        "jobs": record.get("jobs"),
        "delivered": record.get("delivered"),
        "early_deliveries": record.get("early_deliveries"),
        "lateness_ms_p50": record.get("lateness_ms_p50"),
        "lateness_ms_p99": record.get("lateness_ms_p99"),
        "lateness_ms_mean": lateness_mean,
        "carry": _json(found.carry),
        "lease": _json(found.lease),
        "due_to_lease": _json(found.due_to_lease),
        "hand_off": _json(found.hand_off),
        "tail": None if found.tail is None else vars(found.tail),
        "jobs_with_every_hop": found.jobs_seen,
        "jobs_left_out": found.jobs_not_carried,
        "jobs_without_lateness": found.jobs_without_lateness,
        "client_cpu_ms_per_1k_jobs": record.get("client_cpu_ms_per_1k_jobs"),
        "redis_cpu_ms_per_1k_jobs": record.get("redis_cpu_ms_per_1k_jobs"),
    }


def _json(stats: HopStats | None) -> dict[str, Any] | None:
    return None if stats is None else vars(stats)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.bench probe lateness_hops",
        description="Splits steady lateness into carry, lease and hand-off (issue 15).",
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--rates", type=int, nargs="+", default=[1_000, 5_000], help="jobs/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="steady duration")
    parser.add_argument("--delay-ms", type=int, nargs=2, default=[1_000, 3_000])
    parser.add_argument(
        "--pending", type=int, default=0, help="delayed jobs due hours ahead, added before each run"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = [name for name in systems if name not in SYSTEMS]
    if unknown or not systems:
        parser.error(f"--systems: choose from {', '.join(SYSTEMS)} (got {args.systems!r})")
    if any(rate < 1 for rate in args.rates):
        parser.error("--rates: each rate must be at least 1 job/s")
    if args.seconds <= 0:
        parser.error("--seconds: must be more than 0")
    if args.pending < 0:
        parser.error("--pending: must be 0 or more")
    low, high = args.delay_ms
    if not 0 < low <= high:
        parser.error("--delay-ms: give MIN MAX with 0 < MIN <= MAX")
    args.systems = systems
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    pinning = pinning_text(can_pin())
    result: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "pinning": pinning,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="redelay-hops-") as directory:
        for rate in args.rates:
            scenario = steady(rate, args.seconds, tuple(args.delay_ms))
            for system in args.systems:
                print(f"{system}: steady {rate:,} jobs/s", file=sys.stderr, flush=True)
                result["runs"].append(
                    measure_one(system, scenario, Path(directory), args.seed, args.pending)
                )
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{result['pinning']}; load average {result['load_average_start'][0]} at the start, "
        f"{result['load_average_end'][0]} at the end",
        "ms; means corrected for whole-ms stamps, carry and lease p50/p99 in whole ms; "
        "slowest 1%: each hop's mean over the jobs at or past the lateness p99",
        f"{'system':<15}{'rate':>6}{'pending':>11}  {'lateness p50/p99/mean':>22}  "
        f"{'carry mean p50/p99':>19}  {'lease mean p50/p99':>19}  "
        f"{'hand-off mean p50/p99':>22}  {'slowest 1%: carry/lease/hand-off':>32}",
    ]
    for run in result["runs"]:
        lateness = f"{run['lateness_ms_p50']}/{run['lateness_ms_p99']}/{run['lateness_ms_mean']}"
        lines.append(
            f"{run['system']:<15}{run['rate']:>6}{run['pending']:>11,}  {lateness:>22}  "
            f"{_hop(run['carry']):>19}  {_hop(run['lease']):>19}  {_hop(run['hand_off']):>22}  "
            f"{_tail(run['tail']):>32}"
        )
    return "\n".join(lines)


def _hop(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "-"
    return f"{stats['mean_ms']} {stats['p50_ms']:.3g}/{stats['p99_ms']:.3g}"


def _tail(tail: dict[str, Any] | None) -> str:
    if tail is None:
        return "-"
    return f"{tail['carry_mean_ms']}/{tail['lease_mean_ms']}/{tail['hand_off_mean_ms']}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pin_clients()  # Redis gets core 1, every client (this, producers, workers) core 0
    result = measure(args)
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
