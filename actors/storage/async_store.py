"""The producer's operations on ``redis.asyncio``: add, cancel, get, jobs, stats, a job's events,
schedule, unschedule and schedules.

:class:`AsyncStore` inherits :class:`actors.storage.plan.ShardPlan` with :class:`Store`, so the
calls it sends (built by actors/storage/calls.py) and what it makes of the replies are the sync
store's, shards included; only the sending is its own (:class:`AsyncScriptBatch`). It has no
worker-side operations (lease, ack, fail, ...): workers run on the sync store in their actors.

A client belongs to the event loop it first ran on (redis-py's asyncio connections do), so one
AsyncStore serves one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from actors import _validation as validation
from actors._constants import DEFAULT_SHARDS
from actors._validation import IfExists
from actors.clock import SYNC_SAMPLES, ServerTimeClock, TimeSample
from actors.errors import ConfigError, JobExistsError, PartialAddError
from actors.lifecycle import State
from actors.schedules import ScheduleInfo, ScheduleSpec
from actors.storage import calls
from actors.storage import schedules as schedule_calls
from actors.storage.add_stream import STOPS, OnAdded, StreamBook, split_at_repeats
from actors.storage.async_batch import AsyncScriptBatch
from actors.storage.async_topology import AsyncClient, is_cluster
from actors.storage.calls import CancelOutcome, ScriptCall
from actors.storage.keys import ShardKeys, config_key
from actors.storage.namespace_config import (
    RETENTION_FIELDS,
    SHARDS_FIELD,
    check_shards,
    parse_retention,
    parse_shards,
    retention_fields,
    shards_arg,
    unrecorded_jobs_error,
)
from actors.storage.plan import KEEP_ROUNDS, ShardPlan
from actors.storage.script_batch import WaitFor
from actors.storage.scripts import raise_if_full
from actors.values import (
    AuditEntry,
    AuditRetention,
    Durability,
    JobInfo,
    JobPage,
    NewJob,
    TopicConfig,
)

log = logging.getLogger("actors.async_store")

# A job's events are read from its shard's stream this many entries at a time.


class ServerClock(ServerTimeClock):
    """The server's ``TIME`` on this host's monotonic clock, synced on the event loop.

    Like :class:`actors.clock.RedisSyncedClock` without its thread: :meth:`refresh` is awaited
    before each operation and measures again once the last measurement is ``refresh_ms`` old.
    """

    def __init__(self, client: AsyncClient, refresh_ms: int = 60_000) -> None:
        super().__init__()
        self._client = client
        self._refresh_ms = refresh_ms
        self._synced_at: float | None = None

    async def sync(self) -> float:
        """Measures the offset to the server; returns it in ms (see ``offset_ms``)."""
        samples = []
        for _ in range(SYNC_SAMPLES):
            before = self.local_s()
            seconds, micros = await self._client.time()
            samples.append(TimeSample(before, seconds, micros, self.local_s()))
        offset_ms = self.take(samples)
        self._synced_at = time.monotonic()
        return offset_ms

    async def refresh(self) -> None:
        if self._synced_at is None:
            await self.sync()  # the first measurement's error is the caller's
        elif time.monotonic() - self._synced_at >= self._refresh_ms / 1000:
            try:
                await self.sync()
            except RedisError as exc:  # keep the last offset; the operation will tell
                self._synced_at = time.monotonic()
                log.warning("clock sync with Redis failed: %s", exc)


class AsyncStore(ShardPlan):
    """A namespace's shards on an asyncio client; see the module docstring."""

    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        clock: Any,
        *,
        shards: int = 1,
        retention: AuditRetention | None = None,
        default_topic_config: TopicConfig | None = None,
        durability: Durability | None = None,
    ) -> None:
        super().__init__(
            namespace,
            clock,
            shards=shards,
            retention=retention,
            default_topic_config=default_topic_config,
            durability=durability,
        )
        self.client = client
        self._batch = AsyncScriptBatch(client)

    async def close(self) -> None:
        """Gives the connections the script calls held back to the client's pool; the client
        stays open (its owner closes it)."""
        await self._batch.close()

    async def _run(self, shard_calls: dict[int, ScriptCall]) -> dict[int, Any]:
        replies, _ = await self._batch.run(list(shard_calls.values()))
        return dict(zip(shard_calls, replies, strict=True))

    async def add_many(
        self, jobs: Sequence[NewJob], *, replace: bool = False, if_exists: IfExists | None = None
    ) -> list[str]:
        """As :meth:`Store.add_many`: one call per shard, all or nothing per shard, and the
        same ``if_exists``."""
        mode = validation.if_exists(if_exists, replace)
        if not jobs:
            return []
        if mode == "keep":
            self._check_batch(jobs)
            return await self._add_keeping(jobs)
        replace = mode == "replace"
        groups, shard_calls = self._add_calls(jobs, replace=replace)
        wait = None
        if self.durability is not None:
            wait = WaitFor(self.durability.replicas, self.durability.timeout_ms)
        try:
            replies, acked = await self._batch.run(list(shard_calls.values()), wait)
        except ResponseError as exc:
            # As Store.add_many: the add script's first write is refused, so nothing was written.
            raise_if_full("add", exc)
            raise
        if wait is not None and acked is None:
            acked = wait.replicas
        by_shard = dict(zip(shard_calls, replies, strict=True))
        return self._add_results(jobs, groups, by_shard, replace=replace, acked=acked)

    async def add_stream(
        self,
        batches: Iterable[Sequence[NewJob]],
        *,
        if_exists: IfExists | None = None,
        on_added: OnAdded | None = None,
    ) -> list[str]:
        """As :meth:`Store.add_stream`: each batch sent before the last one's reply is read, on
        one held connection, so building the next batch (the iterable may build it as it is
        asked) overlaps Redis adding the last. The bookkeeping is the sync one's (StreamBook)."""
        mode = validation.if_exists(if_exists, False)
        book = StreamBook(self, mode, on_added)
        stream = None
        if mode != "keep" and self.durability is None:
            stream = await self._batch.stream()
        try:
            for jobs in split_at_repeats(batches):
                if stream is None:
                    try:
                        states = await self.add_many(jobs, if_exists=mode)
                    except STOPS as exc:
                        book.refused(jobs, exc)
                        raise
                    book.added(states)
                elif jobs:
                    await stream.send(book.calls(jobs))
                    if len(book.in_flight) > 1:
                        book.answered(await stream.read())
            while stream is not None and book.in_flight:
                book.answered(await stream.read())
            return book.done()
        except STOPS as exc:
            if stream is not None and not isinstance(exc, RedisConnectionError | RedisTimeoutError):
                while book.in_flight:  # sent before the stop: their results still count
                    with contextlib.suppress(*STOPS):
                        book.answered(await stream.read())
            raise book.stopped(exc) from exc
        finally:
            if stream is not None:
                await stream.close()

    async def add(
        self, job: NewJob, *, replace: bool = False, if_exists: IfExists | None = None
    ) -> str:
        return (await self.add_many([job], replace=replace, if_exists=if_exists))[0]

    async def _add_keeping(self, jobs: Sequence[NewJob]) -> list[str]:
        """As :meth:`Store._add_keeping`, whose rounds ShardPlan plans."""
        results: list[str | None] = [None] * len(jobs)
        todo = list(range(len(jobs)))
        for _ in range(KEEP_ROUNDS):
            try:
                await self.add_many([jobs[n] for n in todo])
                existing: list[tuple[str, str]] = []
            except PartialAddError as exc:
                existing = exc.jobs
            except JobExistsError as exc:
                existing = exc.jobs
            replies: list[Any] = []
            if existing:
                replies, _ = await self._batch.run(self._states_calls(existing))
            found = self._states_found(existing, replies)
            todo = self._keep_round(jobs, todo, existing, found, results)
            if not todo:
                return [str(r) for r in results]
        raise JobExistsError([(jobs[n].topic, jobs[n].id) for n in todo])

    async def cancel(self, topic: str, job_id: str) -> CancelOutcome:
        keys, job = self._job_keys(topic, job_id)
        (reply,), _ = await self._batch.run([calls.cancel(keys, self._now(), job)])
        return calls.cancel_outcome(reply)

    async def get(self, topic: str, job_id: str) -> JobInfo | None:
        keys, job = self._job_keys(topic, job_id)
        (reply,), _ = await self._batch.run([calls.inspect(keys, self._now(), job)])
        return calls.inspected(topic, job_id, reply)

    async def schedule(self, spec: ScheduleSpec) -> tuple[str, str | None]:
        """As :meth:`Store.schedule`: ("created" | "updated" | "unchanged", the pending id)."""
        (reply,), _ = await self._batch.run([self._schedule_call(spec)])
        return schedule_calls.scheduled(reply)

    async def unschedule(self, name: str) -> bool:
        """As :meth:`Store.unschedule`: False when the schedule did not exist."""
        (reply,), _ = await self._batch.run([self._unschedule_call(name)])
        return bool(int(reply))

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule of every shard, by name."""
        hashes = await asyncio.gather(*(self.client.hgetall(k.schedules) for k in self.shard_keys))
        return self._schedule_infos(hashes)

    async def stats(self) -> dict[str, dict[str, int]]:
        """Jobs per topic and state, and ``paused`` per topic, as ``DelayQueue.stats``."""
        topics = await asyncio.gather(*(self.client.hkeys(k.topics) for k in self.shard_keys))
        counts = await asyncio.gather(*(self.client.hgetall(k.counts) for k in self.shard_keys))
        gates = await asyncio.gather(*(self.client.hkeys(k.gates) for k in self.shard_keys))
        found = self._stats([t for shard in topics for t in shard], counts)
        return self._with_paused(found, self._paused([f for shard in gates for f in shard]))

    async def jobs(
        self, topic: str, state: State | str, *, after: str | None = None, limit: int = 100
    ) -> JobPage:
        listed, positions, shard_calls = self._jobs_calls(topic, state, after, limit)
        return self._jobs_page(topic, listed, positions, await self._run(shard_calls), limit)

    async def job_entries(self, topic: str, job_id: str) -> list[AuditEntry]:
        """As :meth:`Store.job_entries`: the job's audit entries through the per-job index."""
        keys, job = self._job_keys(topic, job_id)
        (reply,), _ = await self._batch.run([calls.history(keys, self._now(), job)])
        return calls.history_entries(reply)


