"""An actor's timers: it keeps the pending ones (to cancel them when it stops), not the ones run.

The pool re-arms its running check ten times a second while a handler runs; before timers that ran
were dropped, a busy pool kept every one it ever set (about 864,000 a day per topic) and scanned
them all each time it set another.
"""

from __future__ import annotations

from typing import Any

from actors.clock import FakeClock
from actors.runtime._actor import RedelayActor


class Tick:
    """Re-arm: the message a Ticker sends itself."""


class CountTimers:
    """Answered with the number of timers the actor keeps and the ticks it has had."""


class Ticker(RedelayActor):
    """Sets a new timer at every tick, as the pool's running check and the watchdog do."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__("ticker", clock, None)
        self.ticks = 0

    def started(self) -> None:
        self.tell_later(10, Tick())

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Tick):
            self.ticks += 1
            self.tell_later(10, Tick())
        elif isinstance(message, CountTimers):
            return len(self._timers), self.ticks
        return None


def test_an_actor_that_re_arms_a_timer_keeps_only_the_pending_one() -> None:
    clock = FakeClock(start_ms=0)
    ref = Ticker.start(clock)
    try:
        ref.ask(CountTimers(), timeout=5)  # started() has armed the first timer
        for _ in range(500):
            clock.advance(10)  # runs the timer: its Tick is in the mailbox before the ask
            ref.ask(CountTimers(), timeout=5)
        kept, ticks = ref.ask(CountTimers(), timeout=5)
        assert ticks == 500
        assert kept == 1  # the timer for the next tick; the 500 that ran are gone
    finally:
        ref.stop()
    assert clock.pending() == 0  # the stop cancelled the one it kept
