"""The relay: moves committed outbox rows into Redis, then deletes them.

One pass, in one database transaction: read up to ``batch`` of the oldest rows (PostgreSQL:
``FOR UPDATE SKIP LOCKED``, so relays running at once take different rows, and a writer of a row
being relayed waits for the pass), apply them to Redis (actors/outbox/_apply.py: idempotent per
write), delete the rows whose write was applied, commit. A relay that dies anywhere in the pass
leaves its rows to the next one, which finds the writes it had applied and only deletes them.

``run`` repeats passes while they find a full batch, then waits for a commit (PostgreSQL
LISTEN/NOTIFY through psycopg 3), or ``poll_s`` at most (any other database or driver, a lost
notification). Which thread runs what: ``relay_once`` runs on the caller's thread; ``run`` blocks
its thread until ``stop()``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, func, select, text, tuple_

from actors.outbox._apply import apply_rows
from actors.outbox._rows import OutboxRow
from actors.outbox._table import NOTIFY_CHANNEL, db_now_ms, table
from actors.outbox._wake import CommitWaiter
from actors.storage.store import Store

log = logging.getLogger("actors.outbox")

DEFAULT_BATCH = 1_000
BATCH_MAX = 5_000
DEFAULT_POLL_S = 1.0
# A row older than this when applied is late enough to say so (once, until the relay catches up).
DEFAULT_LAG_WARN_MS = 5_000

# Fault points for the crash tests (tests/outbox/test_outbox_crash.py): the process exits at once
# at the named point of its first pass that has rows, as a kill would stop it.
CRASH_ENV = "REDELAY_OUTBOX_CRASH_AT"
CRASH_POINTS = ("after_read", "after_redis", "after_delete")


@dataclass(frozen=True, slots=True)
class PassReport:
    """One pass: rows read, applied now, found applied before, deleted; the oldest row's age
    when it was applied (ms, the database's clock for its wait plus the pass's own time)."""

    read: int
    applied: int
    already: int
    deleted: int
    lag_ms: int


@dataclass(frozen=True, slots=True)
class OutboxStatus:
    """The outbox as `redelay stats` shows it: rows waiting, and the oldest one's age (ms)."""

    depth: int
    oldest_ms: int | None


def status(engine: Engine) -> OutboxStatus:
    with engine.connect() as conn:
        depth, oldest_written_ms, now_ms = conn.execute(
            select(func.count(), func.min(table.c.written_ms), db_now_ms())
        ).one()
    oldest = None if oldest_written_ms is None else max(0, now_ms - oldest_written_ms)
    return OutboxStatus(int(depth), oldest)


# PostgreSQL: the rows as three arrays, so a batch is three parameters, not three per row (whose
# conversion cost the relay more than the statement), and the primary key finds each row.
_PG_DELETE = text(
    f"DELETE FROM {table.name} AS o USING unnest(CAST(:topics AS text[]), "
    "CAST(:ids AS text[]), CAST(:tokens AS text[])) AS d(topic, job_id, token)"
    " WHERE o.topic = d.topic AND o.job_id = d.job_id AND o.token = d.token"
)


def _delete(dialect: str, rows: list[OutboxRow]) -> tuple[Any, dict[str, Any]]:
    """The rows whose write was applied: a row rewritten since it was read has another token."""
    if dialect == "postgresql":
        arrays = {
            "topics": [row.topic for row in rows],
            "ids": [row.job_id for row in rows],
            "tokens": [row.token for row in rows],
        }
        return _PG_DELETE, arrays
    keys = [(row.topic, row.job_id, row.token) for row in rows]
    return delete(table).where(tuple_(table.c.topic, table.c.job_id, table.c.token).in_(keys)), {}


