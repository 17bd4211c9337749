"""Time, read in one place.

Due times and lease deadlines are judged by the Redis server's clock: in production the scripts
read ``TIME`` themselves, so no process's clock (stepped, drifting, wrong) can make a job due or
a lease expired early. Only a clock whose :meth:`Clock.scripts_now_ms` gives a time (the
:class:`FakeClock` of tests and the deterministic simulator) passes it for the scripts to follow.
Python reads time only through a :class:`Clock`, and time-driven actors get their ticks from the
clock's timers, so a :class:`FakeClock` drives the whole system in tests without real sleeps.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis

log = logging.getLogger(__name__)

Callback = Callable[[], None]
# A heap is rebuilt without its cancelled timers once they are over half of it and over this many
# (below it a rebuild would cost more than the dead entries).
_PURGE_MIN_CANCELLED = 100


class Timer:
    """A pending callback; cancel() makes sure it never runs (if it has not started)."""

    __slots__ = ("_on_cancel", "at_ms", "callback", "cancelled", "fired")

    def __init__(
        self, at_ms: int, callback: Callback, on_cancel: Callable[[], None] | None = None
    ) -> None:
        self.at_ms = at_ms
        self.callback = callback
        self.cancelled = False
        # Set by the clock when it takes the timer off its heap to run it, so whoever keeps
        # timers (an actor cancels its own when it stops) can drop the ones already run.
        self.fired = False
        self._on_cancel = on_cancel  # tells the clock's heap that it holds one more dead timer

    def cancel(self) -> None:
        was_pending = self.pending
        self.cancelled = True
        if was_pending and self._on_cancel is not None:
            self._on_cancel()

    @property
    def pending(self) -> bool:
        """Neither run nor cancelled yet."""
        return not (self.cancelled or self.fired)


class Clock(Protocol):
    def scripts_now_ms(self) -> int | None:
        """The time the scripts must judge by, from a clock they follow (a fake one, in tests);
        None for any other clock, which only estimates the server's: the scripts then read
        TIME for every decision by time."""
        ...

    def now_ms(self) -> int:
        """Milliseconds since the epoch, on the clock every process agrees on."""
        ...

    def call_at(self, at_ms: int, callback: Callback) -> Timer:
        """Runs ``callback`` on the clock's timer thread once ``now_ms() >= at_ms``.

        Callbacks must be quick (they send an actor a message).
        """
        ...

    def call_later(self, delay_ms: int, callback: Callback) -> Timer: ...

    def close(self) -> None: ...


class _TimerHeap:
    """Timers ordered by due time; ties run in the order they were set.

    A cancelled timer stays in the heap until it reaches the top, unless cancelled ones come to
    outnumber the rest: then the heap is rebuilt without them. When listeners re-armed their
    5-second backstop at every wait, a worker at 1,000 waits a second held 5,000 dead timers
    (with their closures and messages) that the garbage collector's full passes walked: 34-54 ms
    pauses on every thread, the steady lateness p99 (docs/scaling.md). Any actor that re-arms a
    far timer often would do the same.
    Callers hold the clock's lock around ``push``, ``earliest_ms``, ``pop_due`` and ``len``;
    ``note_cancelled`` runs on whichever thread cancels a timer and only moves a hint.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Timer]] = []
        self._order = itertools.count()
        self._cancelled_hint = 0  # cancelled timers in the heap, about (counted without a lock)

    def timer(self, at_ms: int, callback: Callback) -> Timer:
        """A timer that tells this heap when it is cancelled (push it next)."""
        return Timer(at_ms, callback, self.note_cancelled)

    def note_cancelled(self) -> None:
        self._cancelled_hint += 1

    def push(self, timer: Timer) -> None:
        heapq.heappush(self._heap, (timer.at_ms, next(self._order), timer))
        if self._cancelled_hint > _PURGE_MIN_CANCELLED and self._cancelled_hint * 2 > len(
            self._heap
        ):
            self._heap = [entry for entry in self._heap if not entry[2].cancelled]
            heapq.heapify(self._heap)
            self._cancelled_hint = 0

    def earliest_ms(self) -> int | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
            self._cancelled_hint = max(0, self._cancelled_hint - 1)
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> Timer | None:
        """The earliest timer due by ``now_ms``, off the heap and marked fired."""
        earliest = self.earliest_ms()
        if earliest is None or earliest > now_ms:
            return None
        timer = heapq.heappop(self._heap)[2]
        timer.fired = True
        return timer

    def __len__(self) -> int:
        return len(self._heap)


