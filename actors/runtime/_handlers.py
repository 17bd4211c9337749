"""Calling a user's handler: what counts as success, failure, or a chosen retry delay.

Runs on the handler's own thread (sync) or on the pool's event loop (async), never on an actor's
thread, so a slow or broken handler cannot hold up any actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors import _constants as c
from actors.job import Job, Retry
from actors.values import Lease

Handler = Callable[[Job], Any]
Outcome = tuple[bool, str, int | None]  # ok, detail (ack) or reason (failure), retry_after_ms


def call_sync(handler: Handler, lease: Lease) -> Outcome:
    """Return = ack (a returned str is kept as the ack's detail); Retry = failure with a chosen
    delay; any other exception, even SystemExit, = failure (the thread lives on)."""
    try:
        result = handler(Job.from_lease(lease))  # a body that is not JSON fails this attempt
    except Retry as retry:
        return False, retry.reason, retry.after_ms
    except BaseException as exc:
        return False, describe(exc), None
    return True, result if isinstance(result, str) else "", None


async def call_async(handler: Handler, lease: Lease) -> Outcome:
    """Like call_sync for a coroutine handler. Cancellation (a timeout) propagates."""
    try:
        result = await handler(Job.from_lease(lease))
    except Retry as retry:
        return False, retry.reason, retry.after_ms
    except Exception as exc:
        return False, describe(exc), None
    return True, result if isinstance(result, str) else "", None


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[: c.REASON_MAX_CHARS]
