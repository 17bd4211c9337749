"""The outbox relay on SQLite and PostgreSQL, against a real Redis: committed writes become jobs
(and only those), in commit order per job, once each, at the due time fixed at the write."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from _wait import WAIT_S, wait_until
from sqlalchemy.orm import Session

from actors import outbox
from actors.clock import FakeClock, RedisSyncedClock
from actors.outbox._apply import apply_rows
from actors.outbox._rows import OutboxRow
from actors.outbox._table import db_now_ms
from actors.outbox.actor import start_relay
from actors.outbox.relay import Relay, status
from actors.producing import AuditEvent, audit_events
from actors.storage.store import Store


def write(engine: sa.Engine, *calls: tuple[str, str, dict[str, Any]]) -> None:
    """One committed transaction of outbox writes: ("add" | "cancel", id, add's options)."""
    with Session(engine) as session, session.begin():
        for kind, job_id, options in calls:
            if kind == "cancel":
                outbox.cancel(session, "orders", job_id)
            else:
                outbox.add(session, "orders", job_id, **options)


def exists(store: Store, job_id: str) -> Callable[[], bool]:
    return lambda: store.get("orders", job_id) is not None


def depth(engine: sa.Engine) -> int:
    return status(engine).depth


@pytest.fixture
def relay(engine: sa.Engine, store: Store) -> Iterator[Relay]:
    made = Relay(engine, store, poll_s=0.2)
    yield made
    made.stop()


def test_a_committed_add_becomes_one_job_and_its_row_goes(
    engine: sa.Engine, store: Store, relay: Relay, fake_clock: FakeClock
) -> None:
    write(engine, ("add", "o-1", {"body": {"total": 12}, "delay": 30, "retry": [5]}))
    report = relay.relay_once()
    assert (report.read, report.applied, report.deleted) == (1, 1, 1)
    info = store.get("orders", "o-1")
    assert info is not None
    assert (info.state, info.body_bytes, info.retry_ms) == ("delayed", b'{"total":12}', (5_000,))
    # Due 30 s after the write: the row waited a little (database clock) before this pass.
    assert fake_clock.now_ms() + 30_000 - 5_000 <= info.due_ms <= fake_clock.now_ms() + 30_000
    assert depth(engine) == 0


def test_a_rolled_back_add_makes_no_job(engine: sa.Engine, store: Store, relay: Relay) -> None:
    with Session(engine) as session:
        session.begin()
        outbox.add(session, "orders", "o-1")
        session.rollback()
    write(engine, ("add", "o-2", {}))
    assert relay.relay_once().read == 1
    assert store.get("orders", "o-1") is None
    assert store.get("orders", "o-2") is not None


def test_a_late_relay_delivers_late_never_early_and_says_so(
    engine: sa.Engine,
    store: Store,
    relay: Relay,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write(engine, ("add", "o-1", {"delay": 60}))
    with engine.begin() as conn:  # the row has waited 40 s for a relay
        conn.execute(sa.update(outbox.table).values(written_ms=db_now_ms() - 40_000))
    with caplog.at_level(logging.WARNING, logger="actors.outbox"):
        report = relay.relay_once()
    assert report.lag_ms >= 40_000
    assert any("late" in record.getMessage() for record in caplog.records)
    info = store.get("orders", "o-1")
    assert info is not None
    # 60 s from the write, 40 s of which passed before the relay: 20 s from now, not 60.
    assert fake_clock.now_ms() + 20_000 - 5_000 <= info.due_ms <= fake_clock.now_ms() + 20_000


def test_a_delay_counts_on_the_database_clock_not_redis(
    engine: sa.Engine, store: Store, relay: Relay, fake_clock: FakeClock
) -> None:
    fake_clock.advance(3_600_000)  # Redis's clock an hour ahead of the database's
    write(engine, ("add", "o-1", {"delay": 10}))
    relay.relay_once()
    info = store.get("orders", "o-1")
    assert info is not None
    assert fake_clock.now_ms() + 10_000 - 5_000 <= info.due_ms <= fake_clock.now_ms() + 10_000


@pytest.mark.parametrize("relay_between", [False, True])
def test_add_then_cancel_in_two_commits_ends_cancelled(
    engine: sa.Engine, store: Store, relay: Relay, relay_between: bool
) -> None:
    write(engine, ("add", "o-1", {"delay": 30}))
    if relay_between:
        relay.relay_once()
        assert store.get("orders", "o-1") is not None
    write(engine, ("cancel", "o-1", {}))
    relay.relay_once()
    assert store.get("orders", "o-1") is None
    assert depth(engine) == 0


def test_add_then_cancel_in_one_transaction_ends_cancelled(
    engine: sa.Engine, store: Store, relay: Relay
) -> None:
    write(engine, ("add", "o-1", {"delay": 30}), ("cancel", "o-1", {}))
    relay.relay_once()
    assert store.get("orders", "o-1") is None


def test_cancel_then_add_ends_with_the_new_job(
    engine: sa.Engine, store: Store, relay: Relay
) -> None:
    write(engine, ("add", "o-1", {"delay": 30, "body": 1}))
    relay.relay_once()
    write(engine, ("cancel", "o-1", {}))
    write(engine, ("add", "o-1", {"delay": 90, "body": 2}))
    relay.relay_once()
    info = store.get("orders", "o-1")
    assert info is not None and info.body_bytes == b"2"


def test_keep_leaves_an_existing_job_and_replace_reschedules_it(
    engine: sa.Engine, store: Store, relay: Relay, fake_clock: FakeClock
) -> None:
    store.add(store.new_job("orders", "o-1", "direct", delay_ms=1_000))
    write(engine, ("add", "o-1", {"body": "kept", "delay": 500}))
    relay.relay_once()
    info = store.get("orders", "o-1")
    assert info is not None and info.body_bytes == b'"direct"'
    write(engine, ("add", "o-1", {"body": "replaced", "delay": 500, "if_exists": "replace"}))
    relay.relay_once()
    info = store.get("orders", "o-1")
    assert info is not None and info.body_bytes == b'"replaced"'
    assert info.due_ms > fake_clock.now_ms() + 400_000


def read_rows(engine: sa.Engine) -> list[OutboxRow]:
    with engine.connect() as conn:
        found = conn.execute(sa.select(outbox.table, db_now_ms().label("read_at_db_ms")))
        return [OutboxRow(**row._mapping) for row in found]


def test_a_row_applied_before_a_crash_is_not_applied_again(
    engine: sa.Engine, store: Store, relay: Relay
) -> None:
    write(engine, ("add", "o-1", {}))
    # A relay applied the row, then died before deleting it; the job ran and was acked since.
    apply_rows(store, read_rows(engine))
    (lease,) = store.lease("orders", 1)
    store.ack("orders", "o-1", lease.token)
    assert store.get("orders", "o-1") is None
    report = relay.relay_once()
    assert (report.read, report.applied, report.already, report.deleted) == (1, 0, 1, 1)
    assert store.get("orders", "o-1") is None  # no second job
    assert [e.event for e in store_history(store, "o-1")] == ["added", "leased", "acked"]


def store_history(store: Store, job_id: str) -> list[AuditEvent]:
    return audit_events(store.job_entries("orders", job_id), "orders", job_id)


def test_a_cancel_applied_before_a_crash_is_not_applied_again(
    engine: sa.Engine, store: Store, relay: Relay
) -> None:
    write(engine, ("cancel", "o-1", {}))
    apply_rows(store, read_rows(engine))
    store.add(store.new_job("orders", "o-1", "added after the cancel"))
    assert relay.relay_once().already == 1
    assert store.get("orders", "o-1") is not None


def test_status_counts_the_rows_and_the_oldest_age(engine: sa.Engine, relay: Relay) -> None:
    assert (status(engine).depth, status(engine).oldest_ms) == (0, None)
    write(engine, ("add", "o-1", {}), ("add", "o-2", {}))
    with engine.begin() as conn:
        conn.execute(sa.update(outbox.table).values(written_ms=db_now_ms() - 7_000))
    found = status(engine)
    assert found.depth == 2
    assert found.oldest_ms is not None and 7_000 <= found.oldest_ms < 12_000


def test_a_backlog_drains_in_batches(engine: sa.Engine, store: Store) -> None:
    with Session(engine) as session, session.begin():
        for n in range(250):
            outbox.add(session, "orders", f"o-{n}", delay=60)
    relay = Relay(engine, store, batch=100)
    assert relay.drain() == 250
    assert relay.passes == 3
    assert store.stats()["orders"]["delayed"] == 250
    assert depth(engine) == 0


def test_run_wakes_on_commit(engine: sa.Engine, store: Store, db_url: str) -> None:
    # PostgreSQL wakes on NOTIFY: a 30 s poll would fail the wait below. SQLite polls.
    poll_s = 30.0 if db_url.startswith("postgresql") else 0.2
    relay = Relay(engine, store, poll_s=poll_s)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    try:
        assert relay.waiting.wait(WAIT_S)  # a NOTIFY before its LISTEN would not be kept
        assert relay.listening == db_url.startswith("postgresql")
        write(engine, ("add", "o-1", {}))
        deadline = time.monotonic() + 5
        while store.get("orders", "o-1") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.get("orders", "o-1") is not None
    finally:
        relay.stop()
        thread.join(WAIT_S)
    assert not thread.is_alive()


def test_several_relays_share_a_backlog_without_overlap(
    postgres_url: str, store: Store, redis_client: object
) -> None:
    setup = sa.create_engine(postgres_url)
    with setup.begin() as conn:
        outbox.metadata.drop_all(conn)
        outbox.create(conn)
    with Session(setup) as session, session.begin():
        for n in range(3_000):
            outbox.add(session, "orders", f"o-{n}", delay=60)
    relays = [Relay(sa.create_engine(postgres_url), store, batch=100) for _ in range(3)]
    threads = [threading.Thread(target=r.drain) for r in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # SKIP LOCKED: no row was read by two relays, so none was found applied by another.
    assert sum(r.applied for r in relays) == 3_000
    assert sum(r.already for r in relays) == 0
    assert sum(1 for r in relays if r.applied) >= 2
    assert store.stats()["orders"]["delayed"] == 3_000
    assert depth(setup) == 0
    for r in relays:
        r.engine.dispose()
    setup.dispose()


def test_the_worker_actor_relays_each_commit_and_stops(
    engine: sa.Engine, store: Store, db_url: str
) -> None:
    poll_s = 30.0 if db_url.startswith("postgresql") else 0.2  # PostgreSQL: NOTIFY wakes it
    write(engine, ("add", "before", {}))  # written while nothing relayed: the first pass
    handle = start_relay(store, engine, poll_s=poll_s)
    try:
        wait_until(exists(store, "before"), "the first pass", timeout_s=5)
        for n in range(3):
            write(engine, ("add", f"o-{n}", {}))
            wait_until(exists(store, f"o-{n}"), "a relayed add", timeout_s=5)
        stats = handle.stats()
        assert stats["applied"] == 4
        assert stats["listening"] == db_url.startswith("postgresql")
    finally:
        handle.stop()
    assert not handle._thread.is_alive()
    assert not handle._ref.is_alive()


def test_a_delay_counts_from_redis_time_on_a_synced_clock(
    engine: sa.Engine, redis_client: redis.Redis
) -> None:
    synced = Store(redis_client, "test", RedisSyncedClock(redis_client))
    write(engine, ("add", "o-1", {"delay": 10}))
    Relay(engine, synced).relay_once()
    seconds, micros = redis_client.time()
    redis_now_ms = seconds * 1000 + micros // 1000
    info = synced.get("orders", "o-1")
    assert info is not None
    assert redis_now_ms + 10_000 - 5_000 <= info.due_ms <= redis_now_ms + 10_000


def test_the_metrics_read_the_outbox_and_survive_a_failed_read(engine: sa.Engine) -> None:
    from actors.metrics import OutboxCollector

    write(engine, ("add", "o-1", {}), ("add", "o-2", {}))

    def read() -> tuple[int, int | None]:
        found = status(engine)
        return found.depth, found.oldest_ms

    samples = {s.name: s.value for m in OutboxCollector(read).collect() for s in m.samples}
    assert (samples["redelay_outbox_rows"], samples["redelay_outbox_up"]) == (2, 1)

    def broken() -> tuple[int, int | None]:
        raise sa.exc.OperationalError("SELECT", {}, Exception("database is down"))

    samples = {s.name: s.value for m in OutboxCollector(broken).collect() for s in m.samples}
    assert samples == {"redelay_outbox_up": 0}
