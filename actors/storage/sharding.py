"""ShardedStore: every shard of a namespace behind the Store interface.

Shard ``s`` of namespace ``ns`` keeps its keys under the hash tag ``{ns.s}``; on Redis Cluster the
shards' slots spread over the masters. A job's shard is ``keys.shard_of(topic, id, shards)``, so
get, cancel and the per-job calls go straight to it.

How each operation covers the shards:

- ``add_many``, ``ack_many``, ``fail_many``, ``extend_many``, ``release_many``, ``requeue_dead``,
  ``purge_dead`` group their jobs by shard and send one script call per shard, all in one
  pipeline. All-or-nothing holds per shard only: when some jobs of an ``add_many`` already exist,
  the shards holding them add nothing, the other shards add theirs, and :class:`PartialAddError`
  says which were added.
- ``carry`` and ``expire`` call every shard in one pipeline; ``limit`` bounds each shard's call.
- ``lease`` reads every shard's ready-list length (one pipeline), then leases from the non-empty
  shards in turn, starting one shard further on each call, so no shard starves.
- reads merge: ``stats`` sums, ``snapshot`` unions, ``earliest_*`` take the minimum, and
  ``iter_audit`` merges the shards' streams in time order (the ``ms`` field, then the entry id),
  keeping each shard's own order, so one job's events stay in the order they were written.

The per-shard work is done by :class:`actors.storage.store.Store` objects. To pipeline their script
calls, a Store method is run twice around one pipeline: first with a runner that records the
call it would make (and stops it there), then with a runner that hands it the reply, which the
method parses as usual. This relies on every Store transition being one script call, which is
Store's own contract.
"""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, ParamSpec, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from actors import _constants as c
from actors import _validation as validation
from actors.clock import Clock
from actors.errors import (
    ErrorCode,
    JobExistsError,
    NotReplicatedError,
    PartialAddError,
    RedelayError,
    ValidationError,
)
from actors.storage import reads
from actors.storage.jobstore import JobStore
from actors.storage.keys import ShardKeys, shard_of
from actors.storage.namespace_config import ensure_retention, ensure_shards
from actors.storage.script_batch import ScriptBatch, ScriptCall, WaitFor
from actors.storage.scripts import ScriptRunner
from actors.storage.store import Store
from actors.values import AuditRetention, Durability, JobInfo, Lease, NewJob, Snapshot, TopicConfig

log = logging.getLogger("actors.sharding")

P = ParamSpec("P")
T = TypeVar("T")

Entry = tuple[str, dict[str, str]]


class ClusterUnavailableError(redis.exceptions.ClusterError):
    """The cluster could not serve a shard (e.g. its slot is uncovered during a failover).

    A RedisError, so actors back off and retry as for any other Redis trouble.
    """


