"""``redelay schedules``: list, add (or update) and remove recurring schedules."""

from __future__ import annotations

import argparse
from typing import Any

from actors import schedules
from actors.cli.context import Context
from actors.cli.jobs import read_body
from actors.cli.output import (
    CliError,
    Exit,
    format_duration_ms,
    format_relative_ms,
    format_time_ms,
    parse_duration_s,
    parse_time_ms,
    print_json,
    schedule_json,
    table,
    usage_error,
)


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "schedules",
        parents=[common],
        help="list, add or remove recurring schedules",
        description="Recurring schedules: jobs made on a cron expression or every so often "
        "(docs/schedules.md). `add` with an existing name updates that schedule.",
    )
    p.add_argument("action", nargs="?", choices=("list", "add", "remove"), default="list")
    p.add_argument("name", nargs="?", help="the schedule's name (add, remove)")
    p.add_argument("topic", nargs="?", help="the topic its jobs go to (add)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--cron", help="a cron expression, e.g. '0 3 * * *' (add)")
    kind.add_argument("--every", help="an interval: 30 (seconds), 5m, 1h (add)")
    p.add_argument("--tz", default="UTC", help="the cron's time zone (default UTC)")
    p.add_argument(
        "--body",
        default="null",
        help="each job's body as JSON; @FILE reads it from a file, - from stdin (default: null)",
    )
    p.add_argument(
        "--start-at", help="first possible time: epoch seconds, ISO 8601 with a zone, or +10m"
    )
    p.add_argument(
        "--misfire",
        choices=schedules.MISFIRES,
        default="run_once",
        help="after downtime: run_once (one late run, default) or skip",
    )
    p.set_defaults(run=run_schedules)


def run_schedules(ctx: Context, args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(ctx)
    if args.name is None:
        raise usage_error(f"schedules {args.action}: give the schedule's name")
    if args.action == "remove":
        return _remove(ctx, args.name)
    return _add(ctx, args)


def _list(ctx: Context) -> int:
    store = ctx.store()
    infos = store.schedules()
    if ctx.json:
        print_json([schedule_json(info) for info in infos])
        return Exit.OK
    if not infos:
        print("no schedules")
        return Exit.OK
    now_ms = store.clock.now_ms()
    rows = [
        [
            info.spec.name,
            info.spec.topic,
            info.spec.cron or f"every {format_duration_ms(info.spec.every_ms or 0)}",
            info.spec.tz,
            info.spec.misfire,
            "-" if info.next_ms is None else format_time_ms(info.next_ms),
            "-" if info.next_ms is None else format_relative_ms(info.next_ms, now_ms),
        ]
        for info in infos
    ]
    print(table(["name", "topic", "when", "tz", "misfire", "next", "in"], rows))
    return Exit.OK


def _remove(ctx: Context, name: str) -> int:
    removed = ctx.store().unschedule(name)
    if not removed:
        raise CliError(Exit.NOT_FOUND, "not_found", f"no schedule {name}", {"removed": False})
    if ctx.json:
        print_json({"name": name, "removed": True})
    else:
        print(f"removed schedule {name}")
    return Exit.OK


def _add(ctx: Context, args: argparse.Namespace) -> int:
    if args.topic is None:
        raise usage_error("schedules add: give the schedule's name and topic")
    if (args.cron is None) == (args.every is None):
        raise usage_error("schedules add: give --cron or --every")
    store = ctx.store()
    now_ms = store.clock.now_ms()
    spec = schedules.spec(
        args.name,
        args.topic,
        cron=args.cron,
        every=None if args.every is None else parse_duration_s(args.every, "every"),
        tz=args.tz,
        body=read_body(args.body),
        start_at_ms=None if args.start_at is None else parse_time_ms(args.start_at, now_ms),
        misfire_policy=args.misfire,
    )
    outcome, _ = store.schedule(spec)
    (info,) = [i for i in store.schedules() if i.spec.name == spec.name]
    if ctx.json:
        print_json({"outcome": outcome} | schedule_json(info))
    else:
        when = "-" if info.next_ms is None else format_time_ms(info.next_ms)
        print(f"{outcome} schedule {spec.name} on {spec.topic}: next {when}")
    return Exit.OK
