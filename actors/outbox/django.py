"""The outbox for Django: ``add`` and ``cancel`` write their row through Django's own connection,
so inside ``transaction.atomic()`` the job commits (or rolls back) with the view's rows.

The statement is the SQLAlchemy writer's upsert (actors/outbox/_writer.py), compiled once per
database vendor to SQL with ``%s`` placeholders, which Django's cursors take on PostgreSQL and
SQLite alike. ``migration_operation()`` creates the table in a migration of the project's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from actors.outbox._rows import OutboxWrite, add_write, cancel_write
from actors.outbox._table import TABLE_NAME, ddl
from actors.outbox._writer import upsert

_COMPILED: dict[str, tuple[str, tuple[str, ...]]] = {}


def add(
    topic: str,
    job_id: str,
    body: Any = None,
    *,
    delay: float | timedelta | None = None,
    at: datetime | float | None = None,
    retry: Sequence[float | timedelta] | None = None,
    lease: float | timedelta | None = None,
    callback: str | None = None,
    if_exists: str = "keep",
    using: str = "default",
) -> None:
    """``actors.outbox.add`` on Django's connection ``using``: the job exists once the enclosing
    ``transaction.atomic()`` commits (outside one, Django's autocommit commits it at once)."""
    write = add_write(
        topic,
        job_id,
        body,
        delay=delay,
        at=at,
        retry=retry,
        lease=lease,
        callback=callback,
        if_exists=if_exists,
    )
    _execute(write, using)


def cancel(topic: str, job_id: str, *, using: str = "default") -> None:
    """``actors.outbox.cancel`` on Django's connection ``using``."""
    _execute(cancel_write(topic, job_id), using)


def _execute(write: OutboxWrite, using: str) -> None:
    from django.db import connections

    connection = connections[using]
    sql, names = _compiled(connection.vendor)
    values = write.values()
    with connection.cursor() as cursor:
        cursor.execute(sql, [values[name] for name in names])


def _compiled(vendor: str) -> tuple[str, tuple[str, ...]]:
    """The upsert as SQL with ``%s`` placeholders, and the write's value names in their order."""
    found = _COMPILED.get(vendor)
    if found is not None:
        return found
    dialect: Any
    if vendor == "postgresql":
        from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

        dialect = PGDialect_psycopg(paramstyle="format")  # type: ignore[no-untyped-call]
    elif vendor == "sqlite":
        from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

        dialect = SQLiteDialect_pysqlite(paramstyle="format")
    else:
        raise NotImplementedError(f"the outbox supports PostgreSQL and SQLite, not {vendor}")
    compiled = upsert(vendor).compile(dialect=dialect)
    names = tuple(compiled.positiontup or ())
    # Each name is a write's value; a literal the statement holds (the merge's 'replace') is
    # bound too, and sent as compiled.
    literals = {name: value for name, value in compiled.params.items() if name not in _WRITE}
    found = (_inline(str(compiled), names, literals), tuple(n for n in names if n in _WRITE))
    _COMPILED[vendor] = found
    return found


_WRITE = frozenset(OutboxWrite.__slots__)


def _inline(sql: str, names: tuple[str, ...], literals: dict[str, Any]) -> str:
    """``sql`` with the placeholders of ``literals`` replaced by their quoted text."""
    parts = sql.split("%s")
    if len(parts) != len(names) + 1:
        raise RuntimeError("the compiled outbox statement's placeholders do not match its names")
    out = [parts[0]]
    for name, part in zip(names, parts[1:], strict=True):
        if name in literals:
            text = str(literals[name]).replace("'", "''")
            out.append(f"'{text}'")
        else:
            out.append("%s")
        out.append(part)
    return "".join(out)


def migration_operation() -> Any:
    """A migration operation that creates the outbox table (and its NOTIFY trigger on
    PostgreSQL), for the database the migration runs on; reversed, it drops them."""
    from django.db import migrations

    def create(apps: Any, schema_editor: Any) -> None:
        vendor = schema_editor.connection.vendor
        for statement in _statements(ddl(vendor)):
            schema_editor.execute(statement, params=None)

    def drop(apps: Any, schema_editor: Any) -> None:
        schema_editor.execute(f"DROP TABLE IF EXISTS {TABLE_NAME}", params=None)

    return migrations.RunPython(create, drop)


def _statements(sql: str) -> list[str]:
    """The DDL's statements one by one; the PostgreSQL function body ($$ ... $$) stays whole."""
    statements, current, in_body = [], [], False
    for line in sql.splitlines():
        current.append(line)
        if line.count("$$") % 2:
            in_body = not in_body
        if not in_body and line.rstrip().endswith(";"):
            statements.append("\n".join(current).strip())
            current = []
    if "".join(current).strip():
        statements.append("\n".join(current).strip())
    return statements
