"""The suite's one way to wait for something to happen: poll a condition until it holds, and
fail the test at a deadline sized for a loaded 2-core machine, saying what was awaited.

A fixed sleep that lets something happen passes on a quiet machine and fails on a busy one;
a condition with a generous deadline costs nothing when things are quick and only makes a real
failure slower to report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

# CI runs on 2 cores that other jobs share: threads and processes can wait seconds for a core.
WAIT_S = 30.0
# Short enough to notice a change at once, long enough not to steal the core the awaited
# thread or process needs.
POLL_S = 0.01


def wait_until(
    condition: Callable[[], T],
    what: str,
    *,
    timeout_s: float = WAIT_S,
    poll_s: float = POLL_S,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Calls ``condition`` until it returns something truthy and returns that; fails the test
    after ``timeout_s`` naming ``what``. Exceptions in ``retry_on`` count as "not yet" (the
    last one is reported at the deadline)."""
    value, last_error = _poll(condition, timeout_s, poll_s, retry_on)
    if not value:
        detail = f" (last error: {last_error!r})" if last_error is not None else ""
        pytest.fail(f"timed out after {timeout_s:g}s waiting for {what}{detail}")
    return value


def poll_until(
    condition: Callable[[], T], *, timeout_s: float = WAIT_S, poll_s: float = POLL_S
) -> T | None:
    """``wait_until`` for a caller that reports the outcome itself: the truthy value, or None
    at the deadline."""
    value, _ = _poll(condition, timeout_s, poll_s, ())
    return value or None


def _poll(
    condition: Callable[[], T],
    timeout_s: float,
    poll_s: float,
    retry_on: tuple[type[BaseException], ...],
) -> tuple[T | None, BaseException | None]:
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
        except retry_on as exc:
            last_error = exc
        else:
            if value:
                return value, last_error
        if time.monotonic() >= deadline:
            return None, last_error
        time.sleep(poll_s)  # the poll interval of a wait with a deadline
