"""Subcommands on whole topics: pause and resume (stored in Redis, obeyed by every process)."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from actors import _validation as validation
from actors.cli.context import Context
from actors.cli.output import CliError, Exit, print_json


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pause",
        parents=[common],
        help="stop every worker leasing a topic's jobs",
        description="Pause a topic: no worker of the namespace leases its jobs until it is "
        "resumed (jobs already running finish; due jobs still become ready and wait). A topic "
        "the namespace has never had a job of is refused (a typo would pause nothing real) "
        "unless --new says it is meant.",
    )
    p.add_argument("topic")
    p.add_argument(
        "--new",
        action="store_true",
        help="pause a topic that has no job yet (paused before its first job is added)",
    )
    p.set_defaults(run=run_pause, paused=True)

    p = sub.add_parser(
        "resume",
        parents=[common],
        help="let workers lease a paused topic's jobs again",
        description="Resume a paused topic; its workers are woken at once.",
    )
    p.add_argument("topic")
    p.set_defaults(run=run_pause, paused=False, new=False)


def run_pause(ctx: Context, args: argparse.Namespace) -> int:
    validation.topic(args.topic)
    store = ctx.store()
    known = set(store.topics()) | store.paused_topics()
    if args.topic not in known and not args.new:
        hint = "--new to pause it before its first job" if args.paused else None
        raise unknown_topic(args.topic, sorted(known), hint)
    changed = store.pause(args.topic, args.paused)
    if ctx.json:
        print_json({"topic": args.topic, "paused": args.paused, "changed": changed})
        return Exit.OK
    verb = "paused" if args.paused else "resumed"
    print(f"{verb} {args.topic}" if changed else f"{args.topic} was {verb} already")
    return Exit.OK


def unknown_topic(topic: str, known: list[str], new_hint: str | None) -> CliError:
    """A topic that no job, worker or gate ever used: most likely a typo of a real one.
    ``new_hint``: how to act on it anyway ("--new to pause it before its first job")."""
    close = difflib.get_close_matches(topic, known, n=3)
    message = f"no topic {topic!r} in this namespace (no job has used it)"
    if close:
        message += f"; did you mean {' or '.join(close)}?"
    if new_hint:
        message += f" Pass {new_hint}."
    return CliError(Exit.NOT_FOUND, "not_found", message, {"topic": topic, "similar": close})
