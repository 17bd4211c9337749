"""actors.outbox.django: rows written through Django's connection inside transaction.atomic(),
then relayed, on SQLite and on this run's PostgreSQL database; the migration operation creates
the table. Django is configured once for the test process, with one database alias each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _outbox_db import postgres_missing

from actors import outbox
from actors.errors import ValidationError
from actors.outbox import django as django_outbox
from actors.outbox.relay import Relay, status
from actors.storage.store import Store

django = pytest.importorskip("django")


@pytest.fixture(scope="session")
def django_databases(tmp_path_factory: pytest.TempPathFactory, request: Any) -> dict[str, str]:
    """Django alias -> the SQLAlchemy URL of the same database."""
    from django.conf import settings

    sqlite_file = tmp_path_factory.mktemp("django") / "app.db"
    aliases = {"default": f"sqlite:///{sqlite_file}"}
    databases: dict[str, Any] = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite_file)}
    }
    if postgres_missing() is None:
        url = sa.make_url(request.getfixturevalue("postgres_url"))
        aliases["pg"] = url.render_as_string(hide_password=False)
        databases["pg"] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": url.database,
            "USER": url.username,
            "HOST": url.host,
            "PORT": url.port,
        }
    if not settings.configured:
        settings.configure(DATABASES=databases, USE_TZ=True)
        django.setup()
    return aliases


@pytest.fixture(params=["default", "pg"])
def alias(request: pytest.FixtureRequest, django_databases: dict[str, str]) -> Iterator[str]:
    """A Django database alias with an empty outbox table, made by the migration operation."""
    from django.db import connections

    if request.param not in django_databases:
        pytest.skip(postgres_missing() or "no PostgreSQL")
    connection = connections[request.param]
    operation = django_outbox.migration_operation()
    with connection.schema_editor() as editor:
        operation.reverse_code(None, editor)
        operation.code(None, editor)
    yield request.param
    connection.close()


@pytest.fixture
def engine(alias: str, django_databases: dict[str, str]) -> Iterator[sa.Engine]:
    made = sa.create_engine(django_databases[alias])
    yield made
    made.dispose()


def test_a_committed_atomic_block_makes_its_jobs_and_a_rolled_back_one_none(
    alias: str, engine: sa.Engine, store: Store
) -> None:
    from django.db import transaction

    with transaction.atomic(using=alias):
        django_outbox.add("orders", "o-1", {"email": "a@example.com"}, delay=900, using=alias)
        django_outbox.add("orders", "o-2", using=alias)
        django_outbox.cancel("orders", "o-2", using=alias)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        django_outbox.add("orders", "rolled-back", using=alias)
        raise RuntimeError("the view failed")
    assert status(engine).depth == 2
    Relay(engine, store).relay_once()
    info = store.get("orders", "o-1")
    assert info is not None and info.body_bytes == b'{"email":"a@example.com"}'
    assert store.get("orders", "o-2") is None
    assert store.get("orders", "rolled-back") is None


def test_a_bad_add_raises_before_writing(alias: str, engine: sa.Engine) -> None:
    from django.db import transaction

    with transaction.atomic(using=alias):
        django_outbox.add("orders", "fine", using=alias)
        with pytest.raises(ValidationError) as caught:
            django_outbox.add("orders", "o-1", delay=-5, using=alias)
    assert caught.value.field == "delay"
    with engine.connect() as conn:
        assert conn.execute(sa.select(outbox.table.c.job_id)).scalars().all() == ["fine"]


def test_writes_merge_as_the_sqlalchemy_writer_merges(alias: str, engine: sa.Engine) -> None:
    from django.db import transaction

    with transaction.atomic(using=alias):
        django_outbox.cancel("orders", "o-1", using=alias)
        django_outbox.add("orders", "o-1", delay=60, using=alias)
    with engine.connect() as conn:
        (row,) = conn.execute(sa.select(outbox.table)).mappings().all()
    assert (row["op"], row["delay_ms"]) == ("replace", 60_000)


def test_the_migration_is_the_ddl(tmp_path: Path) -> None:
    statements = django_outbox._statements(outbox.ddl("postgresql"))
    assert len(statements) == 4  # table, index, function, trigger
    assert statements[2].startswith("CREATE OR REPLACE FUNCTION")
    assert statements[2].rstrip().endswith("$$;")
