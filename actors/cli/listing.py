"""``redelay jobs``: one page of a topic's jobs in one state, with the cursor for the next."""

from __future__ import annotations

import argparse
from typing import Any

from actors.cli.context import Context
from actors.cli.output import (
    Exit,
    format_relative_ms,
    format_time_ms,
    job_json,
    print_json,
    table,
)
from actors.lifecycle import State
from actors.storage.listing import LISTED_STATES
from actors.values import JobInfo


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    states = [s.value for s in LISTED_STATES]
    p = sub.add_parser(
        "jobs",
        parents=[common],
        help="list a topic's jobs in one state, a page at a time",
        description="One page of a topic's jobs in one state: delayed by due time, ready in the "
        "order they will be leased, leased by lease deadline, dead by time of death. The page "
        "ends with the command for the next one (--json: next_after).",
    )
    p.add_argument("topic")
    p.add_argument(
        "--state", required=True, choices=states, help="which jobs: " + ", ".join(states)
    )
    p.add_argument("--after", metavar="CURSOR", help="the cursor a page printed: the next page")
    p.add_argument("--limit", type=int, default=100, help="most jobs on the page, 1 to 1000 (100)")
    p.set_defaults(run=run_jobs)


def run_jobs(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.store()
    page = store.jobs(args.topic, args.state, after=args.after, limit=args.limit)
    if ctx.json:
        print_json(
            {
                "topic": args.topic,
                "state": args.state,
                "jobs": [job_json(info) for info in page.jobs],
                "next_after": page.next_after,
            }
        )
        return Exit.OK
    state = State(args.state)
    if page.jobs:
        headers, rows = _table(state, page.jobs, store.clock.now_ms())
        print(table(headers, rows))
    else:
        print(f"no {'more ' if args.after else ''}{state} jobs in topic {args.topic}")
    if page.next_after is not None:
        words = ["jobs", args.topic, "--state", args.state, "--after", page.next_after]
        if args.limit != 100:
            words += ["--limit", str(args.limit)]
        print(f"\nnext page: {ctx.suggest(*words)}")
    return Exit.OK


# The time each state is ordered by, with the column names for it and for how far away it is.
_TIMES = {
    State.DELAYED: ("due", "when"),
    State.READY: ("due", "when"),
    State.LEASED: ("lease deadline", "when"),
    State.DEAD: ("died", "ago"),
}


def _when_ms(state: State, info: JobInfo) -> int:
    if state == State.LEASED:
        return info.lease_deadline_ms or 0
    if state == State.DEAD:
        return info.dead_since_ms or 0
    return info.due_ms


def _table(
    state: State, jobs: tuple[JobInfo, ...], now_ms: int
) -> tuple[list[str], list[list[object]]]:
    when, relative = _TIMES[state]
    attempts = "attempts" if state == State.DEAD else "attempt"
    headers = ["id", attempts, when, relative]
    rows: list[list[object]] = []
    for info in jobs:
        at_ms = _when_ms(state, info)
        count = info.attempts_failed if state == State.DEAD else info.attempt
        marks = " (cancel requested)" if info.cancel_requested else ""
        rows.append(
            [info.id + marks, count, format_time_ms(at_ms), format_relative_ms(at_ms, now_ms)]
        )
    return headers, rows
