"""Clocks: the fake one moves only when told, the system one runs timers on its own thread, and
the Redis-synced one measures its offset to the server's TIME.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
import redis
from _wait import WAIT_S
from hypothesis import given
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors.clock import (
    Clock,
    FakeClock,
    RedisSyncedClock,
    SteppedClock,
    SystemClock,
    TimeSample,
    best_offset,
)
from actors.server.embedded import RedisProcess


def recorder(clock: FakeClock, seen: list[tuple[str, int]], name: str) -> Callable[[], None]:
    def fire() -> None:
        seen.append((name, clock.now_ms()))

    return fire


# -- FakeClock ------------------------------------------------------------------------------


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(start_ms=1_000)
    assert clock.now_ms() == 1_000
    assert clock.now_ms() == 1_000
    clock.advance(250)
    assert clock.now_ms() == 1_250


def test_fake_timers_fire_inside_advance_in_due_order_at_their_own_time() -> None:
    clock = FakeClock(start_ms=0)
    seen: list[tuple[str, int]] = []
    clock.call_at(30, recorder(clock, seen, "c"))
    clock.call_later(10, recorder(clock, seen, "a"))
    clock.call_at(20, recorder(clock, seen, "b1"))
    clock.call_at(20, recorder(clock, seen, "b2"))  # ties fire in the order they were set
    clock.call_at(99, recorder(clock, seen, "late"))
    assert clock.pending() == 5 and clock.next_timer_ms() == 10
    clock.advance(29)
    assert seen == [("a", 10), ("b1", 20), ("b2", 20)]
    assert clock.now_ms() == 29
    clock.advance(1)
    assert seen[-1] == ("c", 30)
    assert clock.pending() == 1 and clock.next_timer_ms() == 99


def test_a_timer_set_by_a_timer_fires_in_the_same_advance_when_due() -> None:
    clock = FakeClock(start_ms=0)
    seen: list[tuple[str, int]] = []

    def first() -> None:
        seen.append(("first", clock.now_ms()))
        clock.call_later(5, recorder(clock, seen, "second"))

    clock.call_at(10, first)
    clock.advance(100)
    assert seen == [("first", 10), ("second", 15)]
    assert clock.now_ms() == 100


def test_a_cancelled_fake_timer_never_fires() -> None:
    clock = FakeClock(start_ms=0)
    seen: list[tuple[str, int]] = []
    timer = clock.call_at(10, recorder(clock, seen, "x"))
    clock.call_at(20, recorder(clock, seen, "y"))
    timer.cancel()
    assert clock.pending() == 1
    clock.advance(100)
    assert seen == [("y", 20)]


def test_jump_moves_time_without_running_timers_and_never_backwards_with_advance() -> None:
    clock = FakeClock(start_ms=1_000)
    seen: list[tuple[str, int]] = []
    clock.call_at(1_500, recorder(clock, seen, "x"))
    clock.jump(1_000)
    assert clock.now_ms() == 2_000 and seen == []
    clock.advance(0)  # the next advance runs what the jump skipped over
    assert seen == [("x", 2_000)]
    clock.jump(-5_000)  # a clock step backwards, as NTP may do
    assert clock.now_ms() == -3_000
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)


def test_a_stepped_clock_is_its_own_but_the_scripts_follow_the_shared_one() -> None:
    shared = FakeClock(start_ms=10_000)
    own = SteppedClock(shared, offset_ms=500)
    seen: list[tuple[str, int]] = []
    own.call_at(11_500, recorder(shared, seen, "own"))  # 1 s from now, on its own clock
    own.step(-2_000)  # a timer already set keeps its moment, as on the monotonic clock
    assert own.now_ms() == 8_500 and own.scripts_now_ms() == shared.scripts_now_ms() == 10_000
    shared.advance(1_000)
    assert seen == [("own", 11_000)]
    assert SystemClock().scripts_now_ms() is None  # the scripts read TIME


def test_close_drops_pending_fake_timers() -> None:
    clock = FakeClock(start_ms=0)
    seen: list[tuple[str, int]] = []
    clock.call_at(1, recorder(clock, seen, "x"))
    clock.close()
    clock.advance(10)
    assert seen == [] and clock.pending() == 0


# -- SystemClock ----------------------------------------------------------------------------


def test_system_clock_reads_wall_time_plus_its_offset() -> None:
    plain, ahead = SystemClock(), SystemClock(offset_ms=60_000)
    before = time.time() * 1000
    value, shifted = plain.now_ms(), ahead.now_ms()
    after = time.time() * 1000
    assert before - 1 <= value <= after + 1
    assert before + 60_000 - 1 <= shifted <= after + 60_000 + 1


def test_a_timer_is_pending_until_it_runs_or_is_cancelled() -> None:
    clock = FakeClock(start_ms=0)
    ran: list[str] = []
    runs, dropped = clock.call_at(10, lambda: ran.append("runs")), clock.call_at(10, ran.clear)
    assert runs.pending and dropped.pending
    dropped.cancel()
    assert not dropped.pending and runs.pending
    clock.advance(9)
    assert runs.pending and ran == []
    clock.advance(1)
    assert ran == ["runs"] and not runs.pending and runs.fired and not runs.cancelled
    assert not dropped.fired  # a cancelled timer is dropped, never run


@pytest.mark.parametrize("make", [FakeClock, SystemClock], ids=["fake", "system"])
def test_cancelled_timers_are_dropped_once_they_outnumber_the_rest(
    make: Callable[[], FakeClock | SystemClock],
) -> None:
    """An actor that re-arms a far timer at every round (listeners did, for their backstop):
    each one cancelled stays in the heap until it reaches the top, unless the heap drops them
    when they are most of it."""
    clock = make()
    try:
        far = clock.now_ms() + 3_600_000
        kept = [clock.call_at(far + n, lambda: None) for n in range(50)]
        backstop = clock.call_at(far, lambda: None)
        for n in range(10_000):
            backstop.cancel()
            backstop = clock.call_at(far + n, lambda: None)
            assert clock.held() <= 2 * (len(kept) + 1) + 100 + 1
        assert all(timer.pending for timer in kept) and backstop.pending
    finally:
        clock.close()


def test_a_system_clock_timer_is_no_longer_pending_once_it_ran() -> None:
    clock = SystemClock()
    ran = threading.Event()
    try:
        timer = clock.call_later(5, ran.set)
        assert timer.pending
        assert ran.wait(WAIT_S)
        assert timer.fired and not timer.pending
    finally:
        clock.close()


def test_seconds_until_counts_from_the_exact_time_not_the_truncated_ms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 0.7 ms into a millisecond: now_ms() reads the millisecond's start, but the next one is
    # 0.3 ms away, not 1 (a wait of a whole one fired every timer up to a millisecond late).
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0007)
    plain, ahead = SystemClock(), SystemClock(offset_ms=0.5)
    assert plain.now_ms() == 1_700_000_000_000
    assert plain.seconds_until(1_700_000_000_001) == pytest.approx(0.0003, abs=1e-6)
    assert plain.seconds_until(1_700_000_000_000) == pytest.approx(-0.0007, abs=1e-6)
    assert ahead.now_ms() == 1_700_000_000_001  # 1.2 ms in, with its offset
    assert ahead.seconds_until(1_700_000_000_002) == pytest.approx(0.0008, abs=1e-6)


def test_system_clock_timers_fire_on_their_thread_in_order() -> None:
    clock = SystemClock()
    fired: list[str] = []
    done = threading.Event()
    threads: set[str] = set()

    def make(name: str) -> Callable[[], None]:
        def fire() -> None:
            fired.append(name)
            threads.add(threading.current_thread().name)
            if name == "last":
                done.set()

        return fire

    try:
        start = clock.now_ms()
        clock.call_later(40, make("last"))
        clock.call_later(20, make("second"))
        clock.call_at(start, make("first"))
        assert done.wait(WAIT_S)
        assert fired == ["first", "second", "last"]
        assert threads == {"redelay-clock"}
        assert clock.now_ms() >= start + 40
    finally:
        clock.close()


def _wait_until_asleep(clock: SystemClock) -> None:
    """Until the timer thread waits on its condition (the state call_at reads to decide)."""
    deadline = time.monotonic() + WAIT_S
    while not clock._asleep:
        assert time.monotonic() < deadline, "the timer thread never went to sleep"
        time.sleep(0.001)


def test_an_earlier_timer_wakes_the_thread_that_sleeps_until_a_later_one() -> None:
    clock = SystemClock()
    near, far = threading.Event(), threading.Event()
    try:
        clock.call_later(60_000, far.set)
        _wait_until_asleep(clock)
        set_ms = clock.now_ms()
        clock.call_later(20, near.set)
        assert near.wait(WAIT_S)  # not after the 60 s the thread was sleeping for
        assert clock.now_ms() >= set_ms + 20 and not far.is_set()
    finally:
        clock.close()


def test_a_later_timer_set_while_the_thread_sleeps_still_fires_after_the_earlier() -> None:
    clock = SystemClock()
    fired: list[str] = []
    done = threading.Event()

    def later() -> None:
        fired.append("later")
        done.set()

    try:
        start = clock.now_ms()
        clock.call_at(start + 30, lambda: fired.append("earlier"))
        _wait_until_asleep(clock)
        clock.call_at(start + 60, later)  # the thread is not woken for it
        assert done.wait(WAIT_S)
        assert fired == ["earlier", "later"] and clock.now_ms() >= start + 60
    finally:
        clock.close()


def test_a_cancelled_system_timer_never_fires() -> None:
    clock = SystemClock()
    cancelled = threading.Event()
    later = threading.Event()
    try:
        timer = clock.call_later(10, cancelled.set)
        timer.cancel()
        clock.call_later(30, later.set)
        assert later.wait(WAIT_S)  # the cancelled one was due first
        assert not cancelled.is_set()
    finally:
        clock.close()


def test_a_failing_callback_does_not_stop_the_timer_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = SystemClock()
    after = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    try:
        with caplog.at_level(logging.ERROR, logger="actors.clock"):
            clock.call_later(0, boom)
            clock.call_later(20, after.set)
            assert after.wait(WAIT_S)
        assert any("timer callback failed" in r.getMessage() for r in caplog.records)
    finally:
        clock.close()


def test_a_closed_system_clock_runs_no_more_timers() -> None:
    clock = SystemClock()
    first = threading.Event()
    clock.call_later(0, first.set)
    assert first.wait(WAIT_S)
    clock.close()
    second = threading.Event()
    clock.call_later(0, second.set)
    assert not second.wait(0.2)  # a bounded wait for something that must not happen


# -- RedisSyncedClock -----------------------------------------------------------------------


def server_ms(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


def time_sample(before_s: float, rtt_ms: float, read_at: float, offset_ms: float) -> TimeSample:
    """A TIME reply from a server whose clock is ``offset_ms`` ahead, read ``read_at`` (0 to 1) of
    the way through a round trip of ``rtt_ms`` that started at ``before_s``."""
    read_us = round(((before_s * 1000 + rtt_ms * read_at) + offset_ms) * 1000)
    return TimeSample(before_s, read_us // 1_000_000, read_us % 1_000_000, before_s + rtt_ms / 1000)


# A bound on float and whole-microsecond rounding of the samples, in ms.
ROUNDING_MS = 0.002


@given(
    offset_ms=st.floats(-10_000, 10_000),
    trips=st.lists(st.tuples(st.floats(0.01, 50), st.floats(0, 1)), min_size=1, max_size=5),
)
def test_a_synced_offset_is_never_ahead_of_the_server(
    offset_ms: float, trips: list[tuple[float, float]]
) -> None:
    # Wherever in its round trip the server read its clock, the kept offset is behind the true
    # one (a job carried by it is late, never early), and by at most the shortest round trip.
    samples = [
        time_sample(1_700_000_000.0 + n, rtt_ms, read_at, offset_ms)
        for n, (rtt_ms, read_at) in enumerate(trips)
    ]
    rtt_ms, measured_ms = best_offset(samples)
    assert measured_ms <= offset_ms + ROUNDING_MS
    assert measured_ms >= offset_ms - min(rtt for rtt, _ in trips) - ROUNDING_MS
    assert rtt_ms in [pytest.approx(rtt, abs=ROUNDING_MS) for rtt, _ in trips]


def test_a_reply_read_late_in_its_round_trip_does_not_put_the_clock_ahead() -> None:
    # A request that waited 4 ms for a busy server, then came straight back: the midpoint would
    # put this clock 2 ms ahead of the server's, and start jobs 2 ms early.
    rtt_ms, measured_ms = best_offset([time_sample(1_700_000_000.0, 4.0, 1.0, 0.0)])
    assert rtt_ms == pytest.approx(4.0, abs=ROUNDING_MS)
    assert measured_ms == pytest.approx(0.0, abs=ROUNDING_MS)


def test_synced_clock_offset_is_behind_by_at_most_a_round_trip_on_loopback(
    redis_client: redis.Redis,
) -> None:
    clock = RedisSyncedClock(redis_client)
    try:
        # Same host, same clock: the true offset is 0, so what is measured is the error, which
        # is never ahead of the server and at most the kept sample's round trip behind it.
        assert clock.last_rtt_ms > 0
        assert -clock.last_rtt_ms - ROUNDING_MS <= clock.offset_ms <= ROUNDING_MS, (
            clock.offset_ms,
            clock.last_rtt_ms,
        )
        assert abs(clock.offset_ms) < 50  # and that is small on loopback
        before = server_ms(redis_client)
        mine = clock.now_ms()
        after = server_ms(redis_client)
        assert before - 2 <= mine <= after + 2
    finally:
        clock.close()


def test_a_synced_clock_keeps_its_time_and_timers_when_the_wall_clock_steps(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An NTP step or `date -s` on a worker's host: the server's time has not moved.
    clock = RedisSyncedClock(redis_client)
    try:
        real_time = time.time
        fired = threading.Event()
        for step_s in (60, -60):
            monkeypatch.setattr(time, "time", lambda step_s=step_s: real_time() + step_s)
            assert abs(clock.now_ms() - server_ms(redis_client)) < 1_000
            clock.call_later(300, fired.set)
            assert not fired.wait(0.1)  # a step forward fires no timer early
            assert fired.wait(WAIT_S)  # and a step back holds none up
            fired.clear()
    finally:
        clock.close()


def test_synced_clock_is_a_clock(redis_client: redis.Redis) -> None:
    clocks: list[Clock] = [FakeClock(), SystemClock(), RedisSyncedClock(redis_client)]
    for clock in clocks:
        assert isinstance(clock.now_ms(), int)
        clock.close()


class CountingClock(RedisSyncedClock):
    """Counts syncs and failures, and can hang a sync as a slow network would (real Redis)."""

    def __init__(self, client: redis.Redis, refresh_ms: int) -> None:
        self.syncs = 0
        self.synced = threading.Event()
        self.failed = threading.Event()
        self.hang = threading.Event()
        self.hanging = threading.Event()
        self.release = threading.Event()
        super().__init__(client, refresh_ms)

    def sync(self) -> float:
        if self.hang.is_set():
            self.hanging.set()
            self.release.wait(WAIT_S)
        try:
            return super().sync()
        except redis.RedisError:
            self.failed.set()
            raise
        finally:
            self.syncs += 1
            if self.syncs >= 3:
                self.synced.set()


def test_synced_clock_refreshes_its_offset(redis_client: redis.Redis) -> None:
    clock = CountingClock(redis_client, refresh_ms=20)
    try:
        assert clock.synced.wait(WAIT_S)
    finally:
        clock.close()


def test_a_slow_refresh_does_not_hold_up_the_timers(redis_client: redis.Redis) -> None:
    # Timers drive every actor's ticks; a refresh waiting on the network must not delay them.
    clock = CountingClock(redis_client, refresh_ms=20)
    fired = threading.Event()
    try:
        clock.hang.set()
        assert clock.hanging.wait(WAIT_S)
        clock.call_later(10, fired.set)
        assert fired.wait(WAIT_S / 2)  # well before the hanging refresh gives up (WAIT_S)
    finally:
        clock.release.set()
        clock.close()


def test_synced_clock_keeps_its_offset_when_redis_goes_away(
    redis_factory: Callable[..., RedisProcess], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_factory()
    # No client-side retries, so each failed refresh is quick.
    client = server.client(socket_timeout=1, retry=Retry(NoBackoff(), 0))
    clock = CountingClock(client, refresh_ms=20)
    try:
        offset = clock.offset_ms
        with caplog.at_level(logging.WARNING, logger="actors.clock"):
            server.kill()
            assert clock.failed.wait(WAIT_S)
            clock.synced.clear()
            clock.syncs = 0
            assert clock.synced.wait(WAIT_S)  # it goes on trying
        assert clock.offset_ms == offset
        assert any("clock sync with Redis failed" in r.getMessage() for r in caplog.records)
    finally:
        clock.close()
        client.close()
