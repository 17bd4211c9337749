"""Subcommands on whole topics: pause and resume (stored in Redis, obeyed by every process)."""

from __future__ import annotations

import argparse
from typing import Any

from actors.cli.context import Context
from actors.cli.output import Exit, print_json


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pause",
        parents=[common],
        help="stop every worker leasing a topic's jobs",
        description="Pause a topic: no worker of the namespace leases its jobs until it is "
        "resumed (jobs already running finish; due jobs still become ready and wait).",
    )
    p.add_argument("topic")
    p.set_defaults(run=run_pause, paused=True)

    p = sub.add_parser(
        "resume",
        parents=[common],
        help="let workers lease a paused topic's jobs again",
        description="Resume a paused topic; its workers are woken at once.",
    )
    p.add_argument("topic")
    p.set_defaults(run=run_pause, paused=False)


def run_pause(ctx: Context, args: argparse.Namespace) -> int:
    changed = ctx.store().pause(args.topic, args.paused)
    if ctx.json:
        print_json({"topic": args.topic, "paused": args.paused, "changed": changed})
        return Exit.OK
    verb = "paused" if args.paused else "resumed"
    print(f"{verb} {args.topic}" if changed else f"{args.topic} was {verb} already")
    return Exit.OK
