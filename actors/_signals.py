"""Waiting on the main thread without shutting out signal handlers, and handlers that cannot
deadlock it.

Python runs signal handlers on the main thread, between two bytecodes. When the kernel delivers
a SIGTERM to another thread (any thread may get a process-directed signal), CPython only sets a
flag for the main thread; a main thread blocked in ``Event.wait()`` with no timeout never reaches
a bytecode boundary, so the handler never runs and the worker never stops. Waking every
``_SIGNAL_POLL_S`` bounds how late a handler runs.

A handler must not take a lock either: it runs on the main thread at whatever point that thread
was, possibly inside ``Event.wait()`` holding the event's own (non-reentrant) lock, and an
``Event.set()`` there waits forever for the thread it runs on. So :class:`SignalFlag`'s handler
only appends to a list, and the waiting side polls it.
"""

from __future__ import annotations

import threading
import time
from types import FrameType

_SIGNAL_POLL_S = 0.2


def wait_for_event(event: threading.Event, timeout_s: float | None = None) -> bool:
    """``event.wait(timeout_s)`` that lets pending signal handlers run meanwhile. The event
    must not be set by a signal handler (see the module docstring): use :class:`SignalFlag`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        step = _SIGNAL_POLL_S
        if deadline is not None:
            step = min(step, max(0.0, deadline - time.monotonic()))
        if event.wait(step):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class SignalFlag:
    """The signals received so far; :meth:`handler` is safe to install with ``signal.signal``
    (it takes no lock), and :meth:`wait` polls from the main thread."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)  # list.append is atomic and takes no Python-level lock

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once a signal was received; False after ``timeout_s`` without one."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.received:
            step = _SIGNAL_POLL_S
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                step = min(step, left)
            time.sleep(step)
        return True