def _cluster_errors(method: Callable[P, T]) -> Callable[P, T]:
    """redis-py raises RedisClusterException (not a RedisError) when slots are uncovered."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except RedisClusterException as exc:
            raise ClusterUnavailableError(str(exc)) from exc

    return wrapper


class _Recorded(Exception):
    """Stops a Store method at its script call (see the module docstring)."""


class _RecordingRunner(ScriptRunner):
    def __init__(self) -> None:  # no scripts to register: it never runs one
        self.call: ScriptCall | None = None

    def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        self.call = ScriptCall(name, keys, args)
        raise _Recorded


class _ReplyRunner(ScriptRunner):
    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self.reply


class ShardedStore:
    """Every shard of a namespace. Thread-safe as far as the redis client is."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        namespace: str,
        clock: Clock,
        *,
        shards: int,
        retention: AuditRetention | None = None,
        default_topic_config: TopicConfig | None = None,
        durability: Durability | None = None,
    ) -> None:
        validation.count(shards, "shards", 1_024)
        self.client = client
        self.clock = clock
        self.durability = durability
        self.shards = [
            Store(
                client,  # type: ignore[arg-type]  # Store's calls all work on RedisCluster
                namespace,
                clock,
                shard=s,
                retention=retention,
                default_topic_config=default_topic_config,
            )
            for s in range(shards)
        ]
        first = self.shards[0]
        self.namespace = first.namespace
        self.default_topic_config = first.default_topic_config
        self.topic_configs = first.topic_configs
        for store in self.shards:
            store.topic_configs = self.topic_configs  # one set of topic defaults for all shards
        self._batch = ScriptBatch(client)
        self._rotation: dict[str, Iterator[int]] = defaultdict(itertools.count)
        self._rotation_lock = threading.Lock()

    @property
    def shard_count(self) -> int:
        return len(self.shards)

    def shard_for(self, topic: str, job_id: str) -> Store:
        return self.shards[shard_of(topic, job_id, len(self.shards))]

    @property
    def wake_channels(self) -> list[str]:
        return [s.keys.wake_channel for s in self.shards]

    @property
    def ready_channels(self) -> list[str]:
        return [ready_channel(s.keys) for s in self.shards]

    # -- running one Store method per shard in one pipeline ---------------------------------

    def _each(
        self,
        work: Mapping[int, Callable[[Store], T]],
        durable: bool = False,
        keep_errors: bool = False,
    ) -> tuple[dict[int, T | BaseException], int | None]:
        """Runs ``work[shard](store)`` for each shard with its script calls in one pipeline.

        Returns per shard the method's result or the exception it raised (with
        ``keep_errors``, also a failed script call's error instead of raising it), and, for a
        durable run, the fewest replicas that acknowledged.
        """
        done: dict[int, T | BaseException] = {}
        calls: dict[int, ScriptCall] = {}
        for shard, fn in work.items():
            planner = copy.copy(self.shards[shard])
            recorder = _RecordingRunner()
            planner._run = recorder
            try:
                done[shard] = fn(planner)  # made no script call (e.g. nothing to do)
            except _Recorded:
                assert recorder.call is not None
                calls[shard] = recorder.call
        if not calls:
            return done, None
        acked: int | None = None
        if durable and self.durability is not None:
            wait = WaitFor(self.durability.replicas, self.durability.timeout_ms)
            replies, acked = self._batch.run_durable(list(calls.values()), wait)
        else:
            replies = self._batch.run(list(calls.values()), raise_errors=not keep_errors)
        for (shard, _), reply in zip(calls.items(), replies, strict=True):
            if isinstance(reply, Exception):  # only with keep_errors: the call failed
                done[shard] = reply
                continue
            replayer = copy.copy(self.shards[shard])
            replayer._run = _ReplyRunner(reply)
            try:
                done[shard] = work[shard](replayer)
            except RedelayError as exc:
                done[shard] = exc
        return done, acked

    def _group(self, items: Sequence[tuple[Any, ...]], field: str) -> dict[int, list[int]]:
        """Indexes of ``items`` (tuples starting with topic, id) per shard."""
        if len(items) > c.BATCH_MAX_JOBS:
            raise ValidationError(field, f"has {len(items)} jobs", f"{c.BATCH_MAX_JOBS} per call")
        groups: dict[int, list[int]] = defaultdict(list)
        for n, item in enumerate(items):
            groups[shard_of(str(item[0]), str(item[1]), len(self.shards))].append(n)
        return groups

    def _per_job(
        self, items: Sequence[Any], field: str, method: Callable[[Store, list[Any]], list[T]]
    ) -> list[T]:
        """Calls ``method`` on each shard with its share of ``items``; results in item order."""
        if not items:
            return []
        groups = self._group(items, field)
        if len(groups) == 1:
            ((shard, _),) = groups.items()
            return method(self.shards[shard], list(items))
        work = {
            shard: functools.partial(_call_with, method, [items[n] for n in indexes])
            for shard, indexes in groups.items()
        }
        done, _ = self._each(work)
        results: list[T | None] = [None] * len(items)
        for shard, indexes in groups.items():
            outcome = done[shard]
            if isinstance(outcome, BaseException):
                raise outcome
            for n, value in zip(indexes, outcome, strict=True):
                results[n] = value
        return results  # type: ignore[return-value]  # every index was filled

    # -- building jobs and topic defaults ---------------------------------------------------

    def new_job(
        self,
        topic: str,
        job_id: str,
        body: Any = None,
        *,
        delay_ms: float | None = None,
        due_ms: float | None = None,
        retry_ms: Sequence[float] | None = None,
        lease_ms: float | None = None,
        callback: str | None = None,
    ) -> NewJob:
        return self.shards[0].new_job(
            topic,
            job_id,
            body,
            delay_ms=delay_ms,
            due_ms=due_ms,
            retry_ms=retry_ms,
            lease_ms=lease_ms,
            callback=callback,
        )

    @_cluster_errors
    def configure_topic(self, topic: str, config: TopicConfig) -> None:
        """Stores the topic's defaults in every shard (the lease script reads its own shard's)."""
        for store in self.shards:
            store.configure_topic(topic, config)

    @_cluster_errors
    def stored_topic_config(self, topic: str) -> TopicConfig | None:
        return self.shards[0].stored_topic_config(topic)

    # -- transitions ------------------------------------------------------------------------

    @_cluster_errors
    def add_many(self, jobs: Sequence[NewJob], *, replace: bool = False) -> list[str]:
        """Adds jobs, one script call per shard in one round trip; all or nothing per shard.

        With durability set, returns once the replicas acknowledged, or raises
        NotReplicatedError (the jobs are on the master).
        """
        if not jobs:
            return []
        groups = self._group([(j.topic, j.id) for j in jobs], "jobs")
        work = {
            shard: functools.partial(_add_with, [jobs[n] for n in indexes], replace)
            for shard, indexes in groups.items()
        }
        durable = self.durability is not None
        if len(groups) == 1 and not durable:
            ((shard, _),) = groups.items()
            return self.shards[shard].add_many(jobs, replace=replace)
        done, acked = self._each(work, durable=durable)
        results: list[str] = ["new"] * len(jobs)
        existing: list[tuple[str, str]] = []
        added: list[tuple[str, str]] = []
        for shard, indexes in groups.items():
            outcome = done[shard]
            if isinstance(outcome, JobExistsError):
                existing += outcome.jobs
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            for n, state in zip(indexes, outcome, strict=True):
                results[n] = state
                added.append((jobs[n].topic, jobs[n].id))
        if existing:
            if len(groups) == 1:
                raise JobExistsError(existing)
            raise PartialAddError(existing, added)
        if self.durability is not None and acked is not None and acked < self.durability.replicas:
            raise NotReplicatedError(added, acked, self.durability.replicas, results)
        return results

    def add(self, job: NewJob, *, replace: bool = False) -> str:
        return self.add_many([job], replace=replace)[0]

    @_cluster_errors
    def carry(self, limit: int = c.DEFAULT_CARRY_BATCH) -> tuple[int, int | None]:
        """Moves up to ``limit`` due jobs per shard. Returns (moved, next due ms or None)."""
        return self._sweep_all(lambda store: store.carry(limit))

    @_cluster_errors
    def expire(self, limit: int = c.DEFAULT_CARRY_BATCH) -> tuple[int, int | None]:
        """Recovers up to ``limit`` expired leases per shard. Returns (count, next deadline)."""
        return self._sweep_all(lambda store: store.expire(limit))

    def _sweep_all(self, fn: Callable[[Store], tuple[int, int | None]]) -> tuple[int, int | None]:
        if len(self.shards) == 1:
            return fn(self.shards[0])
        done, _ = self._each(dict.fromkeys(range(len(self.shards)), fn))
        moved, next_at = 0, None
        for outcome in done.values():
            if isinstance(outcome, BaseException):
                raise outcome
            moved += outcome[0]
            if outcome[1] is not None and (next_at is None or outcome[1] < next_at):
                next_at = outcome[1]
        return moved, next_at

    @_cluster_errors
    def lease(self, topic: str, limit: int, consumer: str = "") -> list[Lease]:
        """Leases up to ``limit`` ready jobs of ``topic`` from the shards in turn.

        Two round trips whatever the number of shards: the ready lists' lengths, then one
        lease call per non-empty shard in one pipeline, each asking for no more than its list
        held, so together they never exceed ``limit``. The shard served first moves on by one
        each call. When some shards fail, the jobs leased from the others are still returned
        (dropping them would strand them until their leases expire).
        """
        validation.topic(topic)
        validation.count(limit, "limit", c.LEASE_LIMIT_MAX)
        if len(self.shards) == 1:
            return self.shards[0].lease(topic, limit, consumer)
        pipe = self.client.pipeline(transaction=False)
        for store in self.shards:
            pipe.llen(store.keys.ready(topic))
        lengths = [int(n) for n in pipe.execute()]
        with self._rotation_lock:
            start = next(self._rotation[topic]) % len(self.shards)
        wanted: dict[int, int] = {}
        left = limit
        for step in range(len(self.shards)):
            shard = (start + step) % len(self.shards)
            if lengths[shard] and left:
                wanted[shard] = min(lengths[shard], left)
                left -= wanted[shard]
        if len(wanted) <= 1:
            return [x for s, n in wanted.items() for x in self.shards[s].lease(topic, n, consumer)]
        work = {s: functools.partial(_lease_with, topic, n, consumer) for s, n in wanted.items()}
        done, _ = self._each(work, keep_errors=True)
        leases: list[Lease] = []
        errors: list[BaseException] = []
        for shard in wanted:  # rotation order
            outcome = done[shard]
            if isinstance(outcome, BaseException):
                errors.append(outcome)
            else:
                leases += outcome
        if errors and not leases:
            raise errors[0]
        if errors:
            log.warning(
                "lease %s: %d shards failed (%s); kept the others' jobs",
                topic,
                len(errors),
                errors[0],
            )
        return leases

    @_cluster_errors
    def ack_many(
        self, acks: Sequence[tuple[str, str, str] | tuple[str, str, str, str]], detail: str = ""
    ) -> list[ErrorCode]:
        return self._per_job(acks, "acks", lambda store, part: store.ack_many(part, detail))

    def ack(self, topic: str, job_id: str, token: str, detail: str = "") -> ErrorCode:
        return self.ack_many([(topic, job_id, token)], detail)[0]

    @_cluster_errors
    def fail_many(
        self, failures: Sequence[tuple[str, str, str, str, int | None]]
    ) -> list[str | ErrorCode]:
        return self._per_job(failures, "failures", Store.fail_many)

    def fail(
        self, topic: str, job_id: str, token: str, reason: str, retry_after_ms: int | None = None
    ) -> str | ErrorCode:
        return self.fail_many([(topic, job_id, token, reason, retry_after_ms)])[0]

    @_cluster_errors
    def extend_many(self, extensions: Sequence[tuple[str, str, str, int]]) -> list[int]:
        return self._per_job(extensions, "extensions", Store.extend_many)

    @_cluster_errors
    def release_many(self, releases: Sequence[tuple[str, str, str]]) -> list[int]:
        return self._per_job(releases, "releases", Store.release_many)

    @_cluster_errors
    def cancel(self, topic: str, job_id: str) -> Literal["missing", "removed", "requested"]:
        return self.shard_for(topic, job_id).cancel(topic, job_id)

    @_cluster_errors
    def requeue_dead(self, jobs: Sequence[tuple[str, str]]) -> int:
        return self._summed(jobs, Store.requeue_dead)

    @_cluster_errors
    def purge_dead(self, jobs: Sequence[tuple[str, str]]) -> int:
        return self._summed(jobs, Store.purge_dead)

    def _summed(
        self, jobs: Sequence[tuple[str, str]], method: Callable[[Store, list[tuple[str, str]]], int]
    ) -> int:
        if not jobs:
            return 0
        groups = self._group(jobs, "jobs")
        work = {
            shard: functools.partial(_call_with, method, [jobs[n] for n in indexes])
            for shard, indexes in groups.items()
        }
        done, _ = self._each(work)
        total = 0
        for outcome in done.values():
            if isinstance(outcome, BaseException):
                raise outcome
            total += outcome
        return total

    # -- reads ------------------------------------------------------------------------------

    @_cluster_errors
    def get(self, topic: str, job_id: str) -> JobInfo | None:
        return self.shard_for(topic, job_id).get(topic, job_id)

    @_cluster_errors
    def topics(self) -> list[str]:
        return sorted({t for store in self.shards for t in store.topics()})

    @_cluster_errors
    def stats(self) -> dict[str, dict[str, int]]:
        total: dict[str, dict[str, int]] = {}
        for store in self.shards:
            for topic, counts in store.stats().items():
                into = total.setdefault(topic, {"delayed": 0, "ready": 0, "leased": 0, "dead": 0})
                for state, n in counts.items():
                    into[state] = into.get(state, 0) + n
        return total

    @_cluster_errors
    def dead(self, topic: str | None = None, limit: int = 100) -> list[JobInfo]:
        """Dead jobs of every shard, oldest death first."""
        found = [info for store in self.shards for info in store.dead(topic, limit)]
        found.sort(key=lambda info: info.dead_since_ms or 0)
        return found[:limit]

    @_cluster_errors
    def earliest_due_ms(self) -> int | None:
        return _min_or_none(store.earliest_due_ms() for store in self.shards)

    @_cluster_errors
    def earliest_deadline_ms(self) -> int | None:
        return _min_or_none(store.earliest_deadline_ms() for store in self.shards)

    @_cluster_errors
    def snapshot(self) -> Snapshot:
        return reads.merge_snapshots(store.snapshot() for store in self.shards)

    def iter_audit(self, chunk: int = 5_000) -> Iterator[Entry]:
        """Every shard's audit entries, merged in time order (see the module docstring)."""
        return reads.merge_audit(
            reads.iter_shard_audit(self.client, s.keys, "+", chunk) for s in self.shards
        )

    def iter_shard_audit(self, shard: int, end: str = "+", chunk: int = 5_000) -> Iterator[Entry]:
        """One shard's audit entries up to ``end`` (an entry id, inclusive), oldest first."""
        return reads.iter_shard_audit(self.client, self.shards[shard].keys, end, chunk)

    def audit_length(self) -> int:
        return reads.audit_length(self.client, [s.keys for s in self.shards])

    def dead_keys(self, topic: str | None = None, chunk: int = 1_000) -> Iterator[tuple[str, str]]:
        """Every dead (topic, id) of every shard, optionally of one topic, read in chunks."""
        return reads.dead_keys(self.client, [s.keys for s in self.shards], topic, chunk)

    @_cluster_errors
    def snapshot_with_audit_position(self, shard: int) -> tuple[Snapshot, str | None]:
        """One shard's snapshot and the id of the last audit entry it reflects (None: empty)."""
        return reads.read_snapshot(self.client, self.shards[shard].keys)


