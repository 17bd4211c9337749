"""What every redelay actor shares: a name, a supervisor to tell when it dies, and timers.

Pykka's failure rules: an exception in a `tell` handler stops the actor and calls
``on_failure`` (not ``on_stop``); an exception in ``on_start`` stops it without calling either.
Both paths tell the watchdog ActorDied, and the watchdog builds the actor's unit again.
Expected trouble (Redis going away) is caught inside the handlers and retried with backoff, so
only bugs kill an actor.
"""

from __future__ import annotations

import contextlib
import logging
import queue
from types import TracebackType
from typing import Any

import pykka

from actors.clock import Clock, Timer
from actors.runtime.messages import ActorDied

log = logging.getLogger("actors")


class RedelayActor(pykka.ThreadingActor):
    def __init__(self, name: str, clock: Clock, supervisor: pykka.ActorRef[Any] | None) -> None:
        super().__init__()
        self.name = name
        self.clock = clock
        self.supervisor = supervisor
        self._timers: list[Timer] = []

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        """The mailbox: ``queue.SimpleQueue`` (written in C) instead of Pykka's ``queue.Queue``,
        whose put and get run a Condition in Python. Pykka asks an inbox for put, get and empty
        only (its ``ActorInbox`` protocol), and every job crosses two or three mailboxes."""
        return queue.SimpleQueue()

    def tell_later(self, delay_ms: int, message: Any) -> Timer:
        """Sends this actor ``message`` after ``delay_ms`` on the clock (fake or real)."""
        return self.tell_at(self.clock.now_ms() + delay_ms, message)

    def tell_at(self, at_ms: int, message: Any) -> Timer:
        ref = self.actor_ref
        timer = self.clock.call_at(at_ms, lambda: _tell_if_alive(ref, message))
        # Only the pending ones are kept: a timer that ran stays out of the list, or an actor
        # that re-arms one each round (the pool's running check, ten a second while a handler
        # runs) would keep every timer it ever set and scan them all at each new one.
        self._timers = [t for t in self._timers if t.pending]
        self._timers.append(timer)
        return timer

    def on_start(self) -> None:
        """Runs ``started()`` on the actor's thread; a failure there is reported like one in a
        tell, because Pykka calls no ``on_failure`` for it."""
        try:
            self.started()
        except Exception as exc:
            self._cancel_timers()
            self._report_death(exc)
            raise

    def started(self) -> None:
        """Subclasses start here (on the actor's thread) instead of ``on_start``."""

    def on_stop(self) -> None:
        self._cancel_timers()

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._cancel_timers()
        self._report_death(exception_value)

    def _report_death(self, exc: BaseException | None) -> None:
        log.error("actor %s died: %r", self.name, exc)
        if self.supervisor is not None:
            urn = self.actor_ref.actor_urn
            _tell_if_alive(self.supervisor, ActorDied(self.name, urn, repr(exc)))

    def _cancel_timers(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()


def _tell_if_alive(ref: pykka.ActorRef[Any], message: Any) -> None:
    # A timer may outlive its actor; the restarted actor sets its own.
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)


def ask(ref: pykka.ActorRef[Any], message: Any, timeout: float) -> Any:
    """A blocking ask, for the outside world only (facade, shutdown, tests)."""
    return ref.ask(message, block=True, timeout=timeout)
