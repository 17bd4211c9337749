"""``redelay limit``: see and set a topic's rate and in-flight limits (``DelayQueue.limit``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from actors import _validation as validation
from actors._constants import IN_FLIGHT_MAX
from actors.cli.context import Context
from actors.cli.output import (
    Exit,
    format_duration_ms,
    parse_duration_s,
    print_json,
    table,
    usage_error,
)
from actors.cli.topics import unknown_topic

if TYPE_CHECKING:  # the parser is built without redis-py (tests/test_cli_imports.py)
    from actors.values import TopicLimits


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "limit",
        parents=[common],
        help="show or set topics' rate and in-flight limits",
        description="Without TOPIC, lists every limited topic. With TOPIC alone, shows its "
        "limits. With --rate and/or --max-in-flight, replaces them (for every worker of the "
        "namespace, enforced by the lease script); --lift removes them. Jobs a limit holds back "
        "stay ready and count no attempt.",
    )
    p.add_argument("topic", nargs="?")
    p.add_argument(
        "--rate",
        metavar="JOBS/DURATION",
        help="at most JOBS leased per DURATION, e.g. 100/1m or 5/1s",
    )
    p.add_argument("--max-in-flight", type=int, metavar="N", help="at most N leased at once")
    p.add_argument("--lift", action="store_true", help="remove the topic's limits")
    p.add_argument(
        "--new", action="store_true", help="limit a topic that has no job yet (before its first)"
    )
    p.set_defaults(run=run_limit)


def parse_rate(text: str) -> tuple[int, float]:
    """``JOBS/DURATION`` as (jobs, seconds); the store checks the bounds."""
    jobs, sep, per = text.partition("/")
    if not sep or not jobs.strip().isdigit():
        raise usage_error(f"rate: {text!r} is not JOBS/DURATION (e.g. 100/1m, 5/1s)")
    return int(jobs), parse_duration_s(per.strip(), "rate")


def limits_json(limits: TopicLimits) -> dict[str, Any]:
    return {
        "rate": None if limits.rate is None else {"jobs": limits.rate[0], "per_s": limits.rate[1]},
        "max_in_flight": limits.max_in_flight,
    }


def describe(limits: TopicLimits) -> str:
    parts = []
    if limits.rate is not None:
        parts.append(f"{limits.rate[0]} per {format_duration_ms(limits.rate[1] * 1000)}")
    if limits.max_in_flight is not None:
        parts.append(f"{limits.max_in_flight} in flight")
    return ", ".join(parts) or "none"


def run_limit(ctx: Context, args: argparse.Namespace) -> int:
    setting = args.rate is not None or args.max_in_flight is not None
    if args.topic is None:
        if setting or args.lift:
            raise usage_error("limit: --rate, --max-in-flight and --lift need a TOPIC")
        return _list(ctx)
    validation.topic(args.topic)
    if setting and args.lift:
        raise usage_error("limit: --lift removes the limits; it takes no --rate or --max-in-flight")
    rate = None if args.rate is None else parse_rate(args.rate)
    # Checked before connecting (exit 2 with Redis down too), as the store checks them.
    from actors.storage import gates
    from actors.values import TopicLimits

    if rate is not None:
        gates.rate_arg(rate)
    if args.max_in_flight is not None:
        validation.count(args.max_in_flight, "max-in-flight", IN_FLIGHT_MAX)
    wanted = TopicLimits(rate, args.max_in_flight)
    store = ctx.store()
    if setting or args.lift:
        known = set(store.topics()) | set(store.all_limits())
        if args.topic not in known and not args.new:
            raise unknown_topic(args.topic, sorted(known), "--new to limit it before its first job")
        store.set_limits(args.topic, wanted if setting else TopicLimits())
    limits = store.limits(args.topic)
    if ctx.json:
        print_json({"topic": args.topic, **limits_json(limits)})
    elif setting or args.lift:
        print(f"{args.topic}: limits {describe(limits)}")
    else:
        print(f"{args.topic}: {describe(limits)}")
    return Exit.OK


def _list(ctx: Context) -> int:
    limits = ctx.store().all_limits()
    if ctx.json:
        print_json({topic: limits_json(each) for topic, each in limits.items()})
        return Exit.OK
    if not limits:
        print("no topic is limited")
        return Exit.OK
    rows = [[topic, describe(each)] for topic, each in limits.items()]
    print(table(["topic", "limits"], rows))
    return Exit.OK
