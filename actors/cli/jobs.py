"""Subcommands on single jobs and the namespace: add, cancel, get, stats."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors import _validation as validation
from actors._constants import BODY_MAX_DEPTH
from actors.cli.context import Context
from actors.cli.limits import describe as describe_limits
from actors.cli.limits import limits_json
from actors.cli.outbox import add_db_option, db_url, outbox_status, status_line
from actors.cli.output import (
    STATES,
    CliError,
    Exit,
    describe_job,
    format_relative_ms,
    format_time_ms,
    job_json,
    parse_duration_s,
    parse_schedule_s,
    parse_time_ms,
    print_json,
    table,
    usage_error,
)
from actors.errors import JobExistsError
from actors.lifecycle import State

if TYPE_CHECKING:  # the parser is built without redis-py (tests/cli/test_cli_imports.py)
    from actors.values import NewJob


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "add",
        parents=[common],
        help="add a job (due now, after --delay, or --at a time)",
        description="Add a job. Without --delay or --at it is due now.",
    )
    p.add_argument("topic")
    p.add_argument("id")
    p.add_argument(
        "--body",
        default="null",
        help="the job's body as JSON; @FILE reads it from a file, - from stdin (default: null)",
    )
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay", help="due after this long: 30 (seconds), 500ms, 5m, 1h30m")
    when.add_argument(
        "--at", help="due at: epoch seconds, ISO 8601 with a zone, or +10m (as the API's at)"
    )
    p.add_argument("--retry", help="this job's retry delays, e.g. 15s,3m,10m (default: topic's)")
    p.add_argument("--lease", help="this job's lease, e.g. 30s (default: topic's)")
    p.add_argument("--callback", metavar="URL", help="http(s) URL to POST the body to when due")
    exists = p.add_mutually_exclusive_group()
    exists.add_argument(
        "--replace", action="store_true", help="reschedule the job if it exists (else: exit 4)"
    )
    exists.add_argument(
        "--if-exists",
        choices=("error", "keep", "replace"),
        help="when the job exists: error (exit 4, the default), keep it as it is, or replace it",
    )
    p.set_defaults(run=run_add)

    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("topic")
    p.add_argument("id")
    p.set_defaults(run=run_cancel)

    p = sub.add_parser("get", parents=[common], help="show one job")
    p.add_argument("topic")
    p.add_argument("id")
    p.set_defaults(run=run_get)

    p = sub.add_parser("stats", parents=[common], help="jobs per topic and state")
    add_db_option(p, required=False)
    p.set_defaults(run=run_stats)


# -- add, cancel, get -------------------------------------------------------------------------


def read_body(text: str) -> Any:
    """--body as JSON: the text itself, ``@FILE`` or ``-`` (stdin), both read as UTF-8."""
    if text == "-":
        source, raw = "stdin", _utf8("stdin", sys.stdin.buffer.read())
    elif text.startswith("@"):
        source = text[1:]
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise usage_error(f"body: cannot read {source}: {exc.strerror}") from None
        raw = _utf8(source, data)
    else:
        source, raw = "--body", text
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise usage_error(f"body: {source} is not valid JSON: {exc}") from None
    except RecursionError:  # json's parser recurses per level; a body may have far fewer
        raise usage_error(
            f"body: {source} is nested too deeply "
            f"(limit: {BODY_MAX_DEPTH} levels of arrays and objects)"
        ) from None


def _utf8(source: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise usage_error(
            f"body: {source} is not UTF-8 text: byte {exc.start} (0x{data[exc.start]:02x}) "
            f"{exc.reason}"
        ) from None


def _new_job(args: argparse.Namespace, body: Any, now_ms: int) -> NewJob:
    """add's job at ``now_ms``, checked as the API's add checks it: the same limits, and errors
    in seconds; --at reads as ``at`` does (a past time means now)."""
    from actors import producing  # imports the store's values: only when a job is added

    return producing.new_job(
        now_ms,
        args.topic,
        args.id,
        body,
        delay=None if args.delay is None else parse_duration_s(args.delay, "delay"),
        at=None if args.at is None else parse_time_ms(args.at, now_ms, "at") / 1000,
        retry=None if args.retry is None else parse_schedule_s(args.retry),
        lease=None if args.lease is None else parse_duration_s(args.lease, "lease"),
        callback=args.callback,
    )


def run_add(ctx: Context, args: argparse.Namespace) -> int:
    body = read_body(args.body)
    mode = validation.if_exists(args.if_exists, args.replace)
    # Checked before connecting, so bad input exits 2 whether Redis is up or not (a script must
    # not retry it as an outage); built again below at Redis's time, which due times use.
    _new_job(args, body, round(time.time() * 1000))
    store = ctx.store()
    now_ms = store.clock.now_ms()
    job = _new_job(args, body, now_ms)
    try:
        before = store.add(job, if_exists=mode)
    except JobExistsError:
        raise CliError(
            Exit.EXISTS,
            "exists",
            f"job {job.topic}/{job.id} already exists; pass --replace to reschedule it "
            "or --if-exists keep to leave it",
        ) from None
    info = store.get(job.topic, job.id)
    state = info.state if info is not None else "gone"
    if ctx.json:
        print_json(
            {
                "topic": job.topic,
                "id": job.id,
                "state": state,
                "due_ms": job.due_ms,
                "replaced": before if before != State.NEW and mode == "replace" else None,
                "kept": mode == "keep" and before != State.NEW,
            }
        )
    else:
        verb = "added" if before == State.NEW else f"replaced ({before} before)"
        if mode == "keep" and before != State.NEW:
            verb = "kept (it existed)"
        print(
            f"{verb} {job.topic}/{job.id}: {state}, due {format_time_ms(job.due_ms)} "
            f"({format_relative_ms(job.due_ms, now_ms)})"
        )
    return Exit.OK


def _job_named(args: argparse.Namespace) -> None:
    """TOPIC and ID checked before connecting (exit 2 with Redis down too)."""
    validation.topic(args.topic)
    validation.job_id(args.id)


def run_cancel(ctx: Context, args: argparse.Namespace) -> int:
    _job_named(args)
    result = ctx.store().cancel(args.topic, args.id)
    if result == "missing":  # the error is the one document --json prints
        raise CliError(
            Exit.NOT_FOUND, "not_found", f"no job {args.topic}/{args.id}", {"result": result}
        )
    if ctx.json:
        print_json({"topic": args.topic, "id": args.id, "result": result})
    elif result == "removed":
        print(f"cancelled {args.topic}/{args.id}")
    elif result == "requested":
        print(
            f"cancel requested for {args.topic}/{args.id}: it is running now; it will not be "
            "retried, whatever its handler does"
        )
    return Exit.OK


def run_get(ctx: Context, args: argparse.Namespace) -> int:
    _job_named(args)
    store = ctx.store()
    info = store.get(args.topic, args.id)
    if info is None:
        raise CliError(Exit.NOT_FOUND, "not_found", f"no job {args.topic}/{args.id}")
    if ctx.json:
        print_json(job_json(info))
        return Exit.OK
    rows = describe_job(info, store.clock.now_ms())
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    print(f"\nhistory: {ctx.suggest('history', info.topic, info.id)}")
    return Exit.OK


# -- stats ----------------------------------------------------------------------------------


def run_stats(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.store()
    counts = store.stats(with_paused=True)
    totals = {state: sum(row.get(state, 0) for row in counts.values()) for state in STATES}
    next_due_ms = store.earliest_due_ms()
    audit_entries = store.audit_length()
    memory = store.memory()
    limits = store.all_limits()  # why a topic with a ready backlog may be slow
    # The outbox's backlog: the rows the relay has yet to move, and how late the oldest is.
    outbox = None if db_url(args) is None else outbox_status(str(db_url(args)))
    used = ctx.namespace_used(counts, audit_entries)
    # A typo in --namespace would otherwise look like an idle queue: say so. The exit stays 0
    # (docs/cli.md): a new deployment's monitoring polls stats before the first job too.
    if not used:
        ctx.note(
            f"redelay: namespace {store.namespace!r} has never been used here (no configuration, "
            "topics or history): check --namespace / REDELAY_NAMESPACE and --redis"
        )
    if ctx.json:
        print_json(
            {
                "namespace": store.namespace,
                "namespace_used": used,
                "topics": counts,
                "totals": totals,
                "next_due_ms": next_due_ms,
                "audit_entries": audit_entries,
                "redis": memory,
                "limits": {topic: limits_json(each) for topic, each in limits.items()},
            }
            | ({} if outbox is None else {"outbox": outbox})
        )
        return Exit.OK
    rows = [
        [topic, *(row.get(s, 0) for s in STATES), "paused" if row.get("paused") else ""]
        for topic, row in sorted(counts.items())
    ]
    rows.append(["(total)", *(totals[s] for s in STATES), ""])
    print(table(["topic", *STATES, ""], rows))
    now_ms = store.clock.now_ms()
    due = "-" if next_due_ms is None else format_relative_ms(next_due_ms, now_ms)
    print(f"\nnamespace {store.namespace}; next delayed job due: {due}; audit: {audit_entries}")
    if limits:
        shown = "; ".join(f"{topic}: {describe_limits(each)}" for topic, each in limits.items())
        print(f"limited (redelay limit): {shown}")
    if outbox is not None:
        print(status_line(outbox))
    if memory["full"]:
        print(
            f"Redis is full: used_memory {memory['used_memory']}, maxmemory "
            f"{memory['maxmemory']}; adds are refused, workers keep delivering"
        )
    return Exit.OK
