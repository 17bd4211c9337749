"""Subcommands on the audit stream: history (one job), replay (every job at a moment), verify."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from actors.cli.context import Context
from actors.cli.output import (
    STATES,
    CliError,
    Exit,
    Progress,
    drift_json,
    event_details,
    event_json,
    format_time_ms,
    indented_traceback,
    iso_ms,
    parse_time_ms,
    print_json,
    replayed_json,
    table,
    usage_error,
)
from actors.lifecycle import State
from actors.replay import Drift, Replay, compare, fold
from actors.storage.keys import shard_of
from actors.values import AuditEntry, Snapshot

if TYPE_CHECKING:  # the store (and redis-py) comes with ctx.store(), not with the parser
    from actors.storage.store import Store

CHUNK = 5_000


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "history",
        parents=[common],
        help="one job's timeline from the audit stream",
        description=(
            "Every event of one job, oldest first, read through the audit stream's per-job "
            "index (one round trip, whatever the stream's length). --scan reads the whole "
            "stream instead, e.g. for events written before the index existed."
        ),
    )
    p.add_argument("topic")
    p.add_argument("id")
    p.add_argument(
        "--scan",
        action="store_true",
        help="scan the job's shard's stream instead of using the index (O(stream length))",
    )
    p.add_argument(
        "--since",
        help="with --scan (implied): read the stream from this time on: epoch seconds, "
        "ISO 8601 with a zone, or -1h",
    )
    p.set_defaults(run=run_history)

    p = sub.add_parser(
        "replay",
        parents=[common],
        help="every job's state at a moment, rebuilt from the audit stream",
        description="Folds the audit stream up to --at and shows every job that was live then.",
    )
    p.add_argument(
        "--at",
        default="now",
        help="epoch seconds, ISO 8601 with a zone, -5m, or now (default)",
    )
    p.add_argument("--topic", help="only jobs of this topic")
    p.add_argument("--state", choices=STATES, help="only jobs in this state")
    p.add_argument("--limit", type=int, default=50, help="most jobs listed (default 50; JSON: all)")
    p.set_defaults(run=run_replay)

    p = sub.add_parser(
        "verify",
        parents=[common],
        help="replay the stream and compare it with the live state (exit 1 on drift)",
        description=(
            "Replays the whole audit stream and compares the result with every live job. "
            "Exit 0 when they agree, 1 on drift or illegal events."
        ),
    )
    p.set_defaults(run=run_verify)


def stream_entries(
    store: Store, shard: int, start: str = "-", end: str = "+"
) -> Iterator[AuditEntry]:
    """One shard's audit entries between two stream ids (inclusive), oldest first, in chunks."""
    return store.iter_shard_audit(shard, end, CHUNK, start=start)


def _progress(ctx: Context, store: Store, label: str, shard: int | None = None) -> Progress:
    return Progress(label, store.audit_length(shard), enabled=ctx.progress)


# -- history --------------------------------------------------------------------------------


