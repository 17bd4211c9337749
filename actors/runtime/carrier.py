"""Carrier: moves due jobs to their topic's ready list, in bounded batches.

It sleeps until the earliest due time (a clock timer) and wakes early when an earlier job is
added: the add and fail scripts publish the due time on the shard's wake channel when a job
becomes the earliest, and every process's carrier hears it (through the process's ShardNotifier),
so a job added by a producer-only process is carried on time. The watchdog's periodic Carry is the
backstop for a wake message that was lost anyway.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pykka
import redis

from actors._constants import (
    REDIS_FULL_AUDIT_KEEP,
    REDIS_FULL_CHECK_MS,
    REDIS_FULL_LOG_MS,
)
from actors.clock import Clock, Timer
from actors.runtime._actor import RedelayActor
from actors.runtime._backoff import Backoff, outage_of
from actors.runtime.messages import Carry, Stats, Wake
from actors.runtime.notifier import ShardNotifier
from actors.storage.store import Store

log = logging.getLogger("actors.carrier")

# Most carry calls per message before yielding the mailbox to other messages (e.g. a stop).
_ROUNDS_PER_MESSAGE = 20
# The memory check's "last checked" time when it may not run (no permission for INFO).
_NEVER_AGAIN_MS = 2**62


class Carrier(RedelayActor):
    def __init__(
        self,
        store: Store,
        clock: Clock,
        supervisor: pykka.ActorRef[Any] | None = None,
        batch: int = 1_000,
        name: str = "carrier",
        *,
        notifier: ShardNotifier,
    ) -> None:
        super().__init__(name, clock, supervisor)
        self.store = store
        self.batch = batch
        self.backoff = Backoff(outage=outage_of(store.client), name="carrier")
        self.timer: Timer | None = None
        self.timer_at_ms: int | None = None
        self.carried = 0
        self.carries = 0
        self.reasons: Counter[str] = Counter()
        self.notifier = notifier
        self.redis_full = False
        self._memory_checked_ms: int | None = None
        # How far the scripts' clock (Redis's) was ahead of this one at the last carry: a wake
        # names a due time on Redis's clock, which this turns into one on the local clock.
        self.server_ahead_ms = 0
        self._full_logged_ms: int | None = None

    def started(self) -> None:
        # Watch first, then carry: a wake published before the watch is found by that carry.
        self.notifier.watch_wake(self.actor_ref)
        self.actor_ref.tell(Carry("start"))

    def on_stop(self) -> None:
        super().on_stop()
        self.notifier.unwatch_wake(self.actor_ref)

    def on_failure(self, *args: Any) -> None:
        self.notifier.unwatch_wake(self.actor_ref)
        super().on_failure(*args)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Carry):
            self.reasons[message.reason] += 1
            if message.reason == "watchdog":
                self._tend_schedules()
            self._carry()
        elif isinstance(message, Wake):
            self._wake(message.due_ms)
        elif isinstance(message, Stats):
            return {
                "carried": self.carried,
                "carries": self.carries,
                "next_ms": self.timer_at_ms,
                "failures": self.backoff.failures,
                "reasons": dict(self.reasons),
                "redis_full": self.redis_full,
            }
        return None

    def _carry(self) -> None:
        try:
            self._check_memory()
            for _ in range(_ROUNDS_PER_MESSAGE):
                # Read before the call: a sleep measured from it ends when the next carry
                # reaches Redis at the due time, never a round trip late.
                before = self.clock.now_ms()
                swept = self.store.carry_swept(self.batch)
                self.carries += 1
                self.carried += swept.moved
                if swept.moved < self.batch:
                    break
                # A backlog: each full batch writes as many audit events, so look again now.
                self._check_memory(every_ms=0)
            else:
                self.actor_ref.tell(Carry("more"))  # a big backlog: let other messages in
                return
        except redis.RedisError as exc:
            wait_ms = self.backoff.redis_failed(exc, "carry")
            self._sleep_until(self.clock.now_ms() + wait_ms, retry=True)
            return
        self.backoff.redis_ok()
        # For as long as the server's clock says is left, not until the due time by this
        # process's clock: one that is off would wake early and find nothing, or oversleep.
        if swept.now_ms is not None:
            self.server_ahead_ms = swept.now_ms - before
        next_in = swept.next_in_ms
        self._sleep_until(None if next_in is None else before + max(0, next_in))

    def _check_memory(self, every_ms: int = REDIS_FULL_CHECK_MS) -> None:
        """At most every ``every_ms``: is Redis full? Then trim the audit streams (the history
        goes before the jobs; the store's scripts keep it short while full) and say so once a
        minute. Carry, lease and ack still run
        on a full Redis (see actors/storage/scripts.py); only adds are refused."""
        now = self.clock.now_ms()
        if self._memory_checked_ms is not None and now - self._memory_checked_ms < every_ms:
            return
        self._memory_checked_ms = now
        try:
            memory = self.store.memory()
        except redis.exceptions.NoPermissionError as exc:
            # An ACL user without +info: delivery must not wait on it (docs/operations.md).
            log.warning("cannot read INFO memory (%s): a full Redis will not be noticed", exc)
            self._memory_checked_ms = _NEVER_AGAIN_MS
            return
        if not memory["full"]:
            if self.redis_full:
                log.warning("Redis is no longer full: adds are accepted again")
            self.redis_full, self._full_logged_ms = False, None
            return
        self.redis_full = True
        self.store.trim_audit(REDIS_FULL_AUDIT_KEEP)
        if self._full_logged_ms is None or now - self._full_logged_ms >= REDIS_FULL_LOG_MS:
            self._full_logged_ms = now
            log.warning(
                "Redis is full (used_memory %d, maxmemory %d): adds are refused, delivery goes "
                "on and frees memory as jobs are acked; audit streams trimmed to about %d "
                "entries per shard (logged once a minute while full)",
                memory["used_memory"],
                memory["maxmemory"],
                REDIS_FULL_AUDIT_KEEP,
            )

    def _tend_schedules(self) -> None:
        # Once a minute: a schedule left without its next occurrence (every process that carried
        # it died before refilling) gets it back. A Redis error here is the carry's to back off.
        try:
            self.store.tend_schedules()
        except redis.RedisError as exc:
            log.warning("carrier: tending the schedules failed (%s)", exc)

    def _wake(self, due_ms: int) -> None:
        due_ms -= self.server_ahead_ms  # on the local clock, as the timer is
        if due_ms <= self.clock.now_ms():
            self.reasons["wake"] += 1
            self._carry()
        elif self.timer_at_ms is None or due_ms < self.timer_at_ms:
            self._sleep_until(due_ms)

    def _sleep_until(self, at_ms: int | None, retry: bool = False) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_at_ms = None, at_ms
        if at_ms is not None:
            self.timer = self.tell_at(at_ms, Carry("retry" if retry else "timer"))
