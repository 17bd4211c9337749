"""What a handler receives (Job) and how it asks for a specific retry delay (Retry)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from actors import _validation as validation
from actors._frozen import slot_setters
from actors.values import Lease


@dataclass(frozen=True, slots=True, init=False)
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

    def __init__(
        self,
        topic: str,
        id: str,
        body: Any,
        body_bytes: bytes,
        attempt: int,
        due_ms: int,
        deadline_ms: int,
        token: str,
        callback: str | None = None,
    ) -> None:
        # One per delivery: by hand, as the generated one costs 0.7 µs more (actors/_frozen.py).
        (
            set_topic,
            set_id,
            set_body,
            set_body_bytes,
            set_attempt,
            set_due_ms,
            set_deadline_ms,
            set_token,
            set_callback,
        ) = _JOB_SETTERS
        set_topic(self, topic)
        set_id(self, id)
        set_body(self, body)
        set_body_bytes(self, body_bytes)
        set_attempt(self, attempt)
        set_due_ms(self, due_ms)
        set_deadline_ms(self, deadline_ms)
        set_token(self, token)
        set_callback(self, callback)

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
            lease.topic,
            lease.id,
            body,
            lease.body,
            lease.attempt,
            lease.due_ms,
            lease.deadline_ms,
            lease.token,
            lease.callback,
        )


_JOB_SETTERS = slot_setters(Job)


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
