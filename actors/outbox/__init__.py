"""Transactional enqueue: a job exists exactly when the database transaction that made it commits.

``add`` and ``cancel`` write a row into the outbox table inside the caller's SQLAlchemy
transaction (a ``Session``, or an ``AsyncSession``: then await the call), checked as
``DelayQueue.add``/``cancel`` check their arguments. A relay (``actors.outbox.relay``, run by
``redelay outbox relay`` or by a worker) moves committed rows into Redis and deletes them. See
docs/frameworks.md for what this guarantees and what it costs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime, timedelta
from typing import Any, overload

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from actors.outbox._rows import OutboxWrite, add_write, cancel_write
from actors.outbox._table import NOTIFY_CHANNEL, TABLE_NAME, create, ddl, metadata, table
from actors.outbox._writer import upsert

__all__ = [
    "NOTIFY_CHANNEL",
    "TABLE_NAME",
    "add",
    "cancel",
    "create",
    "ddl",
    "metadata",
    "table",
]


@overload
def add(
    session: Session,
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
) -> None: ...


@overload
def add(
    session: AsyncSession,
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
) -> Awaitable[None]: ...


def add(
    session: Session | AsyncSession,
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
) -> Awaitable[None] | None:
    """Adds a job when ``session``'s transaction commits: due after ``delay`` counted from this
    write (by the database's clock), or ``at``, or now. Arguments as ``DelayQueue.add``; an
    existing (topic, id) is kept as it is (``if_exists="keep"``) or rescheduled
    (``"replace"``). Raises ValidationError, naming the field, before anything is written. With
    an AsyncSession the result is awaited (the arguments are checked at the call, before it)."""
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
    return _write(session, write)


@overload
def cancel(session: Session, topic: str, job_id: str) -> None: ...


@overload
def cancel(session: AsyncSession, topic: str, job_id: str) -> Awaitable[None]: ...


def cancel(session: Session | AsyncSession, topic: str, job_id: str) -> Awaitable[None] | None:
    """Cancels the job when ``session``'s transaction commits (as ``DelayQueue.cancel``: a
    leased job ends with its current run). An add then a cancel of one job ends cancelled."""
    return _write(session, cancel_write(topic, job_id))


def _write(session: Session | AsyncSession, write: OutboxWrite) -> Awaitable[None] | None:
    if isinstance(session, AsyncSession):
        return _write_async(session, write)
    session.execute(upsert(session.get_bind().dialect.name), write.values())
    return None


async def _write_async(session: AsyncSession, write: OutboxWrite) -> None:
    await session.execute(upsert(session.get_bind().dialect.name), write.values())
