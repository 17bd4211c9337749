"""The one SQL statement an outbox write sends: an upsert that merges into a pending row.

The merge (actors/outbox/_rows.py has the table) is done by the database in the statement, on
the row's lock, so two transactions writing one job cannot both see "no row" and lose one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, case, literal
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from actors.outbox._rows import OutboxWrite
from actors.outbox._table import db_now_ms, table

_MERGED = ("token", "written_ms", "delay_ms", "at_ms", "body", "retry_ms", "lease_ms", "callback")


def upsert(dialect: str) -> Insert:
    """The statement for ``dialect`` ("postgresql" or "sqlite"), its values bound by name (an
    OutboxWrite's ``values()``). Built once per dialect: building the construct cost ten times
    more than sending it."""
    statement = _STATEMENTS.get(dialect)
    if statement is None:
        statement = _STATEMENTS[dialect] = _build(dialect)
    return statement


_STATEMENTS: dict[str, Insert] = {}


def _build(dialect: str) -> Insert:
    insert: Any
    if dialect == "postgresql":
        insert = postgresql.insert(table)
    elif dialect == "sqlite":
        insert = sqlite.insert(table)
    else:
        raise NotImplementedError(f"the outbox supports PostgreSQL and SQLite, not {dialect}")
    names = OutboxWrite.__slots__
    bound: dict[str, Any] = {name: bindparam(name, type_=table.c[name].type) for name in names}
    statement = insert.values({**bound, "written_ms": db_now_ms()})
    new = statement.excluded
    # An add over a pending add or replace keeps the row; over a pending cancel it replaces.
    keeps = and_(new.op == "add", table.c.op != "cancel")
    merged = {name: case((keeps, table.c[name]), else_=new[name]) for name in _MERGED}
    merged["op"] = case(
        (keeps, table.c.op),
        (new.op == "add", literal("replace")),
        else_=new.op,
    )
    upserted: Insert = statement.on_conflict_do_update(
        index_elements=[table.c.topic, table.c.job_id], set_=merged
    )
    return upserted
