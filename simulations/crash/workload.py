"""What the simulated jobs look like and what their handlers do, decided by the seed.

A handler's behaviour on one delivery is a pure function of (seed, topic, id, attempt): the same
seed makes the same attempt fail or hang whichever thread or process runs it, and in whatever
order, so thread scheduling cannot change the workload.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Literal

Kind = Literal["ok", "error", "retry", "hang"]


def unit(*parts: object) -> float:
    """A number in [0, 1) that depends only on ``parts`` (stable across processes and runs)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True, slots=True)
class Decision:
    kind: Kind
    ms: int = 0  # hang: how long; retry: the delay asked for; ok/error: how long the work takes


@dataclass(frozen=True, slots=True)
class HandlerMix:
    """Per delivery: fail with ``error`` probability, ask for a Retry, or hang past the timeout.

    ``work_ms`` is how long an ordinary run takes (real time in the chaos simulator, where
    handlers sleep; zero in the deterministic one, where time is the fake clock's).
    """

    error: float = 0.0
    retry: float = 0.0
    hang: float = 0.0
    hang_ms: tuple[int, int] = (0, 0)
    retry_ms: tuple[int, int] = (0, 0)
    work_ms: tuple[int, int] = (0, 0)
    work_share: float = 1.0  # the other runs take no time at all

    def decide(self, seed: int, topic: str, job_id: str, attempt: int) -> Decision:
        roll = unit(seed, "handler", topic, job_id, attempt)
        spread = unit(seed, "spread", topic, job_id, attempt)
        works = unit(seed, "works", topic, job_id, attempt) < self.work_share
        work_ms = _between(self.work_ms, spread) if works else 0
        if roll < self.hang:
            return Decision("hang", _between(self.hang_ms, spread))
        roll -= self.hang
        if roll < self.error:
            return Decision("error", work_ms)
        roll -= self.error
        if roll < self.retry:
            return Decision("retry", _between(self.retry_ms, spread))
        return Decision("ok", work_ms)

    def as_dict(self) -> dict[str, object]:
        return {
            "error": self.error,
            "retry": self.retry,
            "hang": self.hang,
            "hang_ms": list(self.hang_ms),
            "retry_ms": list(self.retry_ms),
            "work_ms": list(self.work_ms),
            "work_share": self.work_share,
        }


def _between(bounds: tuple[int, int], fraction: float) -> int:
    low, high = bounds
    return low + int((high - low) * fraction)


@dataclass(frozen=True, slots=True)
class DelayMix:
    """Delays as weighted ranges: (weight, lowest ms, highest ms)."""

    ranges: tuple[tuple[float, int, int], ...]

    def sample(self, rng: random.Random) -> int:
        weights = [w for w, _, _ in self.ranges]
        _, low, high = rng.choices(self.ranges, weights=weights)[0]
        return low if high <= low else rng.randint(low, high)

    @property
    def max_ms(self) -> int:
        return max(high for _, _, high in self.ranges)

    def describe(self) -> str:
        total = sum(w for w, _, _ in self.ranges)
        return ", ".join(
            f"{w / total:.0%} {_span(low)}-{_span(high)}" if high > low else f"{w / total:.0%} now"
            for w, low, high in self.ranges
        )


def _span(ms: int) -> str:
    if ms < 1_000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    if ms < 3_600_000:
        return f"{ms / 60_000:g}m"
    return f"{ms / 3_600_000:g}h"


Period = tuple[float, float]


def storms(rng: random.Random, duration: float, storm: Period, calm: Period) -> list[Period]:
    """Storms alternating with calm periods over ``duration``, a storm first; each lasts between
    the bounds given for its kind. Faults fire only in storms, so the calm periods give a
    lateness baseline to compare the storms with."""
    found: list[Period] = []
    at = 0.0
    stormy = True
    while at < duration:
        length = rng.uniform(*(storm if stormy else calm))
        if stormy:
            found.append((at, min(duration, at + length)))
        at += length
        stormy = not stormy
    return found


def fault_times(rng: random.Random, periods: list[Period], mean_interval: float) -> list[float]:
    """A Poisson process with the given mean interval, inside the given periods only; at least
    one time, so a short run still meets every fault kind it switched on."""
    times: list[float] = []
    for start, end in periods:
        at = start + rng.expovariate(1 / mean_interval)
        while at < end:
            times.append(at)
            at += rng.expovariate(1 / mean_interval)
    if not times and periods:
        start, end = rng.choice(periods)
        times.append(rng.uniform(start, end))
    return times
