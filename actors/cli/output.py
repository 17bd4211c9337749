"""What the command line prints and parses: tables, times, durations, JSON, progress, errors."""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from actors.lifecycle import LIVE_STATES_IN_ORDER

if TYPE_CHECKING:  # only annotations: every subcommand imports this module, keep it light
    from actors.replay import Drift, ReplayedJob
    from actors.schedules import ScheduleInfo
    from actors.values import JobInfo

T = TypeVar("T")

STATES = tuple(state.value for state in LIVE_STATES_IN_ORDER)  # in the order tables show them


class Exit(IntEnum):
    """The exit codes of every redelay subcommand (docs/cli.md lists them)."""

    OK = 0
    NOT_FOUND = 1  # also: verify found drift
    USAGE = 2  # bad arguments or input (argparse uses 2 too)
    NO_REDIS = 3  # cannot reach Redis, or no redis-server for the embedded default
    EXISTS = 4  # add without --replace of a job that exists
    BUSY = 5  # verify: the state kept changing while it was read
    WORKER_FAILED = 6  # worker: a handler pool died or did not stop within --grace
    REDIS_REFUSED = 7  # Redis answered with an error (out of memory, read-only replica, ...)
    INTERRUPTED = 130  # Ctrl-C during long work (128 + SIGINT)


class CliError(Exception):
    """Ends the command with ``code``; ``kind`` is the machine-readable name shown with --json,
    ``details`` are extra fields of that JSON error document (e.g. ``{"requeued": 0}``)."""

    def __init__(
        self, code: Exit, kind: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.details = details or {}


def usage_error(message: str) -> CliError:
    return CliError(Exit.USAGE, "usage", message)


# -- durations and times --------------------------------------------------------------------

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration_s(text: str, name: str = "duration") -> float:
    """``"30"`` (seconds), ``"1.5s"``, ``"500ms"``, ``"5m"``, ``"1h30m"``, ``"2d"`` -> seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise usage_error(f"{name}: {text!r} is not a finite number of seconds")
        return seconds
    pos, total_ms = 0, 0.0
    for match in _DURATION_RE.finditer(value):
        if match.start() != pos:
            break
        total_ms += float(match.group(1)) * _UNIT_MS[match.group(2)]
        pos = match.end()
    if pos != len(value) or not value:
        raise usage_error(f"{name}: {text!r} is not a duration (examples: 30, 500ms, 5m, 1h30m)")
    return total_ms / 1000


def parse_schedule_s(text: str) -> list[float]:
    """``"15s,3m,10m"`` -> [15.0, 180.0, 600.0]. An empty step (``15s,,3m``) is refused rather
    than dropped: the schedule would silently be one attempt shorter than the one typed."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise usage_error("retry: give a comma-separated list of delays, e.g. 15s,3m,10m")
    steps = [parse_duration_s(p, "retry") if p else None for p in parts]
    for n, step in enumerate(steps, start=1):
        if step is None:
            raise usage_error(f"retry: step {n} of {text!r} is empty (e.g. 15s,3m,10m)")
    return [step for step in steps if step is not None]


# Epoch seconds pass 1e11 in the year 5138; a larger number is almost surely milliseconds.
EPOCH_SECONDS_MAX = 1e11
TIME_EXAMPLES = "examples: now, -5m, +1h, 1714557600, 2024-05-01T12:00:00+02:00"


def parse_time_ms(text: str, now_ms: int, name: str = "time") -> int:
    """An instant: ``now``, ``-5m`` / ``+10s`` (relative), epoch seconds (as the API's ``at``),
    or ISO 8601 with a zone (``2024-05-01T12:00:00+02:00``, ``...Z``). Numbers that look like
    milliseconds and times without a zone are refused: both are ambiguous, as in the API."""
    value = text.strip()
    if value == "now":
        return now_ms
    if value[:1] in "+-" and value[1:2].isdigit() and not value[1:].replace(".", "").isdigit():
        sign = -1 if value[0] == "-" else 1
        return now_ms + sign * round(parse_duration_s(value[1:], name) * 1000)
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):
            raise usage_error(f"{name}: {text!r} is not a time ({TIME_EXAMPLES})")
        if EPOCH_SECONDS_MAX < abs(number) <= EPOCH_SECONDS_MAX * 1000:
            raise usage_error(
                f"{name}: {text} looks like milliseconds; --{name} takes epoch seconds "
                f"({number / 1000:.3f})".replace(".000)", ")")
            )
        if abs(number) > EPOCH_SECONDS_MAX:
            raise usage_error(f"{name}: {text} is not a time in epoch seconds ({TIME_EXAMPLES})")
        return round(number * 1000)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise usage_error(f"{name}: {text!r} is not a time ({TIME_EXAMPLES})") from None
    if moment.tzinfo is None:
        raise usage_error(
            f"{name}: {text!r} needs a time zone, e.g. {value}Z (UTC) or {value}+02:00"
        )
    return round(moment.timestamp() * 1000)


