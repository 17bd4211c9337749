"""Formatting for the pages: times absolute and relative, bodies pretty-printed, dead jobs
grouped by reason, audit entries as timeline rows, schedules as table rows. Pure, so the pages'
wording is tested without a browser."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from actors.cli.output import dead_reason, format_duration_ms, format_relative_ms
from actors.schedules import ScheduleInfo
from actors.values import AuditEntry, JobInfo

NO_TRACEBACK = "no traceback (lease expired, Retry, or an async timeout)"


def utc(ms: int | None) -> str:
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{moment.microsecond // 1000:03d} UTC"


def relative(ms: int | None, now_ms: int) -> str:
    return "-" if ms is None else format_relative_ms(ms, now_ms)


def pretty_body(body: bytes) -> str:
    """The body as indented JSON; the stored text when it does not parse."""
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False, sort_keys=True)
    except (ValueError, UnicodeDecodeError):
        return body.decode("utf-8", "replace")


def reason(info: JobInfo) -> str:
    """What a dead job is grouped under: its quarantine (how often its worker was lost), else
    the exception line of its last traceback."""
    if info.quarantined or info.traceback:
        return dead_reason(info)
    return NO_TRACEBACK


@dataclass(slots=True)
class DeadGroup:
    reason: str
    jobs: list[JobInfo] = field(default_factory=list)


def group_dead(infos: Iterable[JobInfo]) -> list[DeadGroup]:
    """Dead jobs by reason, the largest group first (ties by reason)."""
    groups: dict[str, DeadGroup] = {}
    for info in infos:
        groups.setdefault(reason(info), DeadGroup(reason(info))).jobs.append(info)
    return sorted(groups.values(), key=lambda g: (-len(g.jobs), g.reason))


@dataclass(frozen=True, slots=True)
class TimelineRow:
    at_ms: int
    event: str
    attempt: str
    details: str
    traceback: str | None


_DETAIL_FIELDS = ("to", "due", "was", "from", "by", "dl", "why", "via", "detail", "op", "code")


def timeline(entries: Iterable[AuditEntry]) -> list[TimelineRow]:
    rows = []
    for _, fields in entries:
        parts = []
        for name in _DETAIL_FIELDS:
            if name not in fields:
                continue
            value = fields[name]
            if name in ("due", "dl") and value.lstrip("-").isdigit():
                value = utc(int(value))
            parts.append(f"{name}={value}")
        rows.append(
            TimelineRow(
                at_ms=int(fields.get("ms", 0)),
                event=fields.get("e", "?"),
                attempt=fields.get("a", ""),
                details="  ".join(parts),
                traceback=fields.get("tb"),
            )
        )
    return rows


def lease_holder(entries: Iterable[AuditEntry]) -> str | None:
    """The consumer named by the job's latest ``leased`` event (who holds or last held it)."""
    holder = None
    for _, fields in entries:
        if fields.get("e") == "leased":
            holder = fields.get("by") or "(unnamed consumer)"
    return holder


def return_page(value: object) -> str:
    """Where a topic action goes back to: "overview" or "topic" (a fixed choice, never a URL
    taken from the form, so a form cannot redirect elsewhere)."""
    return "overview" if value == "overview" else "topic"


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    name: str
    topic: str
    when: str  # the cron expression, or "every 5m"
    tz: str
    misfire: str
    next_ms: int | None
    body: str


def schedule_row(info: ScheduleInfo) -> ScheduleRow:
    spec = info.spec
    return ScheduleRow(
        name=spec.name,
        topic=spec.topic,
        when=spec.cron or f"every {format_duration_ms(spec.every_ms or 0)}",
        tz=spec.tz,
        misfire=spec.misfire,
        next_ms=info.next_ms,
        body=pretty_body(spec.body),
    )
