"""``redelay import``: adds the jobs of a JSON Lines file through Store.add_stream.

One job per line, an object with ``add``'s fields: ``topic`` and ``id`` (required), ``body``,
``delay``, ``at``, ``retry``, ``lease``, ``callback``. Durations and times are written as on the
command line (``"30m"``, ``"+10m"``, ISO 8601 with a zone) or as numbers (seconds; ``at`` in epoch
seconds), so a line reads like the ``redelay add`` that would add it. Errors name the line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from actors import _validation as validation
from actors._constants import BATCH_MAX_JOBS, BODY_MAX_DEPTH, DEFAULT_STREAM_BATCH
from actors.cli.context import Context
from actors.cli.output import (
    CliError,
    Exit,
    Progress,
    parse_duration_s,
    parse_schedule_s,
    parse_time_ms,
    print_json,
    usage_error,
)
from actors.errors import AddStreamError, JobExistsError, ValidationError
from actors.lifecycle import State

if TYPE_CHECKING:  # the parser is built without redis-py (tests/cli/test_cli_imports.py)
    from actors.storage.store import Store
    from actors.values import NewJob

FIELDS = frozenset({"topic", "id", "body", "delay", "at", "retry", "lease", "callback"})


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "import",
        parents=[common],
        help="add the jobs of a JSON Lines file (one job per line), in pipelined batches",
        description="Adds the jobs of FILE (- reads stdin): one JSON object per line with add's "
        "fields (topic, id, body, delay, at, retry, lease, callback; durations and times as "
        "on the command line, or numbers of seconds). Batches of --batch-size jobs are each all "
        "or nothing; the import stops at the first batch that fails and says which line was "
        "the first not added.",
    )
    p.add_argument("file", metavar="FILE", help="a JSON Lines file, or - for stdin")
    p.add_argument(
        "--if-exists",
        choices=("error", "keep", "replace"),
        default="error",
        help="when a job exists: error (stop, exit 4; the default), keep it, or replace it",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_STREAM_BATCH,
        help=f"jobs per batch, 1 to {BATCH_MAX_JOBS:,} (default {DEFAULT_STREAM_BATCH})",
    )
    p.set_defaults(run=run_import)


def run_import(ctx: Context, args: argparse.Namespace) -> int:
    size = validation.count(args.batch_size, "batch-size", BATCH_MAX_JOBS)
    mode = validation.if_exists(args.if_exists, False)
    source = _open(args.file)
    store = ctx.store()
    lines = array("L")  # the line of each job read, so an error can name it
    progress = Progress("import", None, enabled=ctx.progress, unit="lines")
    started = time.monotonic()
    try:
        results = store.add_stream(_batches(store, source, size, lines, progress), if_exists=mode)
    except AddStreamError as exc:
        raise _stopped(exc, lines, args.file) from None
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    progress.done()
    seconds = time.monotonic() - started
    summary = _summary(results, seconds)
    if ctx.json:
        print_json({"file": args.file, **summary})
        return Exit.OK
    existing = ", ".join(f"{n:,} {state}" for state, n in summary["existing"].items())
    what = {"keep": "kept", "replace": "replaced"}.get(mode, "")
    print(
        f"added {summary['new']:,} of {summary['jobs']:,} jobs from {args.file} in "
        f"{seconds:.1f} s ({summary['jobs_per_s']:,.0f} jobs/s)"
        + (f"; {what} the existing ones ({existing})" if existing else "")
    )
    return Exit.OK


def _open(name: str) -> IO[bytes]:
    if name == "-":
        return sys.stdin.buffer
    try:
        return Path(name).open("rb")
    except OSError as exc:
        raise usage_error(f"cannot read {name}: {exc.strerror}") from None


def _batches(
    store: Store, source: IO[bytes], size: int, lines: array[int], progress: Progress
) -> Iterator[list[NewJob]]:
    batch: list[NewJob] = []
    for number, line in enumerate(progress.wrap(source), start=1):
        if not line.strip():
            continue
        batch.append(_job(store, number, line))
        lines.append(number)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _job(store: Store, number: int, line: bytes) -> NewJob:
    """One line as a job; every error names the line (and the field)."""
    try:
        spec = orjson.loads(line)  # about 7% of a 100,000-line import's time saved over json
    except orjson.JSONDecodeError:
        spec = _json_fallback(number, line)
    if not isinstance(spec, dict):
        raise ValidationError(f"line {number}", "must be a JSON object with a topic and an id")
    unknown = set(spec) - FIELDS
    if unknown:
        raise ValidationError(f"line {number}", f"unknown fields {sorted(unknown)}")
    if "topic" not in spec or "id" not in spec:
        raise ValidationError(f"line {number}", "needs a topic and an id")
    try:
        return _built(store, spec)
    except ValidationError as exc:
        raise ValidationError(f"line {number}: {exc.field}", exc.message, exc.limit) from None
    except CliError as exc:  # a duration or time the command line's parsers refused
        raise ValidationError(f"line {number}", str(exc)) from None


def _json_fallback(number: int, line: bytes) -> Any:
    """json reads what orjson refuses but the checks after it name better (NaN and Infinity,
    integers past 64 bits), and words a syntax error as before."""
    try:
        text = line.decode("utf-8")  # read as bytes, so that a bad byte names its line
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"line {number}",
            f"is not UTF-8 text: byte {exc.start} (0x{line[exc.start]:02x}) {exc.reason}",
        ) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"line {number}", f"is not valid JSON: {exc}") from None
    except RecursionError:  # json's parser recurses per level; a body may have far fewer
        raise ValidationError(
            f"line {number}", "is nested too deeply", f"{BODY_MAX_DEPTH} levels in a body"
        ) from None


def _built(store: Store, spec: Mapping[str, Any]) -> NewJob:
    """The line's job, checked as the API's add checks it (errors in seconds)."""
    from actors import producing  # imports the store's values: only when a file is imported

    now_ms = store.clock.now_ms()
    delay, at, lease = spec.get("delay"), spec.get("at"), spec.get("lease")
    retry = spec.get("retry")
    if delay is not None and at is not None:
        raise ValidationError("delay", "give either delay or at, not both")
    at_s = None
    if at is not None:
        at_s = parse_time_ms(at, now_ms, "at") / 1000 if isinstance(at, str) else _number(at, "at")
    return producing.new_job(
        now_ms,
        spec["topic"],
        spec["id"],
        spec.get("body"),
        delay=None if delay is None else _seconds(delay, "delay"),
        at=at_s,
        retry=None if retry is None else _schedule_s(retry),
        lease=None if lease is None else _seconds(lease, "lease"),
        callback=spec.get("callback"),
    )


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"must be a number or a string, got {type(value).__name__}")
    return float(value)


def _seconds(value: Any, field: str) -> float:
    return parse_duration_s(value, field) if isinstance(value, str) else _number(value, field)


def _schedule_s(value: Any) -> list[float]:
    if isinstance(value, str):
        return parse_schedule_s(value)
    if not isinstance(value, list):
        raise ValidationError("retry", "must be a list of delays or a string like 15s,3m,10m")
    return [_seconds(step, f"retry[{n}]") for n, step in enumerate(value)]


def _summary(results: list[str], seconds: float) -> dict[str, Any]:
    existing: dict[str, int] = {}
    for result in results:
        if result != State.NEW:
            existing[result] = existing.get(result, 0) + 1
    return {
        "jobs": len(results),
        "new": len(results) - sum(existing.values()),
        "existing": existing,
        "seconds": round(seconds, 3),
        "jobs_per_s": round(len(results) / seconds, 1) if seconds > 0 else None,
    }


def _stopped(exc: AddStreamError, lines: array[int], file: str) -> CliError:
    """The CliError of an import that stopped part-way: what was added, and where to go on."""
    import redis

    cause = exc.cause
    code, kind = Exit.REDIS_REFUSED, "redis_refused"  # a full Redis, or another refusal
    if isinstance(cause, ValidationError):
        code, kind = Exit.USAGE, "invalid"
    elif isinstance(cause, JobExistsError):
        code, kind = Exit.EXISTS, "exists"
    elif isinstance(cause, redis.ConnectionError | redis.TimeoutError):
        code, kind = Exit.NO_REDIS, "no_redis"
    # The first job not added: one of those sent, or else the first one read and not sent.
    first = next((n for n, result in enumerate(exc.results) if result is None), len(exc.results))
    line = lines[first] if first < len(lines) else None
    message = f"{file}: nothing was added: {exc.reason}"
    if exc.added:
        message = (
            f"{file}: stopped: {exc.reason}; {exc.added:,} jobs were added, the first one not "
            f"added is on line {line}: run again with --if-exists keep to add the rest"
        )
    details = {"added": exc.added, "read": len(lines), "first_not_added_line": line}
    return CliError(code, kind, message, details)
