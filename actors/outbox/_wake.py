"""Waiting for the next commit that wrote outbox rows: PostgreSQL's LISTEN/NOTIFY when the
engine's driver is psycopg 3, else a plain poll interval.

A NOTIFY is delivered at the writer's commit, on a connection of its own here (autocommit, kept
out of the engine's pool). Notifications are a wake-up only: the relay reads the table after
each, so one lost while the connection was down costs at most one poll interval.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from sqlalchemy import Engine

log = logging.getLogger("actors.outbox")

# A wait is cut into slices this long so stop() is seen soon without a cross-thread interrupt.
_SLICE_S = 0.2
# A LISTEN that failed (the database is down) is tried again this often, meanwhile the relay polls.
_RETRY_S = 5.0


class CommitWaiter:
    def __init__(self, engine: Engine | None, channel: str) -> None:
        self._engine, self._channel = engine, channel
        self._conn: Any = None
        self.listening = False
        self._next_try = 0.0  # monotonic time of the next LISTEN attempt after a failure
        self._warned = False

    @staticmethod
    def for_engine(engine: Engine, channel: str) -> CommitWaiter:
        listens = engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
        waiter = CommitWaiter(engine if listens else None, channel)
        waiter._listen()
        return waiter

    def _listen(self) -> None:
        if self._engine is None or self._conn is not None:
            return
        now = time.monotonic()
        if now < self._next_try:
            return
        self._next_try = now + _RETRY_S
        try:
            raw = self._engine.raw_connection()
            conn = raw.driver_connection
            raw.detach()  # held for the relay's life, never back into the pool
            if conn is None:
                raise RuntimeError("the engine's connection has no driver connection")
            conn.rollback()
            conn.autocommit = True
            conn.execute(f'LISTEN "{self._channel}"')
            self._conn, self.listening = conn, True
        except Exception as exc:  # the database is down: poll until it is back
            if not self._warned:
                log.warning("outbox relay cannot LISTEN (%r); polling until it can", exc)
            self._warned = True
            return
        self._warned = False

    def wait(self, timeout_s: float, stop: threading.Event) -> bool:
        """Until a commit notified, ``timeout_s`` passed or ``stop`` is set; True if notified."""
        deadline = time.monotonic() + timeout_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._conn is None:
                stop.wait(min(left, _SLICE_S))
                self._listen()
                continue
            try:
                # The generator holds the connection until it ends: drained after it, not in it.
                notified = False
                for _ in self._conn.notifies(timeout=min(left, _SLICE_S), stop_after=1):
                    notified = True
                if notified:
                    self._drain_pending()
                    return True
            except Exception as exc:
                log.warning("outbox relay lost its LISTEN connection (%r); reconnecting", exc)
                self.close()
        return False

    def _drain_pending(self) -> None:
        """Notifications already received: one pass reads every row they announced."""
        with contextlib.suppress(Exception):
            # Not timeout=0: psycopg reads a zero timeout as none and would wait for ever.
            for _ in self._conn.notifies(timeout=0.001):
                pass

    def interrupt(self) -> None:
        """Nothing to do: the waiting thread sees ``stop`` within one slice."""

    def close(self) -> None:
        conn, self._conn, self.listening = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
