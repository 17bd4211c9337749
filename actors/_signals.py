"""Waiting on the main thread without shutting out signal handlers.

Python runs signal handlers on the main thread, between two bytecodes. When the kernel delivers
a SIGTERM to another thread (any thread may get a process-directed signal), CPython only sets a
flag for the main thread; a main thread blocked in ``Event.wait()`` with no timeout never reaches
a bytecode boundary, so the handler never runs and the worker never stops. Waking every
``_SIGNAL_POLL_S`` bounds how late a handler runs.
"""

from __future__ import annotations

import threading
import time

_SIGNAL_POLL_S = 0.2


def wait_for_event(event: threading.Event, timeout_s: float | None = None) -> bool:
    """``event.wait(timeout_s)`` that lets pending signal handlers run meanwhile."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        step = _SIGNAL_POLL_S
        if deadline is not None:
            step = min(step, max(0.0, deadline - time.monotonic()))
        if event.wait(step):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
