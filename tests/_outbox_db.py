"""The databases the outbox tests write to: SQLite in a file, and a PostgreSQL database of this
test run's own on the machine's server (127.0.0.1:5432, trust auth, user postgres; another with
REDELAY_TEST_POSTGRES_URL), created at the start and dropped at the end. Only that database is
ever touched; without a server the PostgreSQL cases are skipped, saying why."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

SERVER_URL = os.environ.get(
    "REDELAY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
DATABASES = ("sqlite", "postgresql")


def _server_engine() -> sa.Engine:
    return sa.create_engine(SERVER_URL, isolation_level="AUTOCOMMIT", pool_size=1)


def postgres_missing() -> str | None:
    """Why PostgreSQL cannot be used here, or None."""
    engine = _server_engine()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:
        return f"no PostgreSQL at {SERVER_URL}: {exc}"
    finally:
        engine.dispose()
    return None


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """A new database, dropped at the end (with any connection still open to it): its URL."""
    name = f"redelay_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    engine = _server_engine()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield sa.make_url(SERVER_URL).set(database=name).render_as_string(hide_password=False)
        finally:
            with engine.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


def sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'app.db'}"


def async_url(url: str) -> str:
    """The same database through an asyncio driver (aiosqlite; psycopg 3 is both)."""
    if url.startswith("sqlite:"):
        return url.replace("sqlite:", "sqlite+aiosqlite:", 1)
    return url
