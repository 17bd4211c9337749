"""``redelay metrics``: the namespace's job gauges, once, in Prometheus's text format."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from actors.cli.context import Context
from actors.cli.output import print_json, usage_error

INSTALL_HINT = "needs prometheus-client (the metrics extra): pip install prometheus-client"


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "metrics",
        parents=[common],
        help="print the job gauges in Prometheus text format",
        description="Reads the jobs per topic and state from Redis (the counters the scripts "
        "keep, one read per shard) and prints them once as Prometheus metrics: for a textfile "
        "collector, a cron job, or a look by hand. A worker's own numbers (lateness, handler "
        "durations) are served by `redelay worker --metrics-port`.",
    )
    p.set_defaults(run=run_metrics)


def run_metrics(ctx: Context, args: argparse.Namespace) -> int:
    try:
        from actors import metrics
    except ModuleNotFoundError:
        raise usage_error(f"metrics: {INSTALL_HINT}") from None
    # Read before printing, so that a Redis error ends the command like any other (exit 3 or 7)
    # instead of a document that says redelay_redis_up 0.
    store = ctx.store()
    counts = store.stats(with_paused=True)
    memory = store.memory()
    overdue = metrics.overdue_s(store)
    limits = store.all_limits()
    registry = metrics.redis_registry(
        lambda: counts, lambda: memory, lambda: overdue, lambda: limits
    )
    if ctx.json:
        print_json(metrics.samples(registry))
    else:
        sys.stdout.write(metrics.exposition(registry))
    return 0
