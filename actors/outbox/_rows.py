"""What an outbox write puts in its row, and what the relay makes of a row: no I/O.

A write is checked here exactly as DelayQueue.add/cancel check their arguments (the same
functions, so the same errors naming the same fields), before any SQL is sent: a bad add raises
inside the caller's transaction and writes nothing.

Two writes of one job before the relay ran merge into one row (the table's primary key):

=============  =====================  =========================================
row holds      new write              row becomes
=============  =====================  =========================================
add, replace   add (keep)             unchanged: an add leaves an existing job
cancel         add (keep)             replace, with the new job: cancel, then add
anything       replace, cancel        the new write
=============  =====================  =========================================

Applied after the row's old content was applied (the relay ran in between), the merged row
still ends where applying both writes in commit order would: that is why a later add over a
cancel replaces rather than keeps.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from actors import _validation as validation
from actors import producing
from actors.errors import ValidationError
from actors.values import NewJob


@dataclass(frozen=True, slots=True)
class OutboxWrite:
    """The values of one row, checked (``written_ms`` is set by the database's clock)."""

    topic: str
    job_id: str
    op: str
    token: str
    delay_ms: int | None = None
    at_ms: int | None = None
    body: bytes | None = None
    retry_ms: str | None = None
    lease_ms: int | None = None
    callback: str | None = None

    def values(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "job_id": self.job_id,
            "op": self.op,
            "token": self.token,
            "delay_ms": self.delay_ms,
            "at_ms": self.at_ms,
            "body": self.body,
            "retry_ms": self.retry_ms,
            "lease_ms": self.lease_ms,
            "callback": self.callback,
        }


def add_write(
    topic: str,
    job_id: str,
    body: Any = None,
    *,
    delay: float | timedelta | None = None,
    at: datetime | float | None = None,
    retry: Sequence[float | timedelta] | None = None,
    lease: float | timedelta | None = None,
    callback: str | None = None,
    if_exists: str = "keep",
    now_ms: int | None = None,
) -> OutboxWrite:
    """An add's row. ``if_exists`` is "keep" (the default: an existing job is left as it is)
    or "replace"; "error" cannot be kept, as the job's existence is only known in Redis, after
    the commit, where no caller is left to raise to."""
    if if_exists == "error":
        raise ValidationError(
            "if_exists",
            "is 'error', which an outbox cannot honour: the job's existence is only known "
            "after the commit",
            '"keep" or "replace"',
        )
    mode = validation.if_exists(if_exists)
    # The writer's clock only bounds ``at`` (ten years ahead, a past time means now) as add does;
    # the due time itself counts from the database's clock (see due_ms).
    checked_now_ms = round(time.time() * 1000) if now_ms is None else now_ms
    job = producing.new_job(
        checked_now_ms,
        topic,
        job_id,
        body,
        delay=delay,
        at=at,
        retry=retry,
        lease=lease,
        callback=callback,
    )
    return OutboxWrite(
        topic=job.topic,
        job_id=job.id,
        op="replace" if mode == "replace" else "add",
        token=uuid.uuid4().hex,
        delay_ms=None if at is not None else job.due_ms - checked_now_ms,
        at_ms=job.due_ms if at is not None else None,
        body=job.body,
        retry_ms=None if job.retry_ms is None else orjson.dumps(job.retry_ms).decode(),
        lease_ms=job.lease_ms,
        callback=job.callback,
    )


def cancel_write(topic: str, job_id: str) -> OutboxWrite:
    producing.check_job_name(topic, job_id)
    return OutboxWrite(topic=topic, job_id=job_id, op="cancel", token=uuid.uuid4().hex)


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A row as the relay read it, with the database's clock at the read."""

    topic: str
    job_id: str
    op: str
    token: str
    written_ms: int
    delay_ms: int | None
    at_ms: int | None
    body: bytes | None
    retry_ms: str | None
    lease_ms: int | None
    callback: str | None
    read_at_db_ms: int

    @property
    def age_ms(self) -> int:
        """How long the row waited, by the database's clock (never negative)."""
        return max(0, self.read_at_db_ms - self.written_ms)

    def due_ms(self, redis_now_ms: int) -> int:
        """The job's due time by Redis's clock: ``at`` as given, or the delay counted from the
        write. The time the row waited is measured on the database's clock alone, so a skew
        between the database and Redis cannot make a job early; the relay's own time between
        reading the row and ``redis_now_ms`` can only make it later."""
        if self.at_ms is not None:
            return self.at_ms
        return redis_now_ms - self.age_ms + (self.delay_ms or 0)

    def job(self, redis_now_ms: int) -> NewJob:
        """The job to add. While its due time is ahead, what is left of the delay goes as the
        job's delay, which the add script counts from Redis's own TIME; once late, the due time
        stays the past one it was, so the job's lateness shows the relay's."""
        retry = None if self.retry_ms is None else tuple(orjson.loads(self.retry_ms))
        due = self.due_ms(redis_now_ms)
        left = None if self.at_ms is not None or due <= redis_now_ms else due - redis_now_ms
        return NewJob(
            topic=self.topic,
            id=self.job_id,
            body=self.body if self.body is not None else b"null",
            due_ms=due,
            retry_ms=retry,
            lease_ms=self.lease_ms,
            callback=self.callback,
            delay_ms=left,
        )