async def ensure_shards(client: AsyncClient, namespace: str, shards: int | None) -> int:
    """As :func:`actors.storage.namespace_config.ensure_shards`, on an asyncio client."""
    namespace = validation.namespace(namespace)
    wanted = None if shards is None else shards_arg(shards)
    key = config_key(namespace)
    recorded = parse_shards(namespace, await client.hget(key, SHARDS_FIELD))
    if recorded is None:
        proposal = wanted or DEFAULT_SHARDS
        if proposal != 1:
            first = ShardKeys(namespace, 0)
            if await client.exists(first.jobs) or await client.exists(first.audit):
                raise unrecorded_jobs_error(namespace, proposal)
        # HSETNX: of two processes starting at once, the first one's count wins for both.
        await client.hsetnx(key, SHARDS_FIELD, str(proposal))
        recorded = parse_shards(namespace, await client.hget(key, SHARDS_FIELD))
        assert recorded is not None
    return check_shards(namespace, wanted, recorded)


async def ensure_retention(
    client: AsyncClient, namespace: str, retention: AuditRetention | None
) -> AuditRetention:
    """As :func:`actors.storage.namespace_config.ensure_retention`, on an asyncio client."""
    key = config_key(validation.namespace(namespace))
    if retention is not None:
        await client.hset(key, mapping=retention_fields(retention))  # type: ignore[arg-type]
        return retention
    raw = await client.hmget(key, list(RETENTION_FIELDS))
    return parse_retention(namespace, raw) or AuditRetention()


async def open_async_store(
    client: AsyncClient,
    namespace: str,
    clock: Any,
    *,
    shards: int | None = None,
    durability: Durability | None = None,
    retention: AuditRetention | None = None,
    default_topic_config: TopicConfig | None = None,
) -> AsyncStore:
    """As :func:`actors.storage.store.open_store`: checks (or records) the shard count first."""
    if durability is not None and is_cluster(client):
        raise ConfigError(
            "AsyncDelayQueue supports durability on one server or Sentinel, not on Redis "
            "Cluster (WAIT must follow the writes on each node's connection); use DelayQueue"
        )
    count = await ensure_shards(client, namespace, shards)
    retention = await ensure_retention(client, namespace, retention)
    return AsyncStore(
        client,
        namespace,
        clock,
        shards=count,
        retention=retention,
        default_topic_config=default_topic_config,
        durability=durability,
    )