def format_duration_ms(ms: float) -> str:
    """A short human duration: 850ms, 12.5s, 3m05s, 2h10m, 3d4h."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms:.0f}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = int(ms // 1000)
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86_400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86_400}d{seconds % 86_400 // 3600}h"


def format_time_ms(ms: int) -> str:
    """Local time with milliseconds, e.g. ``2024-05-01 12:00:00.123``."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def format_relative_ms(ms: int, now_ms: int) -> str:
    delta = ms - now_ms
    if abs(delta) < 1:
        return "now"
    return f"in {format_duration_ms(delta)}" if delta > 0 else f"{format_duration_ms(delta)} ago"


def iso_ms(ms: int) -> str:
    """UTC ISO 8601 with milliseconds, for JSON."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


# -- output ---------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain aligned text table; numbers align right."""
    text_rows = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for n, cell in enumerate(row):
            widths[n] = max(widths[n], len(cell))
    numeric = [
        bool(text_rows) and all(_is_number(row[n]) for row in text_rows)
        for n in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[n]) if numeric[n] else cell.ljust(widths[n])
            for n, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(row) for row in text_rows]
    return "\n".join(out)


def _is_number(text: str) -> bool:
    return text.lstrip("-").replace(".", "", 1).isdigit()


def print_json(value: Any, stream: TextIO | None = None) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False), file=stream or sys.stdout)


def print_json_line(value: Any) -> None:
    """One event of a stream (``worker --json``): one compact document per line, flushed."""
    print(json.dumps(value, ensure_ascii=False), flush=True)


def command_line(words: Sequence[str]) -> str:
    """``words`` as a shell command that runs as printed (each word quoted where needed)."""
    return " ".join(shlex.quote(word) for word in words)


def decode_body(body: bytes) -> Any:
    """A stored body is UTF-8 JSON; anything else (it should not happen) is shown as text."""
    try:
        return json.loads(body)
    except ValueError:
        return body.decode(errors="replace")


def job_json(info: JobInfo) -> dict[str, Any]:
    return {
        "topic": info.topic,
        "id": info.id,
        "state": info.state,
        "due_ms": info.due_ms,
        "due": iso_ms(info.due_ms),
        "attempt": info.attempt,
        "attempts_failed": info.attempts_failed,
        "created_ms": info.created_ms,
        "body": decode_body(info.body_bytes),
        "callback": info.callback,
        "retry_ms": None if info.retry_ms is None else list(info.retry_ms),
        "lease_token": info.token,
        "lease_deadline_ms": info.lease_deadline_ms,
        "dead_since_ms": info.dead_since_ms,
        "cancel_requested": info.cancel_requested,
        "traceback": info.traceback,
        "lost": info.lost,
        "suspect": info.suspect,
        "quarantined": info.quarantined,
    }


def last_error(traceback: str | None) -> str:
    """The line of a traceback that names the exception (its last), for one-line views."""
    lines = [line for line in (traceback or "").splitlines() if line.strip()]
    return lines[-1] if lines else "-"


def dead_reason(info: JobInfo) -> str:
    """Why a dead job died, in one line: its quarantine, else its last traceback's error line."""
    if info.quarantined:
        times = "once" if info.lost == 1 else f"{info.lost} times"
        return f"quarantined: its worker was lost {times} while it ran alone"
    return last_error(info.traceback)


def indented_traceback(traceback: str) -> str:
    """A stored traceback under the line that introduces it."""
    return "\n".join("    " + line for line in traceback.rstrip().splitlines())


