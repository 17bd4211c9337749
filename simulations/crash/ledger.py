"""The external ledger: what the producer added and cancelled, what handlers ran, what faults fired.

It lives in SQLite, outside Redis, so a Redis that loses a job cannot also lose the record that the
job was added. Several processes write to one ledger at once (the chaos workers): WAL mode lets
them, a committed row survives its writer being SIGKILLed, and the ``seq`` columns give one global
order of what happened across processes (SQLite serializes writers).

Rows, in the words of the checkers:

- ``jobs``: a job the producer's ``add`` returned for (so it is owed a delivery), with its due time;
- ``cancels``: a ``cancel`` call and what it answered (``removed``, ``requested``, ``missing``);
- ``runs``: one handler call, written as it starts (token, attempt, due, and where it can be read
  the server's time then, ``server_ms``: the chaos workers read Redis TIME, which no stepped
  worker clock can move) and completed when it returns (``ok`` or ``error``); a run that never
  completes had its worker crash under it;
- ``faults``: each injected fault, its kind and when;
- ``clocks``: how each worker's clock was synced to Redis (offset, round trip), which bounds how
  far two processes can disagree about whether a job is due.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

Key = tuple[str, str]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    topic TEXT NOT NULL, id TEXT NOT NULL, due_ms INTEGER NOT NULL, added_ms INTEGER NOT NULL,
    PRIMARY KEY (topic, id));
CREATE TABLE IF NOT EXISTS cancels (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, id TEXT NOT NULL,
    at_ms INTEGER NOT NULL, result TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, id TEXT NOT NULL,
    token TEXT NOT NULL, attempt INTEGER NOT NULL, due_ms INTEGER NOT NULL,
    started_ms INTEGER NOT NULL, worker TEXT NOT NULL, outcome TEXT, ended_ms INTEGER,
    server_ms INTEGER);
CREATE TABLE IF NOT EXISTS clocks (
    worker TEXT NOT NULL, at_ms INTEGER NOT NULL, offset_ms REAL NOT NULL, rtt_ms REAL NOT NULL);
CREATE TABLE IF NOT EXISTS faults (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
    detail TEXT NOT NULL);
"""

# How long a writer waits for another process's write lock before giving up (ms).
_BUSY_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class JobRow:
    topic: str
    id: str
    due_ms: int
    added_ms: int

    @property
    def key(self) -> Key:
        return (self.topic, self.id)


@dataclass(frozen=True, slots=True)
class CancelRow:
    seq: int
    topic: str
    id: str
    at_ms: int
    result: str

    @property
    def key(self) -> Key:
        return (self.topic, self.id)


@dataclass(frozen=True, slots=True)
class RunRow:
    seq: int
    topic: str
    id: str
    token: str
    attempt: int
    due_ms: int
    started_ms: int
    worker: str
    outcome: str | None = None  # "ok", "error", or None when the run never returned
    ended_ms: int | None = None
    server_ms: int | None = None  # Redis's TIME as the run started (None: not read)

    @property
    def start_ms(self) -> int:
        """When the run started by the server's clock where it was read, else by the worker's."""
        return self.started_ms if self.server_ms is None else self.server_ms

    @property
    def key(self) -> Key:
        return (self.topic, self.id)


@dataclass(frozen=True, slots=True)
class FaultRow:
    seq: int
    at_ms: int
    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class ClockRow:
    worker: str
    at_ms: int
    offset_ms: float
    rtt_ms: float


@dataclass(frozen=True, slots=True)
class LedgerData:
    jobs: dict[Key, JobRow]
    cancels: list[CancelRow]
    runs: list[RunRow]
    faults: list[FaultRow]
    clocks: list[ClockRow] = field(default_factory=list)


