"""redelay's delivery rate against handler concurrency (the immediate scenario, DelayQueue).

The listener leases at most as many jobs as the pool has free slots, so concurrency is also the
most jobs per lease round trip; this shows how much of the delivery rate that bound costs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .runner import AgentFailed, RunContext, run_scenario
from .scenarios import Scenario
from .systems import BY_NAME

CONCURRENCIES = (10, 100, 1_000)
FIELDS = (
    "delivered_jobs_per_s",
    "redis_round_trips_per_delivered_job",
    "redis_commands_per_delivered_job",
    "client_cpu_ms_per_1k_jobs",
    "redis_cpu_ms_per_1k_jobs",
)


def concurrency_sweep(context: RunContext, jobs: int) -> list[dict[str, Any]]:
    scenario = Scenario("immediate", "immediate", jobs, "batch", deliver=True, wait_s=300)
    rows: list[dict[str, Any]] = []
    for concurrency in CONCURRENCIES:
        env = {**context.extra_env, "BENCH_REDELAY_CONCURRENCY": str(concurrency)}
        workdir = context.workdir / f"sweep-{concurrency}"
        workdir.mkdir(parents=True, exist_ok=True)
        sweep_context = replace(context, workdir=workdir, extra_env=env, profile_to=None)
        try:
            record = run_scenario(BY_NAME["redelay"], scenario, sweep_context)
        except AgentFailed as exc:
            rows.append({"concurrency": concurrency, "failed": str(exc)[-300:]})
            continue
        rows.append({"concurrency": concurrency, **{f: record.get(f) for f in FIELDS}})
    return rows
