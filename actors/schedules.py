"""Recurring schedules, the pure part: checking a schedule and computing its occurrence times.

Pure: no Redis, no threads. Lua cannot evaluate a cron expression, so Python computes the next
:data:`OCCURRENCES_AHEAD` occurrence times and stores them with the schedule; the scripts that
move an occurrence on (``lua/carry-6.lua``) take the next time from that list and make the next
occurrence in the same call, and ``lua/refill-6.lua`` tops the list up (see docs/schedules.md).

An occurrence is an ordinary job whose id is derived from the schedule's name and the
occurrence's time (:func:`occurrence_id`), so two processes can never make the same occurrence
twice: the second would find the id taken.

Cron expressions are evaluated by cronsim in the schedule's time zone (``zoneinfo``): a wall-clock
time that does not exist that day (the hour skipped when daylight saving time starts) runs once at
the next valid instant, and a time in the hour that repeats when it ends runs once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from actors import _constants
from actors import _validation as validation
from actors.errors import ValidationError

Misfire = Literal["run_once", "skip"]
MISFIRES: Final[tuple[str, ...]] = get_args(Misfire)

# An occurrence carried later than this after its time was missed (workers were down): with
# misfire="skip" it is dropped; with "run_once" it runs, once, and the slots missed since are
# skipped. A minute covers a carrier that waited for the watchdog's forced carry.
MISFIRE_GRACE_MS: Final = _constants.MISFIRE_GRACE_MS
# Occurrence times stored ahead with each schedule, and the length below which the carrier that
# moved an occurrence on computes more (so a crash between the two costs nothing: the next carry
# of an occurrence asks again long before the list runs dry).
OCCURRENCES_AHEAD: Final = _constants.OCCURRENCES_AHEAD
REFILL_BELOW: Final = _constants.REFILL_BELOW
EVERY_MS_MIN: Final = 1_000
NAME_MAX_CHARS: Final = 100
# An occurrence's id: "<prefix><name>:<occurrence ms>". Ids that start with the prefix are
# reserved for schedules, and the shard of such an id depends on the name only (storage/keys.py),
# so every occurrence of a schedule lives with the schedule.
OCCURRENCE_ID_PREFIX: Final = _constants.OCCURRENCE_ID_PREFIX

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]*")
_NAME_CHARS = "letters, digits and . _ : - (no '|', braces or whitespace)"


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What the user asked for: exactly one of ``cron`` and ``every_ms``; times are epoch ms."""

    name: str
    topic: str
    cron: str | None
    every_ms: int | None
    tz: str
    body: bytes
    start_at_ms: int | None
    misfire: Misfire


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A stored schedule, as ``queue.schedules()`` lists it."""

    spec: ScheduleSpec
    next_ms: int | None  # the pending occurrence's time; None while none is pending
    pending_id: str | None  # the pending occurrence's job id
    upcoming_ms: tuple[int, ...]  # the stored times after it


def name(value: object, field: str = "name") -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError(field, "must be a non-empty string", f"1 to {NAME_MAX_CHARS} chars")
    if len(value) > NAME_MAX_CHARS:
        raise ValidationError(field, f"is {len(value)} characters long", f"{NAME_MAX_CHARS}")
    if not _NAME_RE.fullmatch(value):
        raise ValidationError(
            field, f"{value!r} has characters outside the allowed set", _NAME_CHARS
        )
    return value


def zone(value: object, field: str = "tz") -> ZoneInfo:
    if not isinstance(value, str) or not value:
        raise ValidationError(field, "must be a time zone name", "an IANA name such as 'UTC'")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            field, f"{value!r} is not a known time zone", "an IANA name such as 'Europe/Paris'"
        ) from None


def check_cron(value: object, field: str = "cron") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must be a cron expression", "five fields, e.g. '0 3 * * *'")
    # cronsim is imported where a cron is read: the store imports this module, and commands
    # that never touch a schedule (redelay history, get, ...) should not pay for it.
    from cronsim import CronSim, CronSimError

    try:
        CronSim(value, datetime.now(UTC))
    except CronSimError as exc:
        raise ValidationError(
            field, f"{value!r} is not a cron expression: {exc}", "five fields, e.g. '0 3 * * *'"
        ) from None
    return value


def every_ms(value: float | timedelta, field: str = "every") -> int:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
    ):
        raise ValidationError(field, "must be seconds or a timedelta", "a number of seconds")
    ms = round(seconds * 1000)
    if ms < EVERY_MS_MIN or ms > _constants.DELAY_MAX_MS:
        raise ValidationError(
            field,
            f"is {seconds:g}s",
            f"{EVERY_MS_MIN // 1000}s to {_constants.DELAY_MAX_MS // 1000}s",
        )
    return ms


def misfire(value: object, field: str = "misfire") -> Misfire:
    if value not in MISFIRES:
        raise ValidationError(field, f"is {value!r}", " or ".join(repr(m) for m in MISFIRES))
    return value  # type: ignore[return-value]  # checked against the Literal's values


def check_kind(cron: object, every: object) -> None:
    if (cron is None) == (every is None):
        raise ValidationError("cron", "give exactly one of cron and every", "cron or every")


def occurrence_id(schedule_name: str, at_ms: int) -> str:
    return f"{OCCURRENCE_ID_PREFIX}{schedule_name}:{at_ms}"


def schedule_of(job_id: str) -> str | None:
    """The schedule name an occurrence id was derived from; None for any other id."""
    if not job_id.startswith(OCCURRENCE_ID_PREFIX):
        return None
    rest = job_id[len(OCCURRENCE_ID_PREFIX) :]
    head, sep, _ = rest.rpartition(":")
    return head if sep and head else None


def occurrences(spec: ScheduleSpec, after_ms: int, n: int, anchor_ms: int) -> list[int]:
    """The first ``n`` occurrence times strictly after ``after_ms``, ascending.

    ``anchor_ms`` is the first occurrence of an ``every`` schedule (its grid); cron schedules
    ignore it. Times before ``start_at_ms`` never occur.
    """
    floor_ms = after_ms
    if spec.start_at_ms is not None:
        floor_ms = max(floor_ms, spec.start_at_ms - 1)
    if spec.every_ms is not None:
        step = spec.every_ms
        k = max(0, (floor_ms - anchor_ms) // step + 1)
        return [anchor_ms + (k + j) * step for j in range(n)]
    assert spec.cron is not None
    from cronsim import CronSim  # as in check_cron: only when a cron is evaluated

    start = datetime.fromtimestamp(floor_ms / 1000, ZoneInfo(spec.tz))
    found: list[int] = []
    for when in CronSim(spec.cron, start):
        at_ms = round(when.timestamp() * 1000)
        if at_ms > floor_ms and (not found or at_ms > found[-1]):
            found.append(at_ms)
        if len(found) >= n:
            break
    return found


def first_anchor_ms(spec: ScheduleSpec, now_ms: int) -> int:
    """Where an ``every`` schedule's grid starts: ``start_at`` when given, else one step on."""
    if spec.start_at_ms is not None:
        return spec.start_at_ms
    return now_ms + (spec.every_ms or 0)


def spec(
    schedule_name: str,
    topic: str,
    *,
    cron: str | None,
    every: float | timedelta | None,
    tz: str,
    body: object,
    start_at_ms: int | None,
    misfire_policy: object,
) -> ScheduleSpec:
    """Checks a schedule as ``queue.schedule`` takes it; errors name the field."""
    check_kind(cron, every)
    zone(tz)
    return ScheduleSpec(
        name=name(schedule_name),
        topic=validation.topic(topic),
        cron=None if cron is None else check_cron(cron),
        every_ms=None if every is None else every_ms(every),
        tz=tz,
        body=validation.body(body),
        start_at_ms=start_at_ms,
        misfire=misfire(misfire_policy),
    )