class Progress:
    """Counts items of long work and reports to stderr at most every ``every_s`` seconds.

    On a terminal the line is rewritten in place; elsewhere (logs, tests) one line per report.
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        enabled: bool,
        every_s: float = 0.5,
        stream: TextIO | None = None,
        unit: str = "entries",
    ) -> None:
        self.label = label
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self.count = 0
        self._started = time.monotonic()
        self._last = self._started
        self._tty = self.stream.isatty()
        self._shown = False

    def wrap(self, items: Iterable[T]) -> Iterator[T]:
        for item in items:
            self.count += 1
            if self.enabled and self.count % 256 == 0:
                now = time.monotonic()
                if now - self._last >= self.every_s:
                    self._last = now
                    self._show()
            yield item

    def _show(self, final: bool = False) -> None:
        elapsed = time.monotonic() - self._started
        of = f"/{self.total}" if self.total else ""
        pct = f" ({100 * self.count / self.total:.0f}%)" if self.total else ""
        text = f"{self.label}: {self.count}{of} {self.unit}{pct}, {elapsed:.1f}s"
        if self._tty:
            print("\r" + text, end="\n" if final else "", file=self.stream, flush=True)
        else:
            print(text, file=self.stream, flush=True)
        self._shown = True

    def done(self) -> None:
        """Prints the final count (call once the work is over)."""
        if self.enabled and (self._shown or not self._tty):
            self._show(final=True)
            self.enabled = False


# -- what the commands show of jobs, events and replays -------------------------------------


def describe_job(info: JobInfo, now_ms: int) -> list[tuple[str, str]]:
    """What ``get`` shows of a job, as (name, value) rows."""
    rows = [
        ("job", f"{info.topic}/{info.id}"),
        ("state", info.state + (" (cancel requested)" if info.cancel_requested else "")),
        ("due", f"{format_time_ms(info.due_ms)} ({format_relative_ms(info.due_ms, now_ms)})"),
        ("attempt", f"{info.attempt} ({info.attempts_failed} failed so far)"),
        ("created", format_time_ms(info.created_ms) if info.created_ms else "-"),
        ("body", json.dumps(decode_body(info.body_bytes), ensure_ascii=False)),
    ]
    if info.callback:
        rows.append(("callback", info.callback))
    if info.retry_ms is not None:
        rows.append(("retry", ",".join(format_duration_ms(ms) for ms in info.retry_ms)))
    if info.lease_deadline_ms is not None:
        deadline = info.lease_deadline_ms
        rows.append(("lease until", f"{format_time_ms(deadline)} (token {info.token})"))
    if info.dead_since_ms is not None:
        since = info.dead_since_ms
        rows.append(
            ("dead since", f"{format_time_ms(since)} ({format_relative_ms(since, now_ms)})")
        )
    if info.traceback:
        rows.append(
            ("traceback", "of the last failed attempt\n" + indented_traceback(info.traceback))
        )
    return rows


def event_details(fields: dict[str, str]) -> str:
    """The part of an event people read: where it went, why, until when."""
    ms = int(fields["ms"])
    parts: list[str] = []
    if "to" in fields:
        parts.append(f"-> {fields['to']}")
    if "due" in fields and fields["e"] != "ready":
        parts.append(f"due {format_relative_ms(int(fields['due']), ms)}")
    if "dl" in fields:
        parts.append(f"lease for {format_duration_ms(int(fields['dl']) - ms)}")
    if fields.get("by"):
        parts.append(f"by {fields['by']}")
    for name in ("from", "via", "op", "code"):
        if name in fields:
            parts.append(f"{name} {fields[name]}")
    if "detail" in fields:
        parts.append(fields["detail"])
    if "why" in fields:
        parts.append(f"why: {fields['why']}")
    if fields.get("cancelled"):
        parts.append("(cancel had been requested)")
    return ", ".join(parts)


AUDIT_BASE_FIELDS = ("e", "t", "i", "a", "ms")  # every event has them; the rest are its own


def event_json(entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    return {
        "id": entry_id,
        "event": fields["e"],
        "attempt": int(fields["a"]),
        "at_ms": int(fields["ms"]),
        "at": iso_ms(int(fields["ms"])),
        "fields": {k: v for k, v in fields.items() if k not in AUDIT_BASE_FIELDS},
    }


def replayed_json(job: ReplayedJob) -> dict[str, Any]:
    return {
        "topic": job.topic,
        "id": job.id,
        "state": job.state.value,
        "due_ms": job.due_ms,
        "attempts_failed": job.attempts_failed,
        "lease_token": job.token,
        "lease_deadline_ms": job.deadline_ms,
        "cancel_requested": job.cancel_requested,
        "partial": job.partial,
    }


def drift_json(drift: Drift) -> dict[str, Any]:
    return {
        "topic": drift.topic,
        "id": drift.id,
        "field": drift.field,
        "replayed": drift.replayed,
        "live": drift.live,
    }


def schedule_json(info: ScheduleInfo) -> dict[str, Any]:
    spec = info.spec
    return {
        "name": spec.name,
        "topic": spec.topic,
        "cron": spec.cron,
        "every_ms": spec.every_ms,
        "tz": spec.tz,
        "start_at_ms": spec.start_at_ms,
        "misfire": spec.misfire,
        "body": decode_body(spec.body),
        "next_ms": info.next_ms,
        "next": None if info.next_ms is None else iso_ms(info.next_ms),
        "pending_id": info.pending_id,
        "upcoming_ms": list(info.upcoming_ms),
    }
