"""Exponential backoff for actors that lost Redis: they wait and retry, they never die of it."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial_ms: int = 50, max_ms: int = 5_000, factor: float = 2.0) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.factor = factor
        self._next_ms = float(initial_ms)
        self.failures = 0

    def next_ms(self) -> int:
        """The wait before the next try; jittered by up to 20% so workers do not retry in step."""
        wait = min(self._next_ms, self.max_ms)
        self._next_ms = min(self._next_ms * self.factor, self.max_ms)
        self.failures += 1
        return max(1, int(wait * (0.8 + 0.2 * random.random())))

    def reset(self) -> None:
        self._next_ms = float(self.initial_ms)
        self.failures = 0
