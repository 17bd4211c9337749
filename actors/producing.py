"""What a producer sends, checked and built without I/O: shared by DelayQueue and AsyncDelayQueue.

The public API takes seconds (or ``timedelta``) and epoch seconds (or aware ``datetime``); the
store takes milliseconds. Both facades turn their arguments into :class:`NewJob` values here, with
the clock read once by the caller and passed in, so the sync and the async producer give the same
errors for the same input, naming the same field, in the caller's unit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from actors import _validation as validation
from actors._constants import OCCURRENCE_ID_PREFIX
from actors.errors import ValidationError
from actors.replay import history
from actors.values import AuditEntry, NewJob

# The names add_many's mappings take: add()'s arguments.
JOB_FIELDS = frozenset({"topic", "id", "body", "delay", "at", "retry", "lease", "callback"})

_AT_LIMIT = "epoch seconds or a timezone-aware datetime"


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One entry of the audit stream, as history() returns it."""

    id: str
    event: str
    topic: str
    job_id: str
    attempt: int
    at_ms: int
    fields: dict[str, str]


def seconds(value: float | timedelta, field: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(
            field,
            f"must be seconds or a timedelta, got {type(value).__name__}",
            "a number of seconds or a timedelta",
        )
    return float(value)


def epoch_s(value: datetime | float, field: str) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError(
                field, "must be timezone-aware (naive datetimes are ambiguous)", _AT_LIMIT
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(
            field, f"must be epoch seconds or a datetime, got {type(value).__name__}", _AT_LIMIT
        )
    return float(value)


# These validate in seconds, so an error speaks the caller's unit.
def delay_ms(value: float | timedelta, field: str) -> int:
    return validation.delay_ms(seconds(value, field) * 1000, field, unit="s")


def lease_ms(value: float | timedelta, field: str) -> int:
    return validation.lease_ms(seconds(value, field) * 1000, field, unit="s")


def schedule_ms(retry: Sequence[float | timedelta] | None, field: str) -> tuple[int, ...] | None:
    if retry is None:
        return None
    if isinstance(retry, str | bytes) or not isinstance(retry, Sequence):
        raise ValidationError(field, f"must be a list of delays, got {type(retry).__name__}")
    steps = [seconds(step, f"{field}[{n}]") for n, step in enumerate(retry)]
    return validation.schedule_ms([s * 1000 for s in steps], field, unit="s")


def build_job(
    now_ms: int,
    topic: str,
    job_id: str,
    body: Any = None,
    *,
    delay_ms: float | None = None,
    due_ms: float | None = None,
    retry_ms: Sequence[float] | None = None,
    lease_ms: float | None = None,
    callback: str | None = None,
) -> NewJob:
    """One job from the store's units (ms); raises ValidationError naming the field. Due now
    unless a delay or a due time is given."""
    if delay_ms is not None and due_ms is not None:
        raise ValidationError(
            "delay", "give either a delay or a due time, not both", "one of delay and at"
        )
    relative = None
    if due_ms is not None:
        due = validation.due_ms(due_ms, now_ms, "at")
    else:
        relative = validation.delay_ms(0 if delay_ms is None else delay_ms, "delay")
        due = now_ms + relative
    return _checked_job(
        topic,
        job_id,
        body,
        due,
        None if retry_ms is None else validation.schedule_ms(retry_ms),
        None if lease_ms is None else validation.lease_ms(lease_ms),
        callback,
        relative,
    )


def _checked_job(
    topic: str,
    job_id: str,
    body: Any,
    due_ms: int,
    retry_ms: tuple[int, ...] | None,
    lease_ms: int | None,
    callback: str | None,
    delay_ms: int | None = None,
) -> NewJob:
    """A job from a checked due time, retry schedule and lease; checks the rest. ``delay_ms``:
    the delay ``due_ms`` was counted from now with, which the scripts count from their own now."""
    if isinstance(job_id, str) and job_id.startswith(OCCURRENCE_ID_PREFIX):
        raise ValidationError(
            "id",
            f"{job_id!r} starts with {OCCURRENCE_ID_PREFIX!r}, kept for schedule occurrences",
            "an id without that prefix",
        )
    return NewJob(
        topic=validation.topic(topic),
        id=validation.job_id(job_id),
        body=validation.body(body),
        due_ms=due_ms,
        retry_ms=retry_ms,
        lease_ms=lease_ms,
        callback=None if callback is None else validation.callback_url(callback),
        delay_ms=delay_ms,
    )


def new_job(
    now_ms: int,
    topic: str,
    job_id: str,
    body: Any = None,
    *,
    delay: float | timedelta | None = None,
    at: datetime | float | None = None,
    retry: Sequence[float | timedelta] | None = None,
    lease: float | timedelta | None = None,
    callback: str | None = None,
) -> NewJob:
    """One job from add()'s arguments (seconds, epoch seconds); errors name add()'s fields."""
    if delay is not None and at is not None:
        raise ValidationError("delay", "give either delay or at, not both")
    checked_delay_ms = None if delay is None else delay_ms(delay, "delay")
    return _new_job(now_ms, topic, job_id, body, checked_delay_ms, at, retry, lease, callback)


def _new_job(
    now_ms: int,
    topic: str,
    job_id: str,
    body: Any,
    checked_delay_ms: int | None,
    at: datetime | float | None,
    retry: Sequence[float | timedelta] | None,
    lease: float | timedelta | None,
    callback: str | None,
) -> NewJob:
    """new_job once its delay is checked. Each value is checked here in the caller's units, and
    not again in ms as build_job would: every check in ms passes for a value that passed in
    seconds (the same limits, rounded to whole ms)."""
    # A past time means now.
    due_at_ms = None if at is None else validation.due_at_s(epoch_s(at, "at"), now_ms, "at")
    retry_steps_ms = schedule_ms(retry, "retry")
    lease_limit_ms = None if lease is None else lease_ms(lease, "lease")
    if due_at_ms is not None:
        return _checked_job(
            topic, job_id, body, due_at_ms, retry_steps_ms, lease_limit_ms, callback
        )
    delay = 0 if checked_delay_ms is None else checked_delay_ms
    return _checked_job(
        topic, job_id, body, now_ms + delay, retry_steps_ms, lease_limit_ms, callback, delay
    )


def new_job_batches(
    specs: Iterable[Mapping[str, Any]], size: int, now_ms: Callable[[], int]
) -> Iterator[list[NewJob]]:
    """add_stream()'s mappings as jobs, ``size`` at a time, each batch built when it is asked
    for (at ``now_ms()`` then); an error names the item by its place in the whole stream."""
    specs, first = iter(specs), 0
    while chunk := list(itertools.islice(specs, size)):
        yield new_jobs(now_ms(), chunk, first)
        first += len(chunk)


def new_jobs(now_ms: int, specs: Iterable[Mapping[str, Any]], first: int = 0) -> list[NewJob]:
    """add_many()'s mappings as jobs; an error names the item (``jobs[3].delay``), counting
    from ``first`` (a batch of a longer stream names the item by its place in the stream)."""
    if not isinstance(specs, Iterable):
        raise ValidationError(
            "jobs",
            f"must be an iterable of mappings, got {type(specs).__name__}",
            "a list of mappings",
        )
    built = []
    # A batch mostly repeats one delay: each number of seconds is checked once. Only ints and
    # floats (a bool hashes as 1 but is refused, and a timedelta is rarer).
    delays: dict[float, int] = {}
    for n, spec in enumerate(specs, first):
        if type(spec) is not dict and not isinstance(spec, Mapping):
            raise ValidationError(
                f"jobs[{n}]",
                f"must be a mapping, got {type(spec).__name__}",
                "a mapping with a topic and an id",
            )
        if not JOB_FIELDS.issuperset(spec):  # no set built per job when the names are right
            unknown = set(spec) - JOB_FIELDS
            raise ValidationError(f"jobs[{n}]", f"unknown fields {sorted(unknown)}")
        if "topic" not in spec or "id" not in spec:
            raise ValidationError(f"jobs[{n}]", "needs a topic and an id")
        try:
            delay, at = spec.get("delay"), spec.get("at")
            if delay is not None and at is not None:
                raise ValidationError("delay", "give either delay or at, not both")
            checked_delay_ms = None
            if type(delay) is int or type(delay) is float:
                checked_delay_ms = delays.get(delay)
                if checked_delay_ms is None:
                    checked_delay_ms = delays[delay] = delay_ms(delay, "delay")
            elif delay is not None:
                checked_delay_ms = delay_ms(delay, "delay")
            built.append(
                _new_job(
                    now_ms,
                    spec["topic"],
                    spec["id"],
                    spec.get("body"),
                    checked_delay_ms,
                    at,
                    spec.get("retry"),
                    spec.get("lease"),
                    spec.get("callback"),
                )
            )
        except ValidationError as exc:
            raise ValidationError(f"jobs[{n}].{exc.field}", exc.message, exc.limit) from None
    return built


def check_job_name(topic: str, job_id: str) -> None:
    """A (topic, id) named by a caller that only reads: checked before any I/O."""
    validation.topic(topic)
    validation.job_id(job_id)


def audit_events(entries: Iterable[AuditEntry], topic: str, job_id: str) -> list[AuditEvent]:
    """The job's events among ``entries`` (audit stream entries in time order), oldest first."""
    return [
        AuditEvent(
            id=entry_id,
            event=fields["e"],
            topic=fields["t"],
            job_id=fields["i"],
            attempt=int(fields.get("a", 0)),
            at_ms=int(fields["ms"]),
            fields=fields,
        )
        for entry_id, fields in history(entries, topic, job_id)
    ]