class Ledger:
    """One connection per process, shared by its threads under a lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            str(self.path), timeout=_BUSY_TIMEOUT_MS / 1000, check_same_thread=False
        )
        self._db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        self._db.execute("PRAGMA journal_mode = WAL")
        # NORMAL: a commit is in the WAL before it returns, which survives the process dying
        # (only an OS crash could lose it, and the simulations do not crash the OS).
        self._db.execute("PRAGMA synchronous = NORMAL")
        with self._lock, self._db:
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writes -----------------------------------------------------------------------------

    def add_jobs(self, rows: list[JobRow]) -> None:
        with self._lock, self._db:
            self._db.executemany(
                "INSERT INTO jobs (topic, id, due_ms, added_ms) VALUES (?, ?, ?, ?)",
                [(r.topic, r.id, r.due_ms, r.added_ms) for r in rows],
            )

    def cancel(self, topic: str, job_id: str, at_ms: int, result: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO cancels (topic, id, at_ms, result) VALUES (?, ?, ?, ?)",
                (topic, job_id, at_ms, result),
            )

    def run_started(
        self,
        topic: str,
        job_id: str,
        token: str,
        attempt: int,
        due_ms: int,
        started_ms: int,
        worker: str,
        server_ms: int | None = None,
    ) -> int:
        """Returns the run's seq, to complete it with run_ended."""
        with self._lock, self._db:
            cursor = self._db.execute(
                "INSERT INTO runs (topic, id, token, attempt, due_ms, started_ms, worker, "
                "server_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (topic, job_id, token, attempt, due_ms, started_ms, worker, server_ms),
            )
            seq = cursor.lastrowid
        assert seq is not None
        return seq

    def run_ended(self, seq: int, outcome: str, ended_ms: int) -> None:
        with self._lock, self._db:
            self._db.execute(
                "UPDATE runs SET outcome = ?, ended_ms = ? WHERE seq = ?", (outcome, ended_ms, seq)
            )

    def fault(self, at_ms: int, kind: str, detail: str = "") -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO faults (at_ms, kind, detail) VALUES (?, ?, ?)", (at_ms, kind, detail)
            )

    def clock(self, worker: str, at_ms: int, offset_ms: float, rtt_ms: float) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO clocks (worker, at_ms, offset_ms, rtt_ms) VALUES (?, ?, ?, ?)",
                (worker, at_ms, offset_ms, rtt_ms),
            )

    # -- reads ------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Cheap totals for the progress line."""
        with self._lock:
            row = self._db.execute(
                "SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM runs), "
                "(SELECT COUNT(*) FROM runs WHERE outcome = 'ok'), (SELECT COUNT(*) FROM faults)"
            ).fetchone()
        return {"jobs": row[0], "runs": row[1], "runs_ok": row[2], "faults": row[3]}

    def keys_succeeded(self) -> set[Key]:
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT topic, id FROM runs WHERE outcome = 'ok'")
            return {(t, i) for t, i in rows}

    def read(self) -> LedgerData:
        with self._lock:
            jobs = {
                (t, i): JobRow(t, i, d, a)
                for t, i, d, a in self._db.execute("SELECT topic, id, due_ms, added_ms FROM jobs")
            }
            cancels = [
                CancelRow(*row)
                for row in self._db.execute(
                    "SELECT seq, topic, id, at_ms, result FROM cancels ORDER BY seq"
                )
            ]
            runs = [
                RunRow(*row)
                for row in self._db.execute(
                    "SELECT seq, topic, id, token, attempt, due_ms, started_ms, worker, outcome, "
                    "ended_ms, server_ms FROM runs ORDER BY seq"
                )
            ]
            faults = [
                FaultRow(*row)
                for row in self._db.execute(
                    "SELECT seq, at_ms, kind, detail FROM faults ORDER BY seq"
                )
            ]
            clocks = [
                ClockRow(*row)
                for row in self._db.execute("SELECT worker, at_ms, offset_ms, rtt_ms FROM clocks")
            ]
        return LedgerData(jobs, cancels, runs, faults, clocks)