class Relay:
    def __init__(
        self,
        engine: Engine,
        store: Store,
        *,
        batch: int = DEFAULT_BATCH,
        poll_s: float = DEFAULT_POLL_S,
        lag_warn_ms: int = DEFAULT_LAG_WARN_MS,
    ) -> None:
        if not 1 <= batch <= BATCH_MAX:
            raise ValueError(f"batch: {batch} is not from 1 to {BATCH_MAX}")
        if not 0 < poll_s <= 3600:
            raise ValueError(f"poll_s: {poll_s} is not within (0, 3600] seconds")
        self.engine, self.store = engine, store
        self.batch, self.poll_s, self.lag_warn_ms = batch, poll_s, lag_warn_ms
        self._stop = threading.Event()
        # Set once run() listens (or knows it will poll): a commit after it wakes the relay.
        self.waiting = threading.Event()
        self._waiter: CommitWaiter | None = None
        self._late = False
        self._crash_at = os.environ.get(CRASH_ENV) or None
        # Totals since start, read by stats and metrics (written by the relaying thread only).
        self.passes = self.applied = self.already = self.deleted = 0
        self.last_lag_ms = 0

    def relay_once(self) -> PassReport:
        """One pass (see the module's docstring)."""
        started = time.monotonic()
        with self.engine.connect() as conn, conn.begin():
            if conn.dialect.name == "postgresql":
                # The pass's commit only deletes rows whose writes are in Redis: lost in a
                # database crash, they are read again and found applied (the markers), so the
                # commit need not wait for the disk.
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            query = (
                select(table, db_now_ms().label("read_at_db_ms"))
                .order_by(table.c.written_ms)
                .limit(self.batch)
                .with_for_update(skip_locked=True)
            )
            rows = [OutboxRow(**row._mapping) for row in conn.execute(query)]
            if not rows:
                return PassReport(0, 0, 0, 0, 0)
            self._crash("after_read")
            done = apply_rows(self.store, rows)
            self._crash("after_redis")
            deleted = conn.execute(*_delete(conn.dialect.name, rows)).rowcount
            self._crash("after_delete")
        pass_ms = round((time.monotonic() - started) * 1000)
        lag_ms = max(row.age_ms for row in rows) + pass_ms
        self._note(PassReport(len(rows), done.applied, done.already, deleted, lag_ms))
        return PassReport(len(rows), done.applied, done.already, deleted, lag_ms)

    def _crash(self, point: str) -> None:
        if self._crash_at == point:
            os._exit(77)  # as a kill would: no cleanup, no rollback sent

    def _note(self, report: PassReport) -> None:
        self.passes += 1
        self.applied += report.applied
        self.already += report.already
        self.deleted += report.deleted
        self.last_lag_ms = report.lag_ms
        if report.lag_ms > self.lag_warn_ms and not self._late:
            self._late = True
            log.warning(
                "outbox relay is late: a row waited %d ms before reaching Redis (warns over "
                "%d ms); its job is due that much late",
                report.lag_ms,
                self.lag_warn_ms,
            )
        elif report.lag_ms <= self.lag_warn_ms and self._late:
            self._late = False
            log.info("outbox relay caught up: lag %d ms", report.lag_ms)

    def drain(self) -> int:
        """Passes until one finds less than a full batch; rows read in all."""
        total = 0
        while not self._stop.is_set():
            report = self.relay_once()
            total += report.read
            if report.read < self.batch:
                break
        return total

    def run(self) -> None:
        """Relays until stop(): drains, waits for a commit or ``poll_s``, again. A database or
        Redis error is logged and retried after ``poll_s``: its rows stay in the table."""
        self._waiter = CommitWaiter.for_engine(self.engine, NOTIFY_CHANNEL)
        self.waiting.set()
        try:
            while not self._stop.is_set():
                try:
                    self.drain()
                except Exception:
                    log.exception("outbox relay pass failed; retrying in %.1f s", self.poll_s)
                    self._stop.wait(self.poll_s)
                    continue
                self._waiter.wait(self.poll_s, self._stop)
        finally:
            self._waiter.close()

    def stop(self) -> None:
        """Asks ``run`` to return after its current pass (from any thread)."""
        self._stop.set()
        waiter = self._waiter
        if waiter is not None:
            waiter.interrupt()

    @property
    def listening(self) -> bool:
        """Whether run() is woken by NOTIFY (PostgreSQL through psycopg 3) rather than polling."""
        return self._waiter is not None and self._waiter.listening

    def stats(self) -> dict[str, Any]:
        return {
            "listening": self.listening,
            "passes": self.passes,
            "applied": self.applied,
            "already_applied": self.already,
            "deleted": self.deleted,
            "lag_ms": self.last_lag_ms,
            "late": self._late,
        }
