"""Exponential backoff for actors that lost Redis: they wait and retry, they never die of it.

What an outage looks like in the log: every actor of a process retries on its own, so logging each
retry would bury the one fact that matters. The actors that talk to one Redis share a
:class:`RedisOutage`: the first failure logs one WARNING ("lost Redis"), every retry logs at
DEBUG, and the first success afterwards logs one WARNING ("reconnected after N s").
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from typing import Any

log = logging.getLogger("actors.redis")


class RedisOutage:
    """Whether one Redis (one client, shared by a process's actors) is currently lost."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None  # time.monotonic() of the first failure
        self.retries = 0

    def failed(self, who: str, exc: BaseException, wait_ms: int) -> None:
        with self._lock:
            first = self.since is None
            if first:
                self.since = time.monotonic()
                self.retries = 0
            else:
                self.retries += 1
        if first:
            log.warning(
                "lost Redis (%s: %s); retrying with backoff, retries are logged at DEBUG", who, exc
            )
        else:
            log.debug("%s: Redis still unreachable (%s); retrying in %d ms", who, exc, wait_ms)

    def recovered(self, who: str) -> None:
        if self.since is None:  # the common case, without the lock
            return
        with self._lock:
            since, self.since = self.since, None
            retries = self.retries
        if since is not None:
            log.warning(
                "reconnected to Redis after %.1f s (%s first; %d retries meanwhile)",
                time.monotonic() - since,
                who,
                retries,
            )


_outages: weakref.WeakKeyDictionary[Any, RedisOutage] = weakref.WeakKeyDictionary()
_outages_lock = threading.Lock()


def outage_of(client: Any) -> RedisOutage:
    """The outage tracker shared by everything that uses this Redis client."""
    with _outages_lock:
        outage = _outages.get(client)
        if outage is None:
            outage = _outages[client] = RedisOutage()
        return outage


class Backoff:
    def __init__(
        self,
        initial_ms: int = 50,
        max_ms: int = 5_000,
        factor: float = 2.0,
        *,
        outage: RedisOutage | None = None,
        name: str = "",
    ) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.factor = factor
        self._next_ms = float(initial_ms)
        self.failures = 0
        self.outage = outage
        self.name = name

    def next_ms(self) -> int:
        """The wait before the next try; jittered by up to 20% so workers do not retry in step."""
        wait = min(self._next_ms, self.max_ms)
        self._next_ms = min(self._next_ms * self.factor, self.max_ms)
        self.failures += 1
        return max(1, int(wait * (0.8 + 0.2 * random.random())))

    def reset(self) -> None:
        self._next_ms = float(self.initial_ms)
        self.failures = 0

    def redis_failed(self, exc: BaseException, doing: str) -> int:
        """A Redis call failed: the wait before the next try, logged through the outage."""
        wait_ms = self.next_ms()
        if self.outage is None:
            log.warning("%s %s failed (%s); retrying in %d ms", self.name, doing, exc, wait_ms)
        else:
            self.outage.failed(f"{self.name} {doing}".strip(), exc, wait_ms)
        return wait_ms

    def redis_ok(self) -> None:
        """A Redis call succeeded. Only a caller that failed itself ends the outage: a call that
        succeeded just before Redis went away may report after another caller's failure."""
        had_failed = self.failures > 0
        self.reset()
        if had_failed and self.outage is not None:
            self.outage.recovered(self.name)
