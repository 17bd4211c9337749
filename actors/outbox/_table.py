"""The outbox table: one row per job with a change not yet in Redis, and its DDL.

A row is the job's *desired* change, not a log entry: a second write for the same (topic, id)
before the relay ran merges into the first (actors/outbox/_rows.py says how), on the table's
primary key. So two transactions writing the same job take the same row lock and the row ends as
the later commit left it, which is commit order per job without a sequence to trust.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.types import BigInteger as BigIntegerType

from actors._constants import JOB_ID_MAX_CHARS, TOPIC_MAX_CHARS

TABLE_NAME = "redelay_outbox"
# The channel a PostgreSQL trigger notifies at each commit that wrote rows (the relay LISTENs).
NOTIFY_CHANNEL = "redelay_outbox"
# Operations a row holds: "add" leaves an existing job as it is (if_exists="keep"), "replace"
# reschedules it, "cancel" cancels it.
OPS = ("add", "replace", "cancel")
_TOKEN_CHARS = 32

metadata = MetaData()

table = Table(
    TABLE_NAME,
    metadata,
    Column("topic", String(TOPIC_MAX_CHARS), primary_key=True),
    Column("job_id", String(JOB_ID_MAX_CHARS), primary_key=True),
    Column("op", String(8), nullable=False),
    # Unique per write: Redis keeps the token of the write it applied last (the relay's marker),
    # so a write applied before a crash is recognised and not applied again.
    Column("token", String(_TOKEN_CHARS), nullable=False),
    # The database's clock when the row was written: the job's delay counts from here.
    Column("written_ms", BigInteger, nullable=False),
    Column("delay_ms", BigInteger),
    Column("at_ms", BigInteger),  # an absolute due time (add's ``at``), instead of a delay
    Column("body", LargeBinary),  # the body as JSON, as DelayQueue.add checked and encoded it
    Column("retry_ms", Text),  # the retry schedule as a JSON list, or NULL for the default
    Column("lease_ms", BigInteger),
    Column("callback", Text),
)
# The relay drains the oldest writes first, and `redelay stats` reads the oldest one's age.
written_index = Index(f"{TABLE_NAME}_written", table.c.written_ms)


class db_now_ms(FunctionElement[int]):  # lower case: reads as the SQL function it stands for
    """The database server's clock in ms since the epoch, as an SQL expression."""

    type = BigIntegerType()
    inherit_cache = True


@compiles(db_now_ms, "postgresql")
def _pg_now_ms(element: Any, compiler: Any, **kw: Any) -> str:
    # clock_timestamp(), not now(): now() is the transaction's start, frozen for its length.
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"


@compiles(db_now_ms, "sqlite")
def _sqlite_now_ms(element: Any, compiler: Any, **kw: Any) -> str:
    return "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"


@compiles(db_now_ms)
def _other_now_ms(element: Any, compiler: Any, **kw: Any) -> str:
    raise NotImplementedError(
        f"the outbox supports PostgreSQL and SQLite, not {compiler.dialect.name}"
    )


# PostgreSQL: one NOTIFY per writing statement, delivered at commit (and only then), so the relay
# wakes when rows become visible. Notifications with the same payload in one transaction are
# folded into one by PostgreSQL.
_PG_NOTIFY = f"""
CREATE OR REPLACE FUNCTION {TABLE_NAME}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{NOTIFY_CHANNEL}', '');
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER {TABLE_NAME}_notify
  AFTER INSERT OR UPDATE ON {TABLE_NAME}
  FOR EACH STATEMENT EXECUTE FUNCTION {TABLE_NAME}_notify();
"""


def ddl(dialect: str) -> str:
    """The SQL that creates the table, its index and (PostgreSQL) the NOTIFY trigger, for a
    migration: ``dialect`` is "postgresql" or "sqlite"."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        bound: Any = postgresql.dialect()  # type: ignore[no-untyped-call]
    elif dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        bound = sqlite.dialect()
    else:
        raise ValueError(f"dialect: {dialect!r} is not one of 'postgresql', 'sqlite'")
    create = str(CreateTable(table).compile(dialect=bound)).strip()
    index = str(CreateIndex(written_index).compile(dialect=bound)).strip()
    statements = f"{create};\n{index};\n"
    if dialect == "postgresql":
        statements += _PG_NOTIFY.lstrip("\n")
    return statements


def create(connection: Any) -> None:
    """Creates the table (if missing) on a SQLAlchemy Connection, in its transaction; on
    PostgreSQL also the trigger that notifies the relay."""
    metadata.create_all(connection, checkfirst=True)
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(_PG_NOTIFY)