def run_history(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.store()
    if args.scan or args.since is not None:
        events = _scanned_history(ctx, store, args)
    else:
        events = store.job_entries(args.topic, args.id)
    if not events:
        raise CliError(
            Exit.NOT_FOUND,
            "not_found",
            f"no events for {args.topic}/{args.id} in the audit stream "
            "(wrong topic/id or namespace, trimmed by retention, or written before the "
            "per-job index existed: try --scan)",
        )
    if ctx.json:
        print_json([event_json(entry_id, fields) for entry_id, fields in events])
        return Exit.OK
    first_ms = int(events[0][1]["ms"])
    rows = []
    for _, fields in events:
        ms = int(fields["ms"])
        since = f"+{(ms - first_ms) / 1000:.3f}s"
        rows.append([format_time_ms(ms), since, fields["e"], fields["a"], event_details(fields)])
    print(f"{args.topic}/{args.id}: {len(events)} events")
    print(table(["time", "since first", "event", "attempt", "details"], rows))
    for _, fields in events:
        if fields.get("tb"):
            print(f"\ntraceback of attempt {fields['a']} ({fields['e']}):")
            print(indented_traceback(fields["tb"]))
    info = store.get(args.topic, args.id)
    print(f"\nnow: {info.state if info is not None else 'gone (' + events[-1][1]['e'] + ')'}")
    return Exit.OK


def _scanned_history(ctx: Context, store: Store, args: argparse.Namespace) -> list[AuditEntry]:
    """The job's events from a scan of its shard's stream (a job's events are in its shard)."""
    shard = shard_of(args.topic, args.id, store.shard_count)
    start = "-"
    if args.since is not None:
        start = f"{parse_time_ms(args.since, store.clock.now_ms(), 'since')}-0"
    progress = _progress(ctx, store, "reading audit stream", shard)
    events = [
        (entry_id, fields)
        for entry_id, fields in progress.wrap(stream_entries(store, shard, start))
        if fields.get("i") == args.id and fields.get("t") == args.topic
    ]
    progress.done()
    return events


# -- replay ---------------------------------------------------------------------------------


def run_replay(ctx: Context, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise usage_error("replay: --limit must be at least 1")
    store = ctx.store()
    at_ms = parse_time_ms(args.at, store.clock.now_ms(), "at")
    progress = _progress(ctx, store, "replaying audit stream")
    # The store merges the shards' streams in time order, so one fold stops at --at for all.
    replay = fold(progress.wrap(store.iter_audit(CHUNK)), until_ms=at_ms)
    progress.done()
    jobs = [
        job
        for job in sorted(replay.jobs.values(), key=lambda j: (j.topic, j.id))
        if (args.topic is None or job.topic == args.topic)
        and (args.state is None or job.state.value == args.state)
    ]
    counts: dict[str, Counter[str]] = {}
    for job in jobs:
        counts.setdefault(job.topic, Counter())[job.state.value] += 1
    if args.topic is None:
        ended = replay.ended_counts
    else:
        ended = replay.ended_by_topic.get(args.topic, Counter())
    if ctx.json:
        print_json(
            {
                "at_ms": at_ms,
                "at": iso_ms(at_ms),
                "events": replay.events,
                "counts": {t: {s: n[s] for s in STATES} for t, n in sorted(counts.items())},
                "ended": {"acked": ended[State.ACKED], "cancelled": ended[State.CANCELLED]},
                "jobs": [replayed_json(job) for job in jobs],
                "anomalies": replay.anomalies,
                "anomaly_count": replay.anomaly_count,
            }
        )
        return Exit.OK
    print(f"state at {format_time_ms(at_ms)}, from {replay.events} events")
    rows = [[t, *(n[s] for s in STATES)] for t, n in sorted(counts.items())]
    print(table(["topic", *STATES], rows) if rows else "no live jobs")
    print(f"ended by then: {ended[State.ACKED]} acked, {ended[State.CANCELLED]} cancelled")
    if jobs:
        print()
        shown = [
            [
                job.topic,
                job.id,
                job.state.value + (" (partial)" if job.partial else ""),
                format_time_ms(job.due_ms) if job.due_ms else "-",
                job.attempts_failed,
            ]
            for job in jobs[: args.limit]
        ]
        print(table(["topic", "id", "state", "due", "failed"], shown))
        if len(jobs) > args.limit:
            print(f"... and {len(jobs) - args.limit} more (--limit, --topic, --state, --json)")
    _print_anomalies(ctx, replay)
    return Exit.OK


def _print_anomalies(ctx: Context, replay: Replay) -> None:
    if replay.anomaly_count:
        ctx.note(f"{replay.anomaly_count} events were not legal from the replayed state:")
        for text in replay.anomalies[:20]:
            ctx.note(f"  {text}")


# -- verify ---------------------------------------------------------------------------------


def _consistent_read(store: Store, shard: int) -> tuple[str | None, Snapshot]:
    """The shard's live state and the id of the last event that produced it (one MULTI: every
    transition writes its event in the same script as its change)."""
    try:
        live, last_entry = store.snapshot_with_audit_position(shard)
    except RuntimeError as exc:  # new topics kept appearing during each of the store's reads
        raise CliError(
            Exit.BUSY, "busy", f"{exc}; retry when it is quieter (or stop the workers)"
        ) from None
    return last_entry, live


def run_verify(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.store()
    progress = _progress(ctx, store, "replaying audit stream")
    # Only the shards' live jobs and what they add up to are kept, so memory follows the live
    # jobs; each shard's fold (with its bounded memory of ended jobs) goes once compared.
    replay = Replay()
    live_jobs = 0
    drift: list[Drift] = []
    last_entries: list[str | None] = []
    for shard in range(store.shard_count):
        before, shard_live = _consistent_read(store, shard)
        entries: Iterable[AuditEntry] = (
            [] if before is None else stream_entries(store, shard, "-", before)
        )
        shard_replay = fold(progress.wrap(entries))
        drift += compare(shard_replay, shard_live)
        replay.add_up(shard_replay)
        live_jobs += len(shard_live.jobs)
        last_entries.append(before)
    progress.done()
    ok = not drift and not replay.anomaly_count
    if ctx.json:
        print_json(
            {
                "ok": ok,
                "events": replay.events,
                "last_entries": last_entries,
                "live_jobs": live_jobs,
                "replayed_jobs": len(replay.jobs),
                "drift": [drift_json(d) for d in drift],
                "anomalies": replay.anomalies,
                "anomaly_count": replay.anomaly_count,
            }
        )
    else:
        print(f"replayed {replay.events} events: {len(replay.jobs)} jobs; live: {live_jobs} jobs")
        for d in drift[:50]:
            print(f"drift: {d}")
        if len(drift) > 50:
            print(f"... and {len(drift) - 50} more (--json lists all)")
        _print_anomalies(ctx, replay)
        print("ok: the stream and the live state agree" if ok else "DRIFT")
    return Exit.OK if ok else Exit.NOT_FOUND
