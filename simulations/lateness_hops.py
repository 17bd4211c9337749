"""Where a delayed job's lateness goes, hop by hop (issue 15: lateness p99 <= 3 ms).

Runs the benchmark's ``steady`` scenario (simulations/bench/runner.run_scenario: a producer
process adding ``--rate`` jobs/s, each due ``--delay-ms`` MIN MAX later, and one worker process)
for each system and rate, on a private redis-server pinned like the benchmark's (Redis on core 1,
every client on core 0). Then it splits the lateness the worker's handler saw (handler start minus
due time) with the audit stream the scripts wrote on the way:

- carry: due time to the carry that moved the job to its ready list (the ``ready`` event);
- lease: that carry to the lease that handed the job to the worker (the ``leased`` event);
- hand-off: the lease to the handler's start, in the worker (the lease's reply, the actors'
  messages, a handler thread), as a mean: the handler's lateness is known per job only to the
  benchmark's recorder, not by job id, so this is the mean lateness less the two hops above.

An event's time is its ``ms`` field, the caller's clock in whole milliseconds (truncated), while
due times are whole milliseconds too. So a hop's percentiles are in whole ms, and the mean of a
hop that starts at a due time reads half a millisecond short on average: the means below add it
back (``TRUNCATION_MS``). The second hop's two ends are both truncated, so nothing is added.

With ``--pending N`` each server is first filled with N delayed jobs due 1 to 24 hours ahead
(``simulations.pending_scale.fill``, in the worker's topic), so the hops show where lateness
grows with a large backlog (issue 15: within 20% at 10,000,000 pending); only the audit entries
written after the fill are read.

    python -m simulations.lateness_hops                     # redelay, redelay-tuned, the store loop
    python -m simulations.lateness_hops --systems redelay --rates 5000 --seconds 30 --json
    python -m simulations.lateness_hops --systems redelay-tuned --rates 1000 --pending 10000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.clock import SystemClock
from actors.storage.calls import decoded
from actors.storage.store import Store
from actors.values import AuditEntry

from .bench import scenarios
from .bench.runner import RunContext, run_scenario
from .bench.scenarios import Scenario
from .bench.server import BenchServer, can_pin, pin_clients, pinning_text
from .bench.stats import percentile
from .bench.systems import BY_NAME
from .bench.systems.redelay_queue import NAMESPACE
from .pending_scale import fill

SYSTEMS = ("redelay", "redelay-tuned", "redelay-store")
TRUNCATION_MS = 0.5  # the mean shortfall of a whole-ms reading of a uniformly placed instant
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
            percentile(ordered, 0.50),  # nearest rank, as the benchmark's lateness figures
            percentile(ordered, 0.99),
            ordered[-1],
        )


@dataclass
class Hops:
    carry: HopStats | None
    lease: HopStats | None
    due_to_lease: HopStats | None
    jobs_seen: int  # delayed jobs with all three events
    jobs_not_carried: int = 0  # added due now (no carry), or no lease yet: left out
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


def hops(jobs: dict[tuple[str, str], JobTimes]) -> Hops:
    carry: list[float] = []
    lease: list[float] = []
    both: list[float] = []
    left_out = 0
    for times in jobs.values():
        if times.due_ms is None or times.ready_ms is None or times.leased_ms is None:
            left_out += 1
            continue
        carry.append(times.ready_ms - times.due_ms)
        lease.append(times.leased_ms - times.ready_ms)
        both.append(times.leased_ms - times.due_ms)
    return Hops(
        HopStats.of(carry, TRUNCATION_MS),
        HopStats.of(lease),
        HopStats.of(both, TRUNCATION_MS),
        len(carry),
        left_out,
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
            BY_NAME[system], scenario, RunContext(workdir=workdir, seed=seed), server
        )
        found = hops(job_times(store.iter_audit(start=start)))
    finally:
        server.stop()
    quantiles = record.pop("lateness_ms_quantiles", None) or []
    lateness_mean = round(statistics.fmean(quantiles), 3) if quantiles else None
    due_to_lease = found.due_to_lease
    hand_off = (
        round(lateness_mean - due_to_lease.mean_ms, 3)
        if lateness_mean is not None and due_to_lease is not None
        else None
    )
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
        "due_to_lease": _json(due_to_lease),
        "hand_off_mean_ms": hand_off,
        "jobs_with_every_hop": found.jobs_seen,
        "jobs_left_out": found.jobs_not_carried,
        "client_cpu_ms_per_1k_jobs": record.get("client_cpu_ms_per_1k_jobs"),
        "redis_cpu_ms_per_1k_jobs": record.get("redis_cpu_ms_per_1k_jobs"),
    }


def _json(stats: HopStats | None) -> dict[str, Any] | None:
    return None if stats is None else vars(stats)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.lateness_hops",
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
        "means in ms (hops corrected for whole-ms stamps); p50/p99 in whole ms",
        f"{'system':<15}{'rate':>6}{'pending':>11}  {'lateness p50/p99/mean':>22}  "
        f"{'carry mean p50/p99':>19}  {'lease mean p50/p99':>19}  {'hand-off mean':>13}",
    ]
    for run in result["runs"]:
        lateness = f"{run['lateness_ms_p50']}/{run['lateness_ms_p99']}/{run['lateness_ms_mean']}"
        lines.append(
            f"{run['system']:<15}{run['rate']:>6}{run['pending']:>11,}  {lateness:>22}  "
            f"{_hop(run['carry']):>19}  {_hop(run['lease']):>19}  {run['hand_off_mean_ms']!s:>13}"
        )
    return "\n".join(lines)


def _hop(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "-"
    return f"{stats['mean_ms']} {stats['p50_ms']:g}/{stats['p99_ms']:g}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pin_clients()  # Redis gets core 1, every client (this, producers, workers) core 0
    result = measure(args)
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
