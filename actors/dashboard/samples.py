"""What the overview remembers between requests, so a refresh costs Redis little.

- Each topic's dead count over the last minutes, so "dead rising" needs no extra read.
- The chart points (acks, and lateness of jobs becoming ready) of the last minutes. Each
  refresh, at most every two seconds however many browsers poll, reads only the audit entries
  written since the newest one it has seen, at most ``AUDIT_READ`` per shard. When more than that
  arrived, the newest are kept and the chart says it is sampled (a lower bound on jobs/s).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from actors.dashboard.charts import Series, rates
from actors.values import AuditEntry

WINDOW_MS = 5 * 60_000  # the charts' span and how far back "dead rising" looks
BUCKET_MS = 10_000
CACHE_MS = 2_000
AUDIT_READ = 1_000  # most entries per shard one refresh reads

# recent(count, after): the newest ``count`` entries per shard after the entry id ``after``.
Recent = Callable[[int, str | None], list[AuditEntry]]
_CHARTED = ("acked", "ready")


def _id_order(entry_id: str) -> tuple[int, int]:
    """Stream ids compare as numbers ("12000-0" is after "2000-0")."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Samples:
    """Shared by the app's request threads; the lock covers small in-memory updates and makes
    concurrent refreshes read Redis once."""

    def __init__(self, recent: Recent) -> None:
        self._recent = recent
        self._lock = threading.Lock()
        self._dead: dict[str, deque[tuple[int, int]]] = {}
        self._entries: deque[AuditEntry] = deque()
        self._last_id: str | None = None
        self._refreshed_ms: int | None = None
        self.sampled = False  # a refresh hit AUDIT_READ: the chart shows a part of the entries

    def record_dead(self, now_ms: int, counts: dict[str, dict[str, int]]) -> dict[str, bool]:
        """Keeps each topic's dead count; returns which topics' dead count rose in the window."""
        risen: dict[str, bool] = {}
        with self._lock:
            for topic, states in counts.items():
                kept = self._dead.setdefault(topic, deque())
                while kept and kept[0][0] < now_ms - WINDOW_MS:
                    kept.popleft()
                dead = states.get("dead", 0)
                risen[topic] = bool(kept) and dead > kept[0][1]
                if not kept or now_ms - kept[-1][0] >= CACHE_MS:
                    kept.append((now_ms, dead))
        return risen

    def charts(self, now_ms: int) -> tuple[Series, Series]:
        with self._lock:
            if self._refreshed_ms is None or now_ms - self._refreshed_ms >= CACHE_MS:
                self._refresh(now_ms)
            return rates(self._entries, now_ms, window_ms=WINDOW_MS, bucket_ms=BUCKET_MS)

    def _refresh(self, now_ms: int) -> None:
        fresh = self._recent(AUDIT_READ, self._last_id)
        self.sampled = len(fresh) >= AUDIT_READ
        if fresh:
            self._last_id = max((entry_id for entry_id, _ in fresh), key=_id_order)
        self._entries.extend(e for e in fresh if e[1].get("e") in _CHARTED)
        while self._entries and int(self._entries[0][1].get("ms", 0)) < now_ms - WINDOW_MS:
            self._entries.popleft()
        self._refreshed_ms = now_ms
