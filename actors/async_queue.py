"""AsyncDelayQueue: the producer for asyncio services (FastAPI, aiohttp, Starlette, ...).

``DelayQueue.add`` blocks its thread for a round trip, which in a coroutine blocks the event
loop. This facade sends the same script calls on ``redis.asyncio`` instead: every method is a
coroutine, checks its input exactly as DelayQueue does (actors/producing.py) and gives the same
results and errors. It only produces and inspects; workers run a :class:`DelayQueue`.

Nothing connects in the constructor: the first awaited call connects, syncs the clock with the
server's ``TIME`` and checks the namespace's shard count, so a module can make its queue at
import time while Redis is down. A queue and its client belong to one event loop.

Adds are traced as DelayQueue's are (a PRODUCER span per job, its traceparent stored with the
job), by the same code in actors/tracing.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from actors import _validation as validation
from actors import producing
from actors import schedules as _schedules
from actors._constants import (
    BATCH_MAX_JOBS,
    DEFAULT_LEASE_MS,
    DEFAULT_RETRY_SCHEDULE_MS,
    DEFAULT_STREAM_BATCH,
    SHARDS_MAX,
)
from actors._validation import IfExists
from actors.clock import Clock
from actors.lifecycle import State
from actors.producing import AuditEvent
from actors.schedules import Misfire, ScheduleInfo
from actors.storage.async_store import AsyncStore, ServerClock, open_async_store
from actors.storage.async_topology import AsyncClient, check_source, connect
from actors.tracing import StreamSpans, Tracing
from actors.values import AuditRetention, Durability, JobInfo, JobPage, NewJob, TopicConfig


class AsyncDelayQueue:
    """The async producer; see the module docstring. Methods run on the caller's event loop."""

    def __init__(
        self,
        redis_source: str | AsyncClient,
        namespace: str = "default",
        *,
        clock: Clock | None = None,
        retention: AuditRetention | None = None,
        default_retry: Sequence[float | timedelta] | None = None,
        default_lease: float | timedelta = DEFAULT_LEASE_MS / 1000,
        shards: int | None = None,
        durability: Durability | None = None,
        tracer_provider: Any = None,
    ) -> None:
        # Everything that can be checked without I/O is checked here, as DelayQueue does;
        # first a tracer_provider without opentelemetry installed.
        self._tracing = Tracing(tracer_provider)
        check_source(redis_source)
        self._source = redis_source
        self._namespace = validation.namespace(namespace)
        if shards is not None:
            validation.count(shards, "shards", SHARDS_MAX)
        retry_ms = producing.schedule_ms(default_retry, "default_retry")
        lease_ms = producing.lease_ms(default_lease, "default_lease")
        self._store_options: dict[str, Any] = {
            "shards": shards,
            "durability": durability,
            "retention": retention,
            "default_topic_config": TopicConfig(retry_ms or DEFAULT_RETRY_SCHEDULE_MS, lease_ms),
        }
        self._given_clock = clock
        self._server_clock: ServerClock | None = None
        self._client: AsyncClient | None = None
        self._store: AsyncStore | None = None
        self._lock = asyncio.Lock()  # binds to a loop only when first contended (3.10+)
        self._closed = False

    @property
    def namespace(self) -> str:
        return self._namespace

    async def store(self) -> AsyncStore:
        """The namespace's AsyncStore: on the first call connects, syncs the clock and checks
        the shard count (an unreachable server raises redis-py's ConnectionError, and the next
        call tries again); later calls re-sync the clock once a minute."""
        if self._closed:
            raise RuntimeError("this AsyncDelayQueue is closed")
        if self._store is None:
            async with self._lock:
                if self._store is None:
                    self._store = await self._open()
        if self._server_clock is not None:
            await self._server_clock.refresh()
        return self._store

    def _unconnected_now_ms(self) -> int:
        """The time to check jobs at before the first connection: the given clock's, or this
        machine's (the server's clock is not known yet). The jobs are built again, at the
        store's clock, once connected, so a due time is never taken from this reading."""
        if self._given_clock is not None:
            return self._given_clock.now_ms()
        return round(time.time() * 1000)

    async def _open(self) -> AsyncStore:
        if self._client is None:
            self._client = await connect(self._source)
        clock: Clock
        if self._given_clock is not None:
            clock = self._given_clock
        else:
            if self._server_clock is None:
                self._server_clock = ServerClock(self._client)
            await self._server_clock.refresh()
            clock = self._server_clock
        return await open_async_store(self._client, self._namespace, clock, **self._store_options)

    # -- producing ------------------------------------------------------------------------

    async def add(
        self,
        topic: str,
        job_id: str,
        body: Any = None,
        *,
        delay: float | timedelta | None = None,
        at: datetime | float | None = None,
        retry: Sequence[float | timedelta] | None = None,
        lease: float | timedelta | None = None,
        callback: str | None = None,
        replace: bool = False,
        if_exists: IfExists | None = None,
    ) -> str:
        """As :meth:`DelayQueue.add`: "new" when the job did not exist, else the state it had
        (replace) or has (keep); JobExistsError for an existing (topic, id) when ``if_exists``
        is "error" (the default)."""
        mode = validation.if_exists(if_exists, replace)
        arguments: dict[str, Any] = {
            "delay": delay,
            "at": at,
            "retry": retry,
            "lease": lease,
            "callback": callback,
        }
        if self._store is None:  # a bad job raises before the first connection is tried
            producing.new_job(self._unconnected_now_ms(), topic, job_id, body, **arguments)
        store = await self.store()
        job = producing.new_job(store.clock.now_ms(), topic, job_id, body, **arguments)
        if self._tracing.tracer is None:
            return await store.add(job, if_exists=mode)
        # Traced as DelayQueue.add is, by the same code (see actors.tracing).
        with self._tracing.sending([job]) as traced:
            return (await store.add_many(traced, if_exists=mode))[0]

    async def add_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        replace: bool = False,
        if_exists: IfExists | None = None,
    ) -> list[str]:
        """As :meth:`DelayQueue.add_many`: one round trip, all or nothing (per shard; with
        ``if_exists="keep"`` the existing ones are left and the others added)."""
        mode = validation.if_exists(if_exists, replace)
        if self._store is None:  # a bad job raises before the first connection is tried
            jobs = list(jobs)  # read twice: an iterator would be empty the second time
            producing.new_jobs(self._unconnected_now_ms(), jobs)
        store = await self.store()
        built = producing.new_jobs(store.clock.now_ms(), jobs)
        # Traced: one producer span per job (see actors.tracing).
        with self._tracing.sending(built) as traced:
            return await store.add_many(traced, if_exists=mode)

    async def add_stream(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        batch_size: int = DEFAULT_STREAM_BATCH,
        if_exists: IfExists | None = None,
    ) -> list[str]:
        """As :meth:`DelayQueue.add_stream`: any number of jobs (a list or a generator) in
        batches of ``batch_size``, each all or nothing, each sent before the reply to the one
        before is read; AddStreamError at the first batch that fails."""
        size = validation.count(batch_size, "batch_size", BATCH_MAX_JOBS)
        mode = validation.if_exists(if_exists, False)
        store = await self.store()
        # Traced as DelayQueue.add_stream is: each span ends once Redis answered for its batch.
        spans = StreamSpans(self._tracing) if self._tracing.tracer is not None else None

        def batches() -> Iterator[Sequence[NewJob]]:
            for built in producing.new_job_batches(jobs, size, store.clock.now_ms):
                yield built if spans is None else spans.traced(built)

        if spans is None:
            return await store.add_stream(batches(), if_exists=mode)
        with spans.ending():
            return await store.add_stream(batches(), if_exists=mode, on_added=spans.added)

    # -- recurring schedules (docs/schedules.md) ---------------------------------------------

    async def schedule(
        self,
        name: str,
        topic: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        body: Any = None,
        start_at: datetime | float | None = None,
        misfire: Misfire = "run_once",
    ) -> str:
        """As :meth:`DelayQueue.schedule`: "created", "updated" or "unchanged". The spec is
        checked before anything connects."""
        start_ms = None
        if start_at is not None:
            start_ms = round(producing.epoch_s(start_at, "start_at") * 1000)
        spec = _schedules.spec(
            name,
            topic,
            cron=cron,
            every=every,
            tz=tz,
            body=body,
            start_at_ms=start_ms,
            misfire_policy=misfire,
        )
        return (await (await self.store()).schedule(spec))[0]

    async def unschedule(self, name: str) -> bool:
        """As :meth:`DelayQueue.unschedule`: True when the schedule existed."""
        _schedules.name(name)  # a bad name raises before anything connects
        return await (await self.store()).unschedule(name)

    async def schedules(self) -> list[ScheduleInfo]:
        """As :meth:`DelayQueue.schedules`: every schedule of the namespace, by name."""
        return await (await self.store()).schedules()

    async def cancel(self, topic: str, job_id: str) -> bool:
        """True when the job existed. A leased job is marked: its current run ends it."""
        producing.check_job_name(topic, job_id)
        return await (await self.store()).cancel(topic, job_id) != "missing"

    async def get(self, topic: str, job_id: str) -> JobInfo | None:
        producing.check_job_name(topic, job_id)
        return await (await self.store()).get(topic, job_id)

    async def history(self, topic: str, job_id: str) -> list[AuditEvent]:
        """As :meth:`DelayQueue.history`: through the per-job index, O(its own events)."""
        producing.check_job_name(topic, job_id)
        entries = await (await self.store()).job_entries(topic, job_id)
        return producing.audit_events(entries, topic, job_id)

    async def stats(self) -> dict[str, dict[str, int]]:
        return await (await self.store()).stats()

    async def jobs(
        self, topic: str, state: State | str, *, after: str | None = None, limit: int = 100
    ) -> JobPage:
        """As :meth:`DelayQueue.jobs`: one page of ``topic``'s jobs in ``state``."""
        return await (await self.store()).jobs(topic, state, after=after, limit=limit)

    # -- closing --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Closes the connections (a client given to the queue too). Never connects."""
        if self._closed:
            return
        self._closed = True
        client = self._client if self._client is not None else self._source
        try:
            if self._store is not None:  # the held connections go back before the pool closes
                await self._store.close()
        finally:
            if not isinstance(client, str):
                await client.aclose()

    async def close(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()

    async def __aenter__(self) -> AsyncDelayQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
