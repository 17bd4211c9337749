"""What a handler receives (Job) and how it asks for a specific retry delay (Retry)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from actors import _validation as validation
from actors.values import Lease


@dataclass(frozen=True, slots=True)
class Job:
    """One delivery of a job to a handler. ``attempt`` counts from 1."""

    topic: str
    id: str
    body: Any
    body_bytes: bytes
    attempt: int
    due_ms: int
    deadline_ms: int
    token: str
    callback: str | None = None

    @classmethod
    def from_lease(cls, lease: Lease, *, undecodable_as_none: bool = False) -> Job:
        """The job a handler gets. A body that is not JSON raises, unless
        ``undecodable_as_none`` (for failure hooks: the bytes stay in ``body_bytes``)."""
        try:
            body = orjson.loads(lease.body)
        except orjson.JSONDecodeError:
            if not undecodable_as_none:
                raise
            body = None
        return cls(
            topic=lease.topic,
            id=lease.id,
            body=body,
            body_bytes=lease.body,
            attempt=lease.attempt,
            due_ms=lease.due_ms,
            deadline_ms=lease.deadline_ms,
            token=lease.token,
            callback=lease.callback,
        )


class Retry(Exception):
    """Raised by a handler to fail this attempt and choose when the next one is due.

    The attempt still counts against the schedule: when the schedule is exhausted the job is dead.
    """

    def __init__(self, after: float | timedelta, reason: str = "retry requested") -> None:
        seconds = after.total_seconds() if isinstance(after, timedelta) else float(after)
        # A bad delay raises here, inside the handler, so it is an ordinary failed attempt.
        self.after_ms = validation.delay_ms(seconds * 1000, "after", unit="s")
        self.reason = reason
        super().__init__(f"{reason} (after {seconds:g}s)")