class SystemClock:
    """Wall-clock time plus a fixed offset, with one daemon thread that runs timers."""

    def __init__(self, offset_ms: float = 0.0) -> None:
        self._offset_ms = offset_ms
        self._timers = _TimerHeap()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        # While the timer thread waits: the due time it waits for (None: no timer at all).
        # Read under the condition's lock by call_at, which wakes it only for an earlier timer.
        self._asleep = False
        self._asleep_until_ms: int | None = None

    def scripts_now_ms(self) -> int | None:
        return None

    def _local_ms(self) -> float:
        """The local reading the offset is added to: the wall clock."""
        return time.time() * 1000

    def now_ms(self) -> int:
        return int(self._local_ms() + self._offset_ms)

    def seconds_until(self, at_ms: int) -> float:
        """How long until this clock reads ``at_ms`` (0 or less once it does), from the exact
        time. Not ``at_ms - now_ms()``: now_ms() truncates, so a wait of that long ended up to a
        millisecond after ``at_ms``, half a millisecond on average, and every timer (the
        carrier's at each due time among them) fired that much late."""
        return (at_ms - (self._local_ms() + self._offset_ms)) / 1000

    def call_at(self, at_ms: int, callback: Callback) -> Timer:
        timer = self._timers.timer(at_ms, callback)
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="redelay-clock", daemon=True)
                self._thread.start()
            self._timers.push(timer)
            # The thread looks at the heap again before each wait, so it needs waking only while
            # it waits, and only for a timer due before the one it waits for. Actors re-arm a
            # timer on every round (the carrier at each due time, a listener at each wait):
            # waking the thread for each one was a context switch per round for nothing.
            until_ms = self._asleep_until_ms
            if self._asleep and (until_ms is None or at_ms < until_ms):
                self._cond.notify()
        return timer

    def call_later(self, delay_ms: int, callback: Callback) -> Timer:
        return self.call_at(self.now_ms() + delay_ms, callback)

    def held(self) -> int:
        """Timers in the heap, cancelled ones not yet dropped included."""
        with self._cond:
            return len(self._timers)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    timer = self._timers.pop_due(self.now_ms())
                    if timer is not None:
                        break
                    earliest = self._timers.earliest_ms()
                    # Until the clock reads `earliest` exactly: it is due then (see seconds_until).
                    # A wait that ends a hair early finds it not yet due and waits the rest.
                    wait_s = None if earliest is None else max(0.0, self.seconds_until(earliest))
                    self._asleep, self._asleep_until_ms = True, earliest
                    self._cond.wait(timeout=wait_s)
                    self._asleep = False
            try:
                timer.callback()
            except Exception:
                log.exception("timer callback failed")


# TIME is asked this many times per sync; the sample that bounds the offset tightest is kept.
SYNC_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class TimeSample:
    """One TIME reply and the local clock (seconds) just before and after asking."""

    before_s: float
    server_s: int
    server_us: int
    after_s: float


def best_offset(samples: list[TimeSample]) -> tuple[float, float]:
    """(round trip ms, offset ms of the server's clock) from the sample that bounds it tightest.

    The server read its clock somewhere between ``before_s`` and ``after_s``, so the true offset
    lies between its reading minus ``after_s`` and its reading minus ``before_s``. The lower end is
    kept, not the midpoint: a clock that runs behind the server's can only carry a job late, never
    before its due time, and the midpoint was ahead whenever the request waited longer than the
    reply (a busy server, a descheduled client), which made jobs start early by up to half a round
    trip. Every sample's lower end is a valid bound, so the largest is the tightest.
    """
    best: tuple[float, float] | None = None
    for sample in samples:
        rtt_ms = (sample.after_s - sample.before_s) * 1000
        server_ms = sample.server_s * 1000 + sample.server_us / 1000
        offset_ms = server_ms - sample.after_s * 1000
        if best is None or offset_ms > best[1]:
            best = (rtt_ms, offset_ms)
    if best is None:
        raise ValueError("no TIME samples")
    return best


