"""What the overview's charts show, from the newest audit entries, and the SVG that draws them.

Pure: entries in, numbers and markup out. Jobs per second counts ``acked`` events per bucket;
lateness is how long after its due time a job became ready (a ``ready`` event's ``ms - due``),
the worst per bucket. The SVG is built here rather than in a JavaScript library: a few dozen
rectangles need no build step, and it renders in a browser without scripts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

from actors.values import AuditEntry


@dataclass(frozen=True, slots=True)
class Series:
    """One value per bucket, oldest first; ``start_ms`` is where the first bucket begins."""

    start_ms: int
    bucket_ms: int
    values: tuple[float, ...]


def bucket_index(at_ms: int, start_ms: int, bucket_ms: int, buckets: int) -> int | None:
    n = (at_ms - start_ms) // bucket_ms
    return n if 0 <= n < buckets else None


def rates(
    entries: Iterable[AuditEntry], now_ms: int, *, window_ms: int, bucket_ms: int
) -> tuple[Series, Series]:
    """(acked jobs per second, worst lateness in seconds) per bucket over the last window."""
    buckets = window_ms // bucket_ms
    start = now_ms - buckets * bucket_ms
    acked = [0.0] * buckets
    late = [0.0] * buckets
    for _, fields in entries:
        at = int(fields.get("ms", 0))
        n = bucket_index(at, start, bucket_ms, buckets)
        if n is None:
            continue
        if fields.get("e") == "acked":
            acked[n] += 1
        elif fields.get("e") == "ready" and "due" in fields:
            late[n] = max(late[n], (at - int(fields["due"])) / 1000)
    per_second = tuple(count * 1000 / bucket_ms for count in acked)
    return Series(start, bucket_ms, per_second), Series(start, bucket_ms, tuple(late))


def bar_chart(series: Series, *, title: str, unit: str, width: int = 480, height: int = 90) -> str:
    """An inline SVG bar chart with its maximum labelled; each bar has a tooltip."""
    values = series.values
    top = max(values, default=0.0) or 1.0
    bar = width / max(len(values), 1)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height + 16}" '
        f'width="{width}" height="{height + 16}"><title>{escape(title)}</title>',
        f'<text x="2" y="11" class="axis">max {_number(max(values, default=0.0))} {unit}</text>',
    ]
    for n, value in enumerate(values):
        h = value / top * (height - 4)
        x = n * bar
        seconds_ago = (len(values) - n) * series.bucket_ms // 1000
        parts.append(
            f'<rect x="{x:.1f}" y="{16 + height - h:.1f}" width="{max(bar - 1, 1):.1f}" '
            f'height="{h:.1f}"><title>{_number(value)} {unit}, {seconds_ago}s ago</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2f}"
