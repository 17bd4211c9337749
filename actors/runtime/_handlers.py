"""Calling a user's handler: what counts as success, failure, or a chosen retry delay.

Runs on the handler's own thread (sync) or on the pool's event loop (async), never on an actor's
thread, so a slow or broken handler cannot hold up any actor.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors._constants import REASON_MAX_CHARS
from actors.job import Job, Retry
from actors.tracing import Span, current
from actors.values import Lease

Handler = Callable[[Job], Any]


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    detail: str  # the ack's detail, or the failure's reason
    retry_after_ms: int | None = None
    error: BaseException | None = None  # what the handler raised (a failure only)
    traceback: str = ""  # its formatted traceback; "" for Retry, which is a choice, not a bug


# The outcome of every handler that returned no detail: immutable, so one instance serves them all
# (a frozen dataclass costs a few microseconds to build, on the path of every job).
OK = Outcome(True, "")


def call_sync(handler: Handler, lease: Lease, span: Span | None = None) -> Outcome:
    """Return = ack (a returned str is kept as the ack's detail); Retry = failure with a chosen
    delay; any other exception, even SystemExit, = failure (the thread lives on). With a span
    (tracing), the handler runs with it as the current span."""
    try:
        if span is None:
            result = handler(Job.from_lease(lease))  # a body that is not JSON fails this attempt
        else:
            with current(span):
                result = handler(Job.from_lease(lease))
    except Retry as retry:
        return Outcome(False, retry.reason, retry.after_ms, retry)
    except BaseException as exc:
        return failure(exc)
    return Outcome(True, result) if isinstance(result, str) and result else OK


async def call_async(handler: Handler, lease: Lease, span: Span | None = None) -> Outcome:
    """Like call_sync for a coroutine handler. Cancellation (a timeout) propagates."""
    try:
        if span is None:
            result = await handler(Job.from_lease(lease))
        else:
            with current(span):
                result = await handler(Job.from_lease(lease))
    except Retry as retry:
        return Outcome(False, retry.reason, retry.after_ms, retry)
    except Exception as exc:
        return failure(exc)
    return Outcome(True, result) if isinstance(result, str) and result else OK


def failure(exc: BaseException) -> Outcome:
    return Outcome(False, describe(exc), None, exc, "".join(traceback.format_exception(exc)))


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:REASON_MAX_CHARS]
