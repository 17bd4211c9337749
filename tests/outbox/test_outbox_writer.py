"""actors.outbox's writer: rows written in the caller's transaction, checked as DelayQueue.add
checks, merged per job, on SQLite and on a PostgreSQL database of this run's own."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _outbox_db import async_url, sqlite_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from actors import outbox
from actors.errors import ValidationError

# The outbox fixtures (postgres_url, db_url, engine) live with the databases they make.


def rows(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        found = conn.execute(sa.select(outbox.table).order_by(outbox.table.c.job_id))
        return [dict(row._mapping) for row in found]


def test_an_add_is_a_row_once_committed(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        outbox.add(session, "orders", "o-1", {"total": 12}, delay=30, retry=[1, 2], lease=10)
    (row,) = rows(engine)
    assert (row["topic"], row["job_id"], row["op"]) == ("orders", "o-1", "add")
    assert row["body"] == b'{"total":12}'
    assert (row["delay_ms"], row["at_ms"], row["retry_ms"], row["lease_ms"]) == (
        30_000,
        None,
        "[1000,2000]",
        10_000,
    )


def test_a_rolled_back_add_leaves_no_row(engine: sa.Engine) -> None:
    with Session(engine) as session:
        session.begin()
        outbox.add(session, "orders", "o-1", delay=30)
        session.rollback()
    assert rows(engine) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"job_id": "has space"}, "id"),
        ({"topic": "a|b"}, "topic"),
        ({"delay": -1}, "delay"),
        ({"delay": 1, "at": 2}, "delay"),
        ({"body": {"x": float("nan")}}, "body.x"),
        ({"retry": [1, "soon"]}, "retry[1]"),
        ({"lease": 0}, "lease"),
        ({"callback": "ftp://x"}, "callback"),
        ({"at": 1e13}, "at"),
        ({"if_exists": "error"}, "if_exists"),
        ({"if_exists": "sometimes"}, "if_exists"),
    ],
)
def test_a_bad_add_raises_naming_the_field_and_writes_nothing(
    engine: sa.Engine, kwargs: dict[str, Any], field: str
) -> None:
    arguments: dict[str, Any] = {"topic": "orders", "job_id": "o-1"} | kwargs
    with Session(engine) as session, session.begin():
        outbox.add(session, "orders", "fine", delay=1)
        with pytest.raises(ValidationError) as caught:
            outbox.add(session, **arguments)
        assert caught.value.field == field
        # The transaction is intact: the caller may still commit what it wrote before.
    assert [row["job_id"] for row in rows(engine)] == ["fine"]


def test_a_bad_cancel_raises_naming_the_field(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin(), pytest.raises(ValidationError) as caught:
        outbox.cancel(session, "orders", "")
    assert caught.value.field == "id"


@pytest.mark.parametrize(
    ("writes", "op", "delay_ms"),
    [
        ([("add", 30), ("cancel", None)], "cancel", None),
        ([("add", 30), ("add", 60)], "add", 30_000),  # an add leaves the pending add
        ([("replace", 30), ("add", 60)], "replace", 30_000),
        ([("add", 30), ("replace", 60)], "replace", 60_000),
        ([("cancel", None), ("add", 60)], "replace", 60_000),  # cancel, then a new job
        ([("add", 30), ("cancel", None), ("add", 90)], "replace", 90_000),
    ],
)
def test_writes_to_one_job_merge_into_one_row(
    engine: sa.Engine, writes: list[tuple[str, int | None]], op: str, delay_ms: int | None
) -> None:
    for kind, delay in writes:  # one commit each, as two requests would
        with Session(engine) as session, session.begin():
            if kind == "cancel":
                outbox.cancel(session, "orders", "o-1")
            else:
                mode = "replace" if kind == "replace" else "keep"
                outbox.add(session, "orders", "o-1", delay=delay, if_exists=mode)
    (row,) = rows(engine)
    assert (row["op"], row["delay_ms"]) == (op, delay_ms)


def test_writes_in_one_transaction_merge_too(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        outbox.add(session, "orders", "o-1", delay=30)
        outbox.cancel(session, "orders", "o-1")
    assert [(row["job_id"], row["op"]) for row in rows(engine)] == [("o-1", "cancel")]


def test_at_is_stored_as_an_absolute_due_time(engine: sa.Engine) -> None:
    at_s = round(time.time()) + 3600.5
    with Session(engine) as session, session.begin():
        outbox.add(session, "orders", "o-1", at=at_s)
    (row,) = rows(engine)
    assert (row["at_ms"], row["delay_ms"]) == (round(at_s * 1000), None)


def test_the_row_is_stamped_by_the_database_clock(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        outbox.add(session, "orders", "o-1")
        db_now = session.execute(sa.select(outbox._table.db_now_ms())).scalar_one()
    (row,) = rows(engine)
    assert 0 <= db_now - row["written_ms"] < 5_000


def test_an_async_session_writes_the_same_row(db_url: str, engine: sa.Engine) -> None:
    async def write() -> None:
        async_engine = create_async_engine(async_url(db_url))
        try:
            async with AsyncSession(async_engine) as session, session.begin():
                await outbox.add(session, "orders", "o-1", {"n": 1}, delay=5)
                await outbox.add(session, "orders", "o-2", delay=5)
                await outbox.cancel(session, "orders", "o-2")
                with pytest.raises(ValidationError):
                    outbox.add(session, "orders", "bad id")  # raises at the call, not the await
        finally:
            await async_engine.dispose()

    asyncio.run(write())
    assert [(row["job_id"], row["op"], row["body"]) for row in rows(engine)] == [
        ("o-1", "add", b'{"n":1}'),
        ("o-2", "cancel", None),
    ]


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_the_ddl_creates_a_working_table(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path) if dialect == "sqlite" else request.getfixturevalue("postgres_url")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            outbox.metadata.drop_all(conn)
            if dialect == "sqlite":
                for statement in outbox.ddl(dialect).split(";"):
                    if statement.strip():
                        conn.exec_driver_sql(statement)
            else:
                conn.exec_driver_sql(outbox.ddl(dialect))
        with Session(engine) as session, session.begin():
            outbox.add(session, "orders", "o-1")
        assert [row["job_id"] for row in rows(engine)] == ["o-1"]
    finally:
        engine.dispose()