class ServerTimeClock(SystemClock):
    """The server's clock, estimated on this host's monotonic clock.

    The offset between the two is measured with ``TIME`` (:meth:`take`), and nothing else moves
    the estimate: a step of the wall clock (an NTP step, ``date -s``) changes neither the time
    nor the timers, which wait on the monotonic clock. What remains between measurements is the
    monotonic clock's drift (it is slewed, never stepped). The base of :class:`RedisSyncedClock`
    and of the async store's clock, which only differ in how they ask for ``TIME``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.last_rtt_ms = 0.0
        self._wall_offset_ms = 0.0

    def _local_ms(self) -> float:
        return time.monotonic() * 1000

    @staticmethod
    def local_s() -> float:
        """The reading a :class:`TimeSample` takes before and after asking for ``TIME``."""
        return time.monotonic()

    def take(self, samples: list[TimeSample]) -> float:
        """Follows the server by ``samples`` (see :func:`best_offset`); returns the offset of
        the server's clock from this host's wall clock, in ms."""
        self.last_rtt_ms, self._offset_ms = best_offset(samples)
        # Both readings together: how far the wall clock is from the monotonic one right now.
        self._wall_offset_ms = self._offset_ms + time.monotonic() * 1000 - time.time() * 1000
        return self._wall_offset_ms

    @property
    def offset_ms(self) -> float:
        """How far the server's clock was ahead of this host's wall clock at the last sync."""
        return self._wall_offset_ms


class RedisSyncedClock(ServerTimeClock):
    """The Redis server's ``TIME``, followed on this host's monotonic clock.

    Processes whose system clocks are skewed still agree on when a job is due, and a process
    whose wall clock steps keeps the same time and timers. The offset is measured at start and
    refreshed every ``refresh_ms``. What remains is at most the round trip of the measurement,
    always behind the server (see :func:`best_offset`), plus the monotonic clock's drift between
    refreshes: well under a millisecond on loopback, a few ms across a data centre (see
    docs/lifecycle.md). The scripts judge due times by the server's clock in any case: this one
    only times the waits.
    """

    def __init__(self, client: redis.Redis, refresh_ms: int = 60_000) -> None:
        super().__init__()
        self._client = client
        self._refresh_ms = refresh_ms
        self._stop = threading.Event()
        self.sync()
        # Refreshing waits on the network (up to the client's timeouts and retries when Redis is
        # down), so it has its own thread: the timer thread, which drives every actor's ticks,
        # never waits on it.
        self._syncer = threading.Thread(
            target=self._refresh_loop, name="redelay-clock-sync", daemon=True
        )
        self._syncer.start()

    def sync(self) -> float:
        """Measures the offset to the server; returns it in ms (see :attr:`offset_ms`)."""
        samples = []
        for _ in range(SYNC_SAMPLES):
            before = self.local_s()
            seconds, micros = self._client.time()
            samples.append(TimeSample(before, seconds, micros, self.local_s()))
        return self.take(samples)

    def _refresh(self) -> None:
        try:
            self.sync()
        except Exception as exc:  # keep the last offset; try again next time
            # Any error: an escaping one would end the refresh thread for good. After close()
            # the client may be closed under a refresh; that is not worth a warning.
            if not self._stop.is_set():
                log.warning("clock sync with Redis failed: %s", exc)

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self._refresh_ms / 1000):
            self._refresh()

    def close(self) -> None:
        """Stops the timer thread and the refreshes (a refresh under way finishes on its own)."""
        self._stop.set()
        super().close()


class FakeClock:
    """A clock that moves only when told. Timers fire inside advance(), in due order.

    The scripts take its time as theirs (``scripts_now_ms``): the explicit test path, so tests
    and the deterministic simulator decide when a job is due against a real Redis."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._timers = _TimerHeap()
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now_ms

    def scripts_now_ms(self) -> int:
        return self.now_ms()

    def call_at(self, at_ms: int, callback: Callback) -> Timer:
        timer = self._timers.timer(at_ms, callback)
        with self._lock:
            self._timers.push(timer)
        return timer

    def call_later(self, delay_ms: int, callback: Callback) -> Timer:
        return self.call_at(self._now_ms + delay_ms, callback)

    def advance(self, delta_ms: int) -> None:
        """Moves time forward, running each timer at its own due time on the way."""
        if delta_ms < 0:
            raise ValueError("a fake clock does not go backwards; use jump() to model that")
        target = self._now_ms + delta_ms
        while True:
            with self._lock:
                timer = self._timers.pop_due(target)
                if timer is None:
                    break
                self._now_ms = max(self._now_ms, timer.at_ms)
            if not timer.cancelled:
                timer.callback()
        self._now_ms = target

    def jump(self, delta_ms: int) -> None:
        """Moves time by delta_ms (either way) without running timers on the way: a clock step."""
        self._now_ms += delta_ms

    def pending(self) -> int:
        with self._lock:
            return sum(1 for _, _, t in self._timers._heap if not t.cancelled)

    def held(self) -> int:
        """Timers in the heap, cancelled ones not yet dropped included."""
        with self._lock:
            return len(self._timers)

    def next_timer_ms(self) -> int | None:
        with self._lock:
            return self._timers.earliest_ms()

    def close(self) -> None:
        with self._lock:
            self._timers = _TimerHeap()


class SteppedClock:
    """One process's clock over a shared :class:`FakeClock`, off by ``offset_ms``, which
    :meth:`step` changes: a host whose clock steps, in the deterministic simulator.

    Its reading and its timers are the process's own; the scripts still judge by the shared
    clock (the server's, in the model), as they judge by Redis's ``TIME`` in production. A timer
    keeps the moment it was set for when the clock steps later, as the production clock's timers
    wait on the monotonic clock.
    """

    def __init__(self, shared: FakeClock, offset_ms: int = 0) -> None:
        self.shared = shared
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return self.shared.now_ms() + self.offset_ms

    def scripts_now_ms(self) -> int:
        return self.shared.scripts_now_ms()

    def call_at(self, at_ms: int, callback: Callback) -> Timer:
        return self.shared.call_at(at_ms - self.offset_ms, callback)

    def call_later(self, delay_ms: int, callback: Callback) -> Timer:
        return self.shared.call_later(delay_ms, callback)

    def step(self, delta_ms: int) -> None:
        """The process's clock jumps by ``delta_ms`` (either way); nothing else moves."""
        self.offset_ms += delta_ms

    def close(self) -> None:
        """Nothing: the timers are the shared clock's, which its owner closes."""
