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
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def relay_child(
    db_url: str, redis_url: str, crash_at: str, *, batch: int = 7
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "actors.cli", "outbox", "relay", "--once", "--batch", str(batch),
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


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_seeded_mix_of_adds_and_cancels_ends_as_committed_despite_a_relay_crash(
    db_url: str, engine: sa.Engine, store: Store, redis_server: Any, seed: int
) -> None:
    """Transactions of adds and cancels over a few ids, a quarter rolled back; a relay killed at
    a point and batch size the seed picks; then a relay that finishes: the jobs in Redis are
    those whose last committed write was an add."""
    rng = random.Random(seed)
    ids = [f"s-{n}" for n in range(10)]
    alive: dict[str, bool] = {}  # what the committed writes, in commit order, leave

    def transactions() -> None:
        for _ in range(rng.randint(4, 8)):
            writes = [(rng.choice(("add", "add", "cancel")), rng.choice(ids)) for _ in range(3)]
            commit = rng.random() < 0.75
            with Session(engine) as session:
                session.begin()
                for kind, job_id in writes:
                    if kind == "add":
                        outbox.add(session, "orders", job_id, delay=3_600)
                    else:
                        outbox.cancel(session, "orders", job_id)
                if commit:
                    session.commit()
                else:
                    session.rollback()
            if commit:
                for kind, job_id in writes:
                    alive[job_id] = kind == "add"

    # Relayed between phases, so later cancels and adds meet jobs already in Redis.
    transactions()
    Relay(engine, store).drain()
    transactions()
    crash_at, batch = rng.choice(CRASH_POINTS), rng.choice((1, 3, 7))
    crashed = relay_child(db_url, redis_server.url, crash_at, batch=batch)
    assert crashed.returncode == 77, f"seed {seed}: {crashed.stderr}"
    transactions()
    Relay(engine, store).drain()
    present = {job_id for job_id in ids if store.get("orders", job_id) is not None}
    expected = {job_id for job_id, exists in alive.items() if exists}
    assert present == expected, f"seed {seed}: crash {crash_at}, batch {batch}"
    assert status(engine).depth == 0
