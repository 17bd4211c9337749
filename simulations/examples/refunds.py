"""A user's refund handlers and the invariant they must keep: a refund is never sent twice.

    redelay simulate --ci --app refunds:register --check refunds:check            # exits 18
    redelay simulate --ci --app refunds:register_idempotent --check refunds:check # passes

(from a checkout: ``python -m simulations.crash.deterministic ... --app
simulations.examples.refunds:register --check simulations.examples.refunds:check``).

Delivery is at least once: a worker that dies after the handler returned, or a handler that
outlives its lease, means the job runs again. ``register`` sends the refund on every run, so
the simulator finds a refund sent twice and ``check`` fails the run. ``register_idempotent``
records the refund under its id in the same transaction that "sends" it, so a second run finds
it sent and does nothing.

The retry schedule is short so that process chaos drains in seconds: the drain waits for every
job, and so for the longest schedule (docs/simulations.md).

The "payment provider" is a table in an SQLite file in ``REDELAY_SIM_DIR``, the directory the
simulator gives each run for the handlers' records (the chaos workers are other processes, so a
dict in memory would not do). This file imports only ``actors``: copy it next to your code.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from actors import DelayQueue, Job

TOPIC = "payment.refund"


def _provider() -> sqlite3.Connection:
    directory = os.environ.get("REDELAY_SIM_DIR")
    if not directory:
        raise RuntimeError("REDELAY_SIM_DIR is not set: run this app under `redelay simulate`")
    # A connection per call: handlers run on many threads, and in several processes.
    db = sqlite3.connect(Path(directory) / "refunds.sqlite", timeout=60, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS sent (n INTEGER PRIMARY KEY, refund TEXT, job TEXT)")
    return db


def _refund_of(job: Job) -> str:
    return f"refund-{job.body['id']}"


def register(queue: DelayQueue) -> None:
    """The bug: every run sends the refund, including a second run after a crash."""

    @queue.handler(TOPIC, concurrency=4, timeout=10, retry=[1, 5, 30])
    def send_refund(job: Job) -> str:
        db = _provider()
        try:
            db.execute(
                "INSERT INTO sent (refund, job) VALUES (?, ?)",
                (_refund_of(job), f"{job.topic}/{job.id}"),
            )
        finally:
            db.close()
        return "sent"


def register_idempotent(queue: DelayQueue) -> None:
    """The fix: look for the refund and send it in one transaction, so it is sent once."""

    @queue.handler(TOPIC, concurrency=4, timeout=10, retry=[1, 5, 30])
    def send_refund(job: Job) -> str:
        db = _provider()
        try:
            db.execute("BEGIN IMMEDIATE")  # the lock: two runs cannot both find it unsent
            if db.execute("SELECT 1 FROM sent WHERE refund = ?", (_refund_of(job),)).fetchone():
                db.execute("COMMIT")
                return "already sent"
            db.execute(
                "INSERT INTO sent (refund, job) VALUES (?, ?)",
                (_refund_of(job), f"{job.topic}/{job.id}"),
            )
            db.execute("COMMIT")
        finally:
            db.close()
        return "sent"


def check() -> None:
    """After the run: no refund was sent more than once. Names the jobs, so the simulator can
    show their runs and the faults around them."""
    db = _provider()
    try:
        twice = db.execute(
            "SELECT refund, job, count(*) FROM sent GROUP BY refund HAVING count(*) > 1 "
            "ORDER BY refund"
        ).fetchall()
    finally:
        db.close()
    if twice:
        refund, job, times = twice[0]
        raise AssertionError(
            f"{len(twice)} refunds sent more than once; first: {refund} sent {times} times "
            f"(job {job})"
        )
