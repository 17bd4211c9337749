"""Jobs this process replaced while they were leased: re-arming a job from its own handler.

A handler that calls ``queue.add(topic, its own id, delay=..., replace=True)`` re-arms its job:
the replace revokes the running lease (lua/replace-10.lua), so the pool's ack is refused as
stale. That refusal is what the caller asked for, not a lost lease, so the facade notes each
replace that found the job leased here and the pool takes the note instead of warning.
Pure and process-wide; bounded, so notes for jobs leased by other processes cannot pile up.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

NOTES_MAX: Final = 10_000

_lock = threading.Lock()
_notes: OrderedDict[tuple[str, str], bool] = OrderedDict()


def note(topic: str, job_id: str) -> None:
    """Called by the facade when a replace found (topic, id) leased."""
    with _lock:
        _notes[(topic, job_id)] = True
        _notes.move_to_end((topic, job_id))
        while len(_notes) > NOTES_MAX:
            _notes.popitem(last=False)


def take(topic: str, job_id: str) -> bool:
    """True (once) when (topic, id) was replaced while leased: its refused result is expected."""
    with _lock:
        return _notes.pop((topic, job_id), False)
