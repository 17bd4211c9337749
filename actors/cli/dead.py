"""``redelay dead``: list, requeue or purge the jobs whose retry schedule ran out or that were
quarantined (their worker lost too often while they ran alone)."""

from __future__ import annotations

import argparse
from typing import Any

from actors._constants import BATCH_MAX_JOBS
from actors.cli.context import Context
from actors.cli.output import (
    CliError,
    Exit,
    dead_reason,
    format_relative_ms,
    format_time_ms,
    job_json,
    print_json,
    table,
    usage_error,
)
from actors.lifecycle import State


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "dead",
        parents=[common],
        help="list, requeue or purge dead jobs",
        description=(
            "Dead jobs: those whose retry schedule ran out, and those quarantined because their "
            "worker was lost (died) too often while they ran alone."
        ),
    )
    p.add_argument("action", nargs="?", choices=("list", "requeue", "purge"), default="list")
    p.add_argument("--topic", help="only this topic")
    p.add_argument("--id", help="only this job (needs --topic)")
    p.add_argument("--all", action="store_true", help="every dead job (requeue, purge)")
    p.add_argument("--limit", type=int, default=100, help="most jobs listed (default 100)")
    p.set_defaults(run=run_dead)


def run_dead(ctx: Context, args: argparse.Namespace) -> int:
    if args.id is not None and args.topic is None:
        raise usage_error("dead: --id needs --topic")
    if args.action == "list":
        return _dead_list(ctx, args)
    if not (args.all or args.topic):
        raise usage_error(f"dead {args.action}: say which jobs: --topic T [--id ID], or --all")
    if args.all and args.topic:
        raise usage_error(f"dead {args.action}: give either --all or --topic, not both")
    store = ctx.store()
    one = args.id is not None
    targets = [(args.topic, args.id)] if one else list(store.dead_keys(args.topic))
    change = store.requeue_dead if args.action == "requeue" else store.purge_dead
    done = 0
    for start in range(0, len(targets), BATCH_MAX_JOBS):
        done += change(targets[start : start + BATCH_MAX_JOBS])
    past = "requeued" if args.action == "requeue" else "purged"
    if one and done == 0:  # the error is the one document --json prints
        message = f"no dead job {args.topic}/{args.id}"
        raise CliError(Exit.NOT_FOUND, "not_found", message, {past: 0})
    if ctx.json:
        print_json({past: done})
    else:
        print(f"{past} {done} dead job{'s' if done != 1 else ''}")
    return Exit.OK


def _dead_list(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.store()
    if args.limit < 1:
        raise usage_error("dead list: --limit must be at least 1")
    if args.id is not None:
        info = store.get(args.topic, args.id)
        if info is None or info.state != State.DEAD:
            raise CliError(Exit.NOT_FOUND, "not_found", f"no dead job {args.topic}/{args.id}")
        infos = [info]
    else:
        infos = store.dead(args.topic, args.limit)
    if ctx.json:
        print_json([{**job_json(info), "why": dead_reason(info)} for info in infos])
        return Exit.OK
    if not infos:
        print("no dead jobs")
        return Exit.OK
    now_ms = store.clock.now_ms()
    rows = [
        [
            info.topic,
            info.id,
            info.attempts_failed,
            format_time_ms(info.dead_since_ms or 0),
            format_relative_ms(info.dead_since_ms or 0, now_ms),
            dead_reason(info)[:80],
        ]
        for info in infos
    ]
    print(table(["topic", "id", "attempts", "died", "ago", "why"], rows))
    print(f"\nwhy it died: {ctx.suggest('history', infos[0].topic, infos[0].id)}")
    return Exit.OK
