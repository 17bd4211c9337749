"""What the overview remembers between requests: each topic's dead count over the last minutes
(so "dead rising" needs no extra Redis read) and the chart series, cached for a moment so that
several browsers polling the overview cost Redis one read of the audit stream, not one each.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from actors.dashboard.charts import Entry, Series, rates

WINDOW_MS = 5 * 60_000  # the charts' span and how far back "dead rising" looks
BUCKET_MS = 10_000
CACHE_MS = 2_000
AUDIT_READ = 5_000  # newest entries read per shard for the charts


class Samples:
    """Shared by the app's request threads; one lock around small in-memory updates."""

    def __init__(self, recent: Callable[[int], list[Entry]]) -> None:
        self._recent = recent
        self._lock = threading.Lock()
        self._dead: dict[str, deque[tuple[int, int]]] = {}
        self._charts: tuple[int, tuple[Series, Series]] | None = None

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
            if self._charts is not None and now_ms - self._charts[0] < CACHE_MS:
                return self._charts[1]
        series = rates(self._recent(AUDIT_READ), now_ms, window_ms=WINDOW_MS, bucket_ms=BUCKET_MS)
        with self._lock:
            self._charts = (now_ms, series)
        return series
