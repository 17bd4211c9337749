"""The fields of a topic's gate (HASH ``<prefix>gates``, read by lua/_gate.lua), built and parsed
apart from Redis: each shard's share of the namespace's limits, and their stored description.

A lease script sees only its own shard, so a namespace-wide limit is split: the rate evenly (each
shard allows n per ``per_ms * shards``), max_in_flight by shares that sum to it, at least one per
shard so that no shard's jobs are stuck (with fewer slots than shards the sum exceeds the limit).
"""

from __future__ import annotations

import json

from actors._constants import RATE_MAX_JOBS, RATE_WINDOW_MAX_MS
from actors.errors import ValidationError
from actors.values import TopicLimits

# The gate fields set_limits owns (the pause flag is the pause script's).
LIMIT_FIELDS = ("rate", "flight", "tat", "limits")

RATE_LIMIT = (
    f"a pair (jobs, seconds): jobs an integer from 1 to {RATE_MAX_JOBS}, seconds from 0.001 "
    f"to {RATE_WINDOW_MAX_MS // 1000}"
)


def rate_arg(rate: object) -> tuple[int, int]:
    """``rate`` as (jobs, window ms); ValidationError naming ``rate`` otherwise."""
    if not isinstance(rate, tuple | list) or len(rate) != 2:
        raise ValidationError("rate", f"is {rate!r}", RATE_LIMIT)
    jobs, seconds = rate
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= RATE_MAX_JOBS:
        raise ValidationError("rate", f"allows {jobs!r} jobs", RATE_LIMIT)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValidationError("rate", f"has a window of {seconds!r}", RATE_LIMIT)
    window_ms = round(seconds * 1000)
    if not 1 <= window_ms <= RATE_WINDOW_MAX_MS:
        raise ValidationError("rate", f"has a window of {seconds!r} s", RATE_LIMIT)
    return jobs, window_ms


def shard_fields(
    topic: str, rate: tuple[int, int] | None, flight: int | None, shard: int, shards: int
) -> dict[str, str]:
    """The gate fields of shard ``shard`` of ``shards`` for these limits (empty: none)."""
    fields: dict[str, str] = {}
    if rate is not None:
        fields[f"{topic}|rate"] = f"{rate[0]}/{rate[1] * shards}"
    if flight is not None:
        share = flight // shards + (1 if shard < flight % shards else 0)
        fields[f"{topic}|flight"] = str(max(1, share))
    if fields:
        described = {"rate": None if rate is None else list(rate), "max_in_flight": flight}
        fields[f"{topic}|limits"] = json.dumps(described)
    return fields


def parse_limits(raw: str | None) -> TopicLimits:
    """The limits a shard's ``<topic>|limits`` field describes (None: no limits)."""
    if raw is None:
        return TopicLimits()
    described = json.loads(raw)
    rate = described.get("rate")
    return TopicLimits(
        None if rate is None else (int(rate[0]), int(rate[1]) / 1000),
        described.get("max_in_flight"),
    )
