"""Freezing the heap a worker starts with, so Python's full collections stop walking it.

CPython's cyclic collector runs a full (oldest generation) collection whenever enough objects
have been promoted since the last one, and a full collection walks every tracked object with the
GIL held: every thread stops. A worker holds ~50,000 tracked objects once it runs (modules,
classes, functions: redis-py, Pykka, msgpack and the user's own code), and per job it promotes
the objects of the jobs in flight, so full collections came every few seconds and took tens of
milliseconds (medians of 34 and 45 ms on the benchmark machine): the steady lateness p99
(docs/scaling.md). ``gc.freeze`` moves the
objects alive now into a permanent generation that collections skip; what the jobs allocate
later is collected as before. The cost is that a frozen object is never checked for cycles
again, so a collection runs first, and the choice is the caller's (``DelayQueue.start``).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("actors")


def freeze_heap() -> int:
    """Collects, then freezes every object the process holds. Returns how many are frozen."""
    gc.collect()  # garbage cycles alive now would otherwise be kept for good
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("froze %d objects: full garbage collections skip them from now on", frozen)
    return frozen
