"""``redelay workers``: the namespace's live worker processes, from their heartbeats."""

from __future__ import annotations

import argparse
from typing import Any

from actors.cli.context import Context
from actors.cli.output import format_relative_ms, format_time_ms, iso_ms, print_json, table
from actors.values import WorkerInfo


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "workers",
        parents=[common],
        help="list live worker processes (from their heartbeats)",
        description="Every started worker writes a heartbeat every 5 s to a key that expires "
        "after 15 s: this lists the live ones (name, host, pid, topics, busy slots, last beat). "
        "A crashed worker drops out by itself; a stopped one at once.",
    )
    p.set_defaults(run=run_workers)


def worker_json(info: WorkerInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "host": info.host,
        "pid": info.pid,
        "topics": list(info.topics),
        "busy_slots": info.busy_slots,
        "slots": info.slots,
        "started_ms": info.started_ms,
        "started": iso_ms(info.started_ms),
        "beat_ms": info.beat_ms,
        "beat": iso_ms(info.beat_ms),
    }


def run_workers(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.store()
    found = store.workers()
    if ctx.json:
        print_json({"namespace": store.namespace, "workers": [worker_json(w) for w in found]})
        return 0
    if not found:
        print("no live workers")
        return 0
    now_ms = store.clock.now_ms()
    rows = [
        [
            w.name,
            w.host,
            w.pid,
            ",".join(w.topics),
            f"{w.busy_slots}/{w.slots}",
            format_time_ms(w.started_ms),
            format_relative_ms(w.beat_ms, now_ms),
        ]
        for w in found
    ]
    print(table(["name", "host", "pid", "topics", "busy", "started", "last beat"], rows))
    return 0
