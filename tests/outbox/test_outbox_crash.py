"""A relay killed at every point between reading rows, adding their jobs to Redis and deleting the
rows, and an application killed before its commit: afterwards exactly one job exists (or ran) per
committed add, and none per add that was not committed.

The relay runs as ``redelay outbox relay --once`` in a child process that exits at the point
named by REDELAY_OUTBOX_CRASH_AT, as a kill would stop it (no rollback sent, no cleanup). Between
the crash and the next relay every job in Redis is run and acked, so a write applied twice would
show as a second job, not hide inside the first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from actors import outbox
from actors.outbox.relay import CRASH_ENV, CRASH_POINTS, Relay, status
from actors.producing import audit_events
from actors.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = [f"o-{n}" for n in range(20)]
ROLLED_BACK = [f"rb-{n}" for n in range(5)]
KILLED_APP = [f"app-{n}" for n in range(5)]

# An application that dies inside its transaction, after its outbox writes, before its commit.
APP_KILLED_BEFORE_COMMIT = """
import os, sys
import sqlalchemy as sa
from sqlalchemy.orm import Session
from actors import outbox
engine = sa.create_engine(sys.argv[1])
session = Session(engine)
session.begin()
for job_id in sys.argv[2:]:
    outbox.add(session, "orders", job_id)
session.flush()
os._exit(9)
"""


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def relay_child(db_url: str, redis_url: str, crash_at: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "actors.cli", "outbox", "relay", "--once", "--batch", "7",
        "--db", db_url, "--redis", redis_url, "--namespace", "test",
    ]  # fmt: skip
    env = child_env() | {CRASH_ENV: crash_at}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def run_and_ack_everything(store: Store) -> set[str]:
    """What a worker would do meanwhile: every job in Redis runs and is acked (gone)."""
    acked: set[str] = set()
    while leases := store.lease("orders", 100):
        for lease in leases:
            store.ack("orders", lease.id, lease.token)
            acked.add(lease.id)
    return acked


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_a_relay_killed_anywhere_loses_no_job_and_makes_none_twice(
    db_url: str, engine: sa.Engine, store: Store, redis_server: object, crash_at: str
) -> None:
    with Session(engine) as session, session.begin():
        for job_id in COMMITTED:
            outbox.add(session, "orders", job_id)
    with Session(engine) as session:
        session.begin()
        for job_id in ROLLED_BACK:
            outbox.add(session, "orders", job_id)
        session.rollback()
    app = subprocess.run(
        [sys.executable, "-c", APP_KILLED_BEFORE_COMMIT, db_url, *KILLED_APP],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert app.returncode == 9, app.stderr

    crashed = relay_child(db_url, redis_server.url, crash_at)  # type: ignore[attr-defined]
    assert crashed.returncode == 77, crashed.stderr
    acked_before = run_and_ack_everything(store)
    # The killed relay's transaction was never committed: its rows are all still there.
    assert status(engine).depth == len(COMMITTED)
    if crash_at == "after_read":
        assert acked_before == set()
    else:
        assert len(acked_before) == 7  # its one pass reached Redis

    Relay(engine, store).drain()
    acked_after = run_and_ack_everything(store)

    assert acked_before.isdisjoint(acked_after)  # no job ran twice
    assert acked_before | acked_after == set(COMMITTED)  # none was lost
    for job_id in COMMITTED:
        events = audit_events(store.job_entries("orders", job_id), "orders", job_id)
        assert [e.event for e in events].count("added") == 1, job_id
    assert status(engine).depth == 0


def test_the_crash_points_are_reached(db_url: str, store: Store, redis_server: object) -> None:
    """Without rows no pass runs, so no crash point is reached: the child exits normally."""
    result = relay_child(db_url, redis_server.url, "after_read")  # type: ignore[attr-defined]
    assert result.returncode == 0, result.stderr