def shard_stores(store: JobStore) -> list[Store]:
    """The one-shard Stores behind ``store``, for code that reads a shard's keys directly."""
    if isinstance(store, ShardedStore):
        return list(store.shards)
    assert isinstance(store, Store), f"not a redelay store: {type(store).__name__}"
    return [store]


def ready_channel(keys: ShardKeys) -> str:
    """The shard's pub/sub channel for ready notices (published by the scripts in lua/)."""
    return keys.prefix + "ready"


def _call_with(method: Callable[[Store, Any], T], part: list[Any], store: Store) -> T:
    return method(store, part)


def _lease_with(topic: str, limit: int, consumer: str, store: Store) -> list[Lease]:
    return store.lease(topic, limit, consumer)


def _add_with(jobs: list[NewJob], replace: bool, store: Store) -> list[str]:
    return store.add_many(jobs, replace=replace)


def _min_or_none(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def open_store(
    client: redis.Redis | RedisCluster,
    namespace: str,
    clock: Clock,
    *,
    shards: int | None = None,
    durability: Durability | None = None,
    retention: AuditRetention | None = None,
    default_topic_config: TopicConfig | None = None,
) -> JobStore:
    """The store for a namespace: checks (or records) its shard count first.

    A plain :class:`Store` for one shard on a single server without durability (its listeners
    can block on the ready list); a :class:`ShardedStore` otherwise.
    """
    count = ensure_shards(client, namespace, shards)
    retention = ensure_retention(client, namespace, retention)
    if count == 1 and durability is None and not isinstance(client, RedisCluster):
        return Store(
            client, namespace, clock, retention=retention, default_topic_config=default_topic_config
        )
    return ShardedStore(
        client,
        namespace,
        clock,
        shards=count,
        retention=retention,
        default_topic_config=default_topic_config,
        durability=durability,
    )
