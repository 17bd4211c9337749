"""The outbox tests' fixtures: this
run's PostgreSQL database, and an empty outbox table in SQLite or in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from _outbox_db import DATABASES, postgres_missing, private_postgres, sqlite_url

from actors import outbox


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """This run's PostgreSQL database (one per test run), dropped at the end."""
    missing = postgres_missing()
    if missing is not None:
        pytest.skip(missing)
    with private_postgres() as url:
        yield url


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty outbox table, in SQLite or PostgreSQL."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        url = request.getfixturevalue("postgres_url")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        outbox.metadata.drop_all(conn)
        outbox.create(conn)
    engine.dispose()
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    made = sa.create_engine(db_url)
    yield made
    made.dispose()
