"""The job lifecycle on Redis: one method per Lua transition, typed results, no threads.

A namespace is N shards (one by default). Shard ``s`` keeps its keys under the hash tag
``{ns.s}``; on Redis Cluster the shards' slots spread over the masters. A job's shard is
``keys.shard_of(topic, id, N)``, so get, cancel and the per-job calls go straight to it.

Each method validates its input and reads the clock once, groups the work by shard, builds one
script call per shard (actors/storage/calls.py), sends them in one round trip per node
(:class:`ScriptBatch`) and parses the replies. How each operation covers the shards:

- ``add_many``, ``ack_many``, ``fail_many``, ``extend_many``, ``release_many``, ``requeue_dead``,
  ``purge_dead``: one script call per shard holding some of the jobs. All-or-nothing holds per
  shard: when some jobs of an ``add_many`` already exist, the shards holding them add nothing,
  the other shards add theirs, and :class:`PartialAddError` says which were added.
- ``carry`` and ``expire`` call every shard; ``limit`` bounds each shard's call.
- ``lease`` reads every shard's ready-list length, then leases from the non-empty shards in
  turn, starting one shard further on each call, so no shard starves.
- ``jobs`` (one page of a topic's jobs in one state) calls every shard and merges their pages
  in order (storage/listing.py).
- reads merge: ``stats`` sums, ``snapshot`` unions (jobs and problems), ``earliest_*`` take the
  minimum, and ``iter_audit`` merges the shards' streams in time order (see reads.py).

With one shard every transition is one script call, one round trip.
"""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ParamSpec, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from actors import _validation as validation
from actors import schedules as _schedules
from actors._constants import (
    CARRY_LIMIT_MAX,
    DEFAULT_CARRY_BATCH,
    IN_FLIGHT_MAX,
    LEASE_LIMIT_MAX,
    LOST_MAX_MAX,
    OCCURRENCES_AHEAD,
    REDIS_FULL_CLEAR_MARGIN,
    REDIS_FULL_CLEAR_MARGIN_BYTES,
    REDIS_FULL_MARGIN,
    REDIS_FULL_MARGIN_BYTES,
    REFILL_BELOW,
)
from actors._validation import IfExists
from actors.clock import Clock
from actors.errors import (
    ConfigError,
    ErrorCode,
    JobExistsError,
    PartialAddError,
)
from actors.lifecycle import State
from actors.producing import build_job
from actors.schedules import ScheduleInfo, ScheduleSpec
from actors.storage import calls, gates, heartbeats, reads
from actors.storage import codec as _record
from actors.storage import schedules as schedule_calls
from actors.storage.add_stream import OnAdded, add_stream
from actors.storage.calls import CallTime, CancelOutcome, ScriptCall, decoded
from actors.storage.keys import ShardKeys, member, schedule_shard
from actors.storage.namespace_config import (
    ensure_retention,
    ensure_shards,
    stored_retention,
    stored_shards,
)
from actors.storage.plan import KEEP_ROUNDS, ShardPlan
from actors.storage.script_batch import ScriptBatch, WaitFor
from actors.storage.scripts import raise_if_full
from actors.storage.sent import AckAndLeaseResult, SentAckAndLease
from actors.storage.sent import parse as parse_ack_and_lease
from actors.values import (
    AuditEntry,
    AuditRetention,
    Durability,
    JobInfo,
    JobPage,
    Lease,
    LeaseBatch,
    NewJob,
    Snapshot,
    Swept,
    TopicConfig,
    TopicLimits,
    WorkerInfo,
)

log = logging.getLogger("actors.store")

P = ParamSpec("P")
T = TypeVar("T")


class ClusterUnavailableError(redis.exceptions.ClusterError):
    """The cluster could not serve a shard (e.g. its slot is uncovered during a failover).

    A RedisError, so actors back off and retry as for any other Redis trouble.
    """


def _cluster_errors(method: Callable[P, T]) -> Callable[P, T]:
    """redis-py raises RedisClusterException (not a RedisError) when slots are uncovered.

    And redis-py 7.2 (fixed by 8.1), when a cluster node refuses the connection during a
    failover, records a metric of the error by reading ``.db`` of the ClusterNode it put on it,
    which has none: the AttributeError hides the ConnectionError it was handling (and the retry
    redis-py would have made). That error is raised again, so callers back off and retry as for
    any connection error; every other AttributeError goes through unchanged.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except RedisClusterException as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        except AttributeError as exc:
            masked = exc.__context__
            if isinstance(masked, redis.RedisError) and "'ClusterNode'" in str(exc):
                raise masked from None
            raise

    return wrapper


class Store(ShardPlan):
    """Every shard of a namespace. Thread-safe as far as the redis client is."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        namespace: str,
        clock: Clock,
        *,
        shards: int = 1,
        retention: AuditRetention | None = None,
        default_topic_config: TopicConfig | None = None,
        durability: Durability | None = None,
    ) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise ConfigError("redelay needs a redis client with decode_responses=False")
        super().__init__(
            namespace,
            clock,
            shards=shards,
            retention=retention,
            default_topic_config=default_topic_config,
            durability=durability,
        )
        # Typed as the plain client, as callers use it: every command the store sends has the
        # same method on redis-py's RedisCluster.
        self.client: redis.Redis = client  # type: ignore[assignment]
        self._batch = ScriptBatch(client)
        self._rotation: dict[str, Iterator[int]] = defaultdict(itertools.count)
        self._rotation_lock = threading.Lock()

    def on_client(self, client: redis.Redis) -> Store:
        """This store (its shards, settings and topic configs, shared) on another client of the
        same Redis: a worker's actors use one whose connections its stop can cut (fence.py)."""
        twin = copy.copy(self)
        twin.client = client
        twin._batch = ScriptBatch(client)
        return twin

    def drop_connections(self, in_use: bool = False) -> None:
        """Closes the client's idle connections (held ones and pooled ones), and with ``in_use``
        those in use too: a call waiting on one fails at once, and redis-py or the caller
        retries it on a new one. For when one connection was found dead without a word: the
        others went the same way, most likely, and a call on one would wait out its socket
        timeout first. A call whose reply is lost so may have run (lost replies are a case every
        script handles; tests/storage/test_lost_replies.py)."""
        held = self._batch.runner.held
        if held is not None:
            held.close()  # idle ones back to the pool, which closes them with its own
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:
            pool.disconnect(inuse_connections=in_use)

    # -- building jobs ----------------------------------------------------------------------

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
        """Validates one job; raises ValidationError naming the field. Defaults to due now."""
        return build_job(
            self.clock.now_ms(),
            topic,
            job_id,
            body,
            delay_ms=delay_ms,
            due_ms=due_ms,
            retry_ms=retry_ms,
            lease_ms=lease_ms,
            callback=callback,
        )

    # -- helpers ----------------------------------------------------------------------------

    def _run(self, shard_calls: dict[int, ScriptCall]) -> dict[int, Any]:
        """Each shard's reply; raises the first error after every call was tried."""
        replies = self._batch.run(list(shard_calls.values()))
        return dict(zip(shard_calls, replies, strict=True))

    def _per_job(
        self,
        items: Sequence[Any],
        rows: Sequence[Any],
        build: Callable[[ShardKeys, CallTime, list[Any]], ScriptCall],
        parse: Callable[[Any], list[T]],
    ) -> list[T]:
        """One call per shard with its share of ``rows`` (built from ``items``, which start with
        topic and id); the parsed per-job results in input order."""
        groups = self._group(items)
        at = self._now()
        replies = self._run(
            {s: build(self.shard_keys[s], at, [rows[n] for n in idx]) for s, idx in groups.items()}
        )
        results: list[T | None] = [None] * len(items)
        for shard, indexes in groups.items():
            for n, value in zip(indexes, parse(replies[shard]), strict=True):
                results[n] = value
        return results  # type: ignore[return-value]  # every index was filled

    # -- topic defaults ---------------------------------------------------------------------

    @_cluster_errors
    def configure_topic(self, topic: str, config: TopicConfig) -> None:
        """Stores the topic's defaults in every shard (the lease script reads its own shard's)."""
        validation.topic(topic)
        validation.schedule_ms(config.retry_ms)
        validation.lease_ms(config.lease_ms)
        validation.count(config.lost_max, "lost_max", LOST_MAX_MAX)
        self.topic_configs[topic] = config
        blob = self._topic_config_blob(topic)
        for keys in self.shard_keys:
            # Unchanged defaults are not written again, so a worker restarting on a full Redis
            # (which refuses the HSET) can start.
            if self.client.hget(keys.topics, topic) == blob:
                continue
            try:
                self.client.hset(keys.topics, topic, blob)
            except redis.ResponseError as exc:
                raise_if_full(f"storing the defaults of topic {topic!r}", exc)
                raise

    @_cluster_errors
    def stored_topic_config(self, topic: str) -> TopicConfig | None:
        blob = self.client.hget(self.keys.topics, topic)
        if blob is None:
            return None
        unpacked = _record.unpack_topic_config(bytes(blob))  # type: ignore[arg-type]
        return TopicConfig(*unpacked)

    # -- topic gates: pause and limits --------------------------------------------------------

    @_cluster_errors
    def pause(self, topic: str, paused: bool = True) -> bool:
        """Pauses (or resumes) ``topic`` in every shard: no lease hands out its jobs until it is
        resumed; due jobs still become ready. Each shard that changes writes a ``paused``
        (``resumed``) topic event. True when some shard changed."""
        validation.topic(topic)
        at = self._now()
        replies = self._run(
            {s: calls.pause(k, at, topic, paused) for s, k in enumerate(self.shard_keys)}
        )
        return any(calls.changed(reply) for reply in replies.values())

    @_cluster_errors
    def paused_topics(self) -> set[str]:
        """The topics paused in some shard."""
        return self._paused([f for keys in self.shard_keys for f in self.client.hkeys(keys.gates)])

    @_cluster_errors
    def set_limits(self, topic: str, limits: TopicLimits) -> None:
        """Stores ``topic``'s limits for every process (an empty TopicLimits lifts them).

        Each shard's lease script enforces its share: the rate divided evenly, max_in_flight
        split with at least one per shard (exact with one shard; see docs/concepts.md)."""
        validation.topic(topic)
        rate = None if limits.rate is None else gates.rate_arg(limits.rate)
        flight = (
            None
            if limits.max_in_flight is None
            else validation.count(limits.max_in_flight, "max_in_flight", IN_FLIGHT_MAX)
        )
        pipe = self.client.pipeline(transaction=False)
        for s, keys in enumerate(self.shard_keys):
            fields = gates.shard_fields(topic, rate, flight, s, self.shard_count)
            # A new rate starts from a clean slate: the old arrival time was for another interval.
            pipe.hdel(keys.gates, *(f"{topic}|{name}" for name in gates.LIMIT_FIELDS))
            for name, value in fields.items():
                pipe.hset(keys.gates, name, value)
        pipe.execute()

    @_cluster_errors
    def limits(self, topic: str) -> TopicLimits:
        """``topic``'s stored limits (read from the first shard; every shard holds them)."""
        validation.topic(topic)
        raw = self.client.hget(self.keys.gates, f"{topic}|limits")
        return gates.parse_limits(None if raw is None else decoded(raw))

    @_cluster_errors
    def all_limits(self) -> dict[str, TopicLimits]:
        """Every limited topic's limits, by topic (one read of the first shard's gates, which
        holds every topic's description, as each shard does)."""
        fields = self.client.hgetall(self.keys.gates)
        found = {}
        for name, raw in fields.items():
            topic, _, field = decoded(name).rpartition("|")
            if field == "limits":
                found[topic] = gates.parse_limits(decoded(raw))
        return dict(sorted(found.items()))

    # -- transitions ------------------------------------------------------------------------

    @_cluster_errors
    def add_many(
        self, jobs: Sequence[NewJob], *, replace: bool = False, if_exists: IfExists | None = None
    ) -> list[str]:
        """Adds jobs, one script call per shard in one round trip; all or nothing per shard.

        ``if_exists`` says what an existing (topic, id) does: "error" (the default) raises
        JobExistsError (PartialAddError when other shards added theirs); "replace" (or
        ``replace=True``) reschedules it; "keep" leaves it as it is and adds the others. Returns
        per job "new" when it did not exist, else the state it had (replace) or has (keep).
        With durability set, returns once the replicas acknowledged, or raises
        NotReplicatedError (the jobs are on the master).
        """
        mode = validation.if_exists(if_exists, replace)
        if not jobs:
            return []
        if mode == "keep":
            self._check_batch(jobs)
            return self._add_keeping(jobs)
        replace = mode == "replace"
        groups, shard_calls = self._add_calls(jobs, replace=replace)
        acked: int | None = None
        try:
            if self.durability is None:
                replies = self._run(shard_calls)
            else:
                wait = WaitFor(self.durability.replicas, self.durability.timeout_ms)
                sent, acked = self._batch.run_durable(list(shard_calls.values()), wait)
                replies = dict(zip(shard_calls, sent, strict=True))
        except redis.ResponseError as exc:
            # The add script's first write is refused, so a refused add wrote nothing.
            raise_if_full("add", exc)
            raise
        return self._add_results(jobs, groups, replies, replace=replace, acked=acked)

    def add(self, job: NewJob, *, replace: bool = False, if_exists: IfExists | None = None) -> str:
        return self.add_many([job], replace=replace, if_exists=if_exists)[0]

    @_cluster_errors
    def add_stream(
        self,
        batches: Iterable[Sequence[NewJob]],
        *,
        if_exists: IfExists | None = None,
        on_added: OnAdded | None = None,
    ) -> list[str]:
        """Adds batches of jobs (each at most BATCH_MAX_JOBS, each all or nothing as one
        add_many call; one that names a job twice is cut before the second, which is added
        after the first), sending the next batch before reading the last one's reply, so the
        caller's work on the next batch (an iterator may build it as it is asked) overlaps
        Redis's on the last. Per job what add_many returns, in order; raises AddStreamError
        with the results so far at the first batch that fails (actors/storage/add_stream.py).
        ``on_added(first, count)`` hears of each batch once Redis added it.
        """
        return add_stream(self, batches, validation.if_exists(if_exists, False), on_added)

    def _add_keeping(self, jobs: Sequence[NewJob]) -> list[str]:
        """add_many with ``if_exists="keep"``: adds the jobs that do not exist and leaves the
        others untouched; per job "new", or the state the existing job is in (ShardPlan's
        _keep_round says how a round goes)."""
        results: list[str | None] = [None] * len(jobs)
        todo = list(range(len(jobs)))
        for _ in range(KEEP_ROUNDS):
            try:
                self.add_many([jobs[n] for n in todo])
                existing: list[tuple[str, str]] = []
            except PartialAddError as exc:
                existing = exc.jobs
            except JobExistsError as exc:
                existing = exc.jobs
            replies = self._batch.run(self._states_calls(existing)) if existing else []
            found = self._states_found(existing, replies)
            todo = self._keep_round(jobs, todo, existing, found, results)
            if not todo:
                return [str(r) for r in results]
        raise JobExistsError([(jobs[n].topic, jobs[n].id) for n in todo])

    def carry(self, limit: int = DEFAULT_CARRY_BATCH) -> tuple[int, int | None]:
        """Moves up to ``limit`` due jobs per shard to ready lists.

        Returns (moved, next due ms or None).
        """
        swept = self.carry_swept(limit)
        return swept.moved, swept.next_ms

    @_cluster_errors
    def carry_swept(self, limit: int = DEFAULT_CARRY_BATCH) -> Swept:
        """``carry``, with how long until the next due time by the server's clock."""
        validation.count(limit, "limit", CARRY_LIMIT_MAX)
        at = self._now()
        replies = self._run({s: calls.carry(k, at, limit) for s, k in enumerate(self.shard_keys)})
        moved, next_at, next_in = 0, None, None
        low: list[str] = []
        latest_now = None
        for reply in replies.values():
            count, next_ms, now_ms, names = schedule_calls.carried(reply)
            moved, low = moved + count, low + names
            latest_now = now_ms if latest_now is None else max(latest_now, now_ms)
            if next_ms is not None and (next_at is None or next_ms < next_at):
                next_at = next_ms
            if next_ms is not None and (next_in is None or next_ms - now_ms < next_in):
                next_in = next_ms - now_ms
        if low:
            # The carry already made each next occurrence; these lists only ran low. A failure
            # here is retried by the next carry of an occurrence, long before a list runs dry.
            try:
                self.refill_schedules(low)
            except redis.RedisError as exc:
                log.warning("carry: refilling schedules %s failed (%s)", low, exc)
            next_at = self.earliest_due_ms()
            # Its shard is not known here: measured from the latest clock of the call, a wait
            # that may end early (the next carry then finds nothing and measures again), never
            # late.
            next_in = None if next_at is None or latest_now is None else next_at - latest_now
        return Swept(moved, next_at, next_in, latest_now)

    def expire(
        self, limit: int = DEFAULT_CARRY_BATCH, outcomes: Counter[tuple[str, str]] | None = None
    ) -> tuple[int, int | None]:
        """Recovers up to ``limit`` expired leases per shard: each a lost lease (see
        lua/_lost.lua). ``outcomes``, when given, counts the jobs per (topic, event): ``lost``,
        ``quarantined`` or ``cancelled``.

        Returns (count, next deadline ms or None).
        """
        swept = self.expire_swept(limit, outcomes)
        return swept.moved, swept.next_ms

    @_cluster_errors
    def expire_swept(
        self, limit: int = DEFAULT_CARRY_BATCH, outcomes: Counter[tuple[str, str]] | None = None
    ) -> Swept:
        """``expire``, with how long until the next deadline by the server's clock."""
        validation.count(limit, "limit", CARRY_LIMIT_MAX)
        return self._sweep(calls.expire, limit, outcomes)

    def _sweep(
        self,
        build: Callable[[ShardKeys, CallTime, int], ScriptCall],
        limit: int,
        outcomes: Counter[tuple[str, str]] | None = None,
    ) -> Swept:
        at = self._now()
        replies = self._run({s: build(k, at, limit) for s, k in enumerate(self.shard_keys)})
        moved, next_at, next_in = 0, None, None
        latest_now = None
        for reply in replies.values():
            if outcomes is not None:
                outcomes.update(calls.expire_outcomes(reply))
            count, next_ms, now_ms = calls.count_and_next(reply)
            latest_now = now_ms if latest_now is None else max(latest_now, now_ms)
            moved += count
            if next_ms is not None and (next_at is None or next_ms < next_at):
                next_at = next_ms
            if next_ms is not None and (next_in is None or next_ms - now_ms < next_in):
                next_in = next_ms - now_ms
        return Swept(moved, next_at, next_in, latest_now)

    def lease(self, topic: str, limit: int, consumer: str = "") -> list[Lease]:
        """Leases up to ``limit`` ready jobs of ``topic``: ``lease_batch`` without the wait."""
        return self.lease_batch(topic, limit, consumer).leases

    @_cluster_errors
    def lease_batch(self, topic: str, limit: int, consumer: str = "") -> LeaseBatch:
        """Leases up to ``limit`` ready jobs of ``topic``, oldest first per shard, as far as the
        topic's gate (pause, rate, max_in_flight) lets them go; with the wait it asks for.

        One round trip with one shard. With more, two: the ready lists' lengths, then one lease
        call per non-empty shard, each asking for no more than its list held, so together they
        never exceed ``limit``. The shard served first moves on by one each call. When some
        shards fail, the jobs leased from the others are still returned (dropping them would
        strand them until their leases expire). The wait: None when every shard called is
        paused, else the shortest a gated shard asked for (0: none was).
        """
        validation.topic(topic)
        validation.count(limit, "limit", LEASE_LIMIT_MAX)
        if len(self.shard_keys) == 1:
            reply = self._batch.run([calls.lease(self.keys, self._now(), topic, limit, consumer)])
            return calls.lease_batch(topic, reply[0])
        wanted = self._lease_shares(topic, limit)
        if not wanted:
            return LeaseBatch([])
        at = self._now()
        shard_calls = [
            calls.lease(self.shard_keys[s], at, topic, n, consumer) for s, n in wanted.items()
        ]
        replies = self._batch.run(shard_calls, raise_errors=len(shard_calls) <= 1)
        found: list[Lease] = []
        errors: list[Exception] = []
        waits: list[int | None] = []
        for reply in replies:  # rotation order
            if isinstance(reply, Exception):
                errors.append(reply)
            else:
                batch = calls.lease_batch(topic, reply)
                found += batch.leases
                waits.append(batch.wait_ms)
        if errors and not found:
            raise errors[0]
        if errors:
            log.warning(
                "lease %s: %d shards failed (%s); kept the others' jobs",
                topic,
                len(errors),
                errors[0],
            )
        return LeaseBatch(found, _shortest_wait(waits))

    def _lease_shares(self, topic: str, limit: int) -> dict[int, int]:
        """How many to lease from each non-empty shard, in this call's rotation order."""
        pipe = self.client.pipeline(transaction=False)
        for keys in self.shard_keys:
            pipe.llen(keys.ready(topic))
        lengths = [int(n) for n in pipe.execute()]
        shards = len(self.shard_keys)
        with self._rotation_lock:
            start = next(self._rotation[topic]) % shards
        wanted: dict[int, int] = {}
        left = limit
        for step in range(shards):
            shard = (start + step) % shards
            if lengths[shard] and left:
                wanted[shard] = min(lengths[shard], left)
                left -= wanted[shard]
        return wanted

    @_cluster_errors
    def ack_many(
        self, acks: Sequence[tuple[str, str, str] | tuple[str, str, str, str]], detail: str = ""
    ) -> list[ErrorCode]:
        """Acks (topic, id, token[, detail]) tuples. Per job: OK, STALE_TOKEN or NOT_LEASED.

        ``detail`` (e.g. an HTTP status) is kept in the acked event; a 4th item overrides it.
        """
        if not acks:
            return []
        self._batch_limit(acks, "acks")
        rows = [
            (
                self._member(a[0], a[1]),
                a[2],
                validation.reason(a[3] if len(a) == 4 else detail),
            )
            for a in acks
        ]
        return self._per_job(acks, rows, calls.ack, calls.error_codes)

    def ack(self, topic: str, job_id: str, token: str, detail: str = "") -> ErrorCode:
        return self.ack_many([(topic, job_id, token)], detail)[0]

    @_cluster_errors
    def ack_and_lease(
        self, acks: Sequence[tuple[str, str, str, str]], topic: str, limit: int, consumer: str
    ) -> AckAndLeaseResult:
        """``ack_many(acks)`` and then ``lease_batch(topic, limit, consumer)`` in one round trip:
        one pipeline of the two script calls (the lease sees the acks' effects, e.g. on a
        max_in_flight limit). One shard only. Each half's error comes back in its place rather
        than raised, so a caller whose acks failed still gets the jobs the lease took (and a
        caller whose lease failed still learns what its acks did). The acks name jobs this
        store leased (a worker's pool is the caller), so their topic and id are not checked
        again: a name that was never leased is answered NOT_LEASED (a ``rejected`` event, as
        for any refused ack) and no job changes. Their details are, being what handlers
        returned."""
        batch = self._ack_and_lease_calls(acks, topic, limit, consumer)
        return parse_ack_and_lease(topic, self._batch.run(batch, raise_errors=False))

    @_cluster_errors
    def send_ack_and_lease(
        self, acks: Sequence[tuple[str, str, str, str]], topic: str, limit: int, consumer: str
    ) -> SentAckAndLease:
        """``ack_and_lease`` in two halves: this sends the calls and returns, and ``result()``
        on what it returns reads the replies, so the caller can work while Redis does. On a
        client whose connections are not held (a cluster) the calls run here."""
        batch = self._ack_and_lease_calls(acks, topic, limit, consumer)
        sent = self._batch.send(batch)
        if sent is None:
            result = parse_ack_and_lease(topic, self._batch.run(batch, raise_errors=False))
            return SentAckAndLease.finished(topic, result)
        return SentAckAndLease(topic, sent)

    def _ack_and_lease_calls(
        self, acks: Sequence[tuple[str, str, str, str]], topic: str, limit: int, consumer: str
    ) -> list[ScriptCall]:
        if len(self.shard_keys) != 1:
            raise ValueError("ack_and_lease: a namespace of one shard only")
        self._batch_limit(acks, "acks")
        validation.topic(topic)
        validation.count(limit, "limit", LEASE_LIMIT_MAX)
        rows = [(member(a[0], a[1]), a[2], validation.reason(a[3])) for a in acks]
        at = self._now()
        return [calls.ack(self.keys, at, rows), calls.lease(self.keys, at, topic, limit, consumer)]

    @_cluster_errors
    def fail_many(
        self,
        failures: Sequence[tuple[str, str, str, str, int | None]],
        tracebacks: Sequence[str] | None = None,
    ) -> list[str | ErrorCode]:
        """Fails (topic, id, token, reason, retry_after_ms or None) attempts; ``tracebacks``, one
        per failure ("" for none), are kept (their end) with the failed attempt.

        Per job: the new state ("delayed", "ready", "dead", "cancelled") or an ErrorCode.
        """
        if not failures:
            return []
        self._batch_limit(failures, "failures")
        if tracebacks is None:
            tracebacks = [""] * len(failures)
        elif len(tracebacks) != len(failures):
            raise ValueError("tracebacks: give one per failure")
        rows = [
            (
                self._member(topic, job_id),
                token,
                validation.reason(why),
                -1 if after_ms is None else validation.delay_ms(after_ms, "retry_after"),
                validation.traceback_tail(trace),
            )
            for (topic, job_id, token, why, after_ms), trace in zip(
                failures, tracebacks, strict=True
            )
        ]
        return self._per_job(failures, rows, calls.fail, calls.fail_outcomes)

    def fail(
        self,
        topic: str,
        job_id: str,
        token: str,
        reason: str,
        retry_after_ms: int | None = None,
        traceback: str = "",
    ) -> str | ErrorCode:
        return self.fail_many([(topic, job_id, token, reason, retry_after_ms)], [traceback])[0]

    @_cluster_errors
    def extend_many(self, extensions: Sequence[tuple[str, str, str, int]]) -> list[int]:
        """Extends (topic, id, token, extend_ms) leases. Per job: new deadline ms or error code."""
        if not extensions:
            return []
        self._batch_limit(extensions, "extensions")
        rows = [
            (self._member(topic, job_id), token, validation.lease_ms(extend_ms, "extend"))
            for topic, job_id, token, extend_ms in extensions
        ]
        return self._per_job(extensions, rows, calls.extend, calls.integers)

    @_cluster_errors
    def release_many(self, releases: Sequence[tuple[str, str, str]]) -> list[int]:
        """Gives (topic, id, token) leases back to the front of the ready list, no attempt counted.

        Per job: 0 released, 1 removed (its cancel was requested), or an ErrorCode value.
        """
        if not releases:
            return []
        self._batch_limit(releases, "releases")
        rows = [(self._member(topic, job_id), token) for topic, job_id, token in releases]
        return self._per_job(releases, rows, calls.release, calls.integers)

    @_cluster_errors
    def cancel(self, topic: str, job_id: str) -> CancelOutcome:
        """Cancels a job: removed when delayed, ready or dead; marked when leased."""
        keys, job = self._job_keys(topic, job_id)
        (reply,) = self._batch.run([calls.cancel(keys, self._now(), job)])
        return calls.cancel_outcome(reply)

    @_cluster_errors
    def requeue_dead(self, jobs: Sequence[tuple[str, str]]) -> int:
        """Gives dead jobs a fresh start (attempts reset, due now). Returns how many moved."""
        return self._dead_jobs(jobs, calls.requeue)

    @_cluster_errors
    def purge_dead(self, jobs: Sequence[tuple[str, str]]) -> int:
        """Deletes dead jobs. Returns how many were deleted."""
        return self._dead_jobs(jobs, calls.purge)

    def _dead_jobs(
        self,
        jobs: Sequence[tuple[str, str]],
        build: Callable[[ShardKeys, CallTime, Sequence[str]], ScriptCall],
    ) -> int:
        if not jobs:
            return 0
        self._batch_limit(jobs, "jobs")
        members = [self._member(t, i) for t, i in jobs]
        groups = self._group(jobs)
        at = self._now()
        replies = self._run(
            {
                s: build(self.shard_keys[s], at, [members[n] for n in idx])
                for s, idx in groups.items()
            }
        )
        return sum(calls.total(reply) for reply in replies.values())

    # -- recurring schedules (actors/schedules.py, docs/schedules.md) -------------------------

    @_cluster_errors
    def schedule(self, spec: ScheduleSpec) -> tuple[str, str | None]:
        """Creates or updates a schedule and makes its pending occurrence (one script call).

        Returns ("created" | "updated" | "unchanged", the pending occurrence's id or None).
        The spec is checked by the caller (actors/schedules.py).
        """
        call = self._schedule_call(spec)
        (reply,) = self._batch.run([call])
        return schedule_calls.scheduled(reply)

    @_cluster_errors
    def unschedule(self, name: str) -> bool:
        """Deletes a schedule and its pending occurrence if still delayed; False if unknown."""
        (reply,) = self._batch.run([self._unschedule_call(name)])
        return bool(int(reply))

    @_cluster_errors
    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule of every shard, by name."""
        return self._schedule_infos(
            [self.client.hgetall(keys.schedules) for keys in self.shard_keys]
        )

    @_cluster_errors
    def refill_schedules(self, names: Sequence[str]) -> int:
        """Tops up the stored occurrence times of the named schedules (the carry asks for it).

        Reads each schedule, computes the times after its last one, and appends them with a
        script that refuses them if the schedule changed meanwhile. Returns how many times were
        appended.
        """
        appended = 0
        for name in dict.fromkeys(names):
            keys = self.shard_keys[schedule_shard(name, self.shard_count)]
            blob = self.client.hget(keys.schedules, name)
            if blob is None:
                continue
            stored = schedule_calls.unpack_schedule(name, bytes(blob))  # type: ignore[arg-type]
            at = self._now()
            after = max(stored.last_ms or 0, at.now_ms)
            wanted = max(1, OCCURRENCES_AHEAD - len(stored.info.upcoming_ms))
            times = _schedules.occurrences(stored.info.spec, after, wanted, stored.anchor_ms)
            call = schedule_calls.refill(keys, at, name, stored.generation, times)
            (reply,) = self._batch.run([call])
            appended += max(0, int(reply))
        return appended

    @_cluster_errors
    def tend_schedules(self) -> int:
        """Refills every schedule whose stored times ran low or that has no pending occurrence.

        The carry asks for a refill whenever it moves an occurrence on and the times ran low, so
        this only matters when the processes that carried died before refilling, many times in a
        row; the watchdog's carrier calls it once a minute. Returns how many times were appended.
        """
        wanting = [
            info.spec.name
            for info in self.schedules()
            if info.pending_id is None or len(info.upcoming_ms) < REFILL_BELOW
        ]
        return self.refill_schedules(wanting) if wanting else 0

    # -- reads ------------------------------------------------------------------------------

    @_cluster_errors
    def get(self, topic: str, job_id: str) -> JobInfo | None:
        keys, job = self._job_keys(topic, job_id)
        (reply,) = self._batch.run([calls.inspect(keys, self._now(), job)])
        return calls.inspected(topic, job_id, reply)

    def job_entries(self, topic: str, job_id: str) -> list[AuditEntry]:
        """The job's audit entries, oldest first, read through its shard's per-job index in one
        round trip: O(its own events), whatever the stream's length. Entries retention trimmed
        are gone; events an older redelay wrote, before the index existed, are not indexed."""
        (entries,) = self.jobs_entries([(topic, job_id)])
        return entries

    @_cluster_errors
    def jobs_entries(self, jobs: Sequence[tuple[str, str]]) -> list[list[AuditEntry]]:
        """``job_entries`` of each (topic, id), read in one round trip per node."""
        if not jobs:
            return []
        self._batch_limit(jobs, "jobs")
        at = self._now()
        named = [self._job_keys(topic, job_id) for topic, job_id in jobs]
        replies = self._batch.run([calls.history(keys, at, job) for keys, job in named])
        return [calls.history_entries(reply) for reply in replies]

    @_cluster_errors
    def topics(self) -> list[str]:
        return sorted({decoded(t) for k in self.shard_keys for t in self.client.hkeys(k.topics)})

    @_cluster_errors
    def stats(self, *, with_paused: bool = False) -> dict[str, dict[str, int]]:
        """Jobs per topic and state, from the counters the scripts keep (O(topics)); with
        ``with_paused``, also ``paused`` (1 or 0) per topic."""
        counts = self._stats(
            [t for k in self.shard_keys for t in self.client.hkeys(k.topics)],
            [self.client.hgetall(k.counts) for k in self.shard_keys],
        )
        return self._with_paused(counts, self.paused_topics()) if with_paused else counts

    @_cluster_errors
    def dead(self, topic: str | None = None, limit: int = 100) -> list[JobInfo]:
        """Dead jobs, oldest death first (optionally of one topic)."""
        found: list[JobInfo] = []
        for keys in self.shard_keys:
            shard_found = 0
            for t, i in reads.dead_keys(self.client, [keys], topic, 500):
                info = self.get(t, i)
                if info is not None:
                    found.append(info)
                    shard_found += 1
                if shard_found >= limit:
                    break
        found.sort(key=lambda info: info.dead_since_ms or 0)
        return found[:limit]

    @_cluster_errors
    def jobs(
        self, topic: str, state: State | str, *, after: str | None = None, limit: int = 100
    ) -> JobPage:
        """One page of ``topic``'s jobs in ``state``: delayed by due time, ready in list order,
        leased by deadline, dead by time of death. One script call per shard, in one round trip
        per node; ``after`` is the previous page's ``next_after`` (see storage/listing.py)."""
        listed, positions, shard_calls = self._jobs_calls(topic, state, after, limit)
        return self._jobs_page(topic, listed, positions, self._run(shard_calls), limit)

    @_cluster_errors
    def earliest_due_ms(self) -> int | None:
        # The index's first score is its first bucket's earliest due time.
        return self._earliest(lambda keys: keys.delayed)

    @_cluster_errors
    def earliest_deadline_ms(self) -> int | None:
        return self._earliest(lambda keys: keys.leased)

    def _earliest(self, zset: Callable[[ShardKeys], str]) -> int | None:
        firsts = [self.client.zrange(zset(k), 0, 0, withscores=True) for k in self.shard_keys]
        return min((int(first[0][1]) for first in firsts if first), default=None)

    @_cluster_errors
    def erase(self) -> int:
        """Deletes every key of the namespace's shards (jobs, audit streams, counters); returns
        how many. Not a transition: it writes no audit event. For starting a demo or a test over,
        never for a namespace workers use. The namespace's recorded configuration stays."""
        deleted = 0
        for keys in self.shard_keys:
            batch: list[Any] = []
            # SCAN in pages, so a large namespace never blocks the server in one KEYS call.
            for key in self.client.scan_iter(match=keys.prefix + "*", count=1_000):
                batch.append(key)
                if len(batch) >= 500:
                    deleted += int(self.client.delete(*batch))
                    batch = []
            if batch:
                deleted += int(self.client.delete(*batch))
        return deleted

    def snapshot(self) -> Snapshot:
        """Every job and where it is, each shard read in one MULTI; O(jobs). For verify and
        the tests: ``problems`` names jobs the scripts could never have left as they are."""
        return reads.merge_snapshots(
            reads.read_snapshot(self.client, keys)[0] for keys in self.shard_keys
        )

    @_cluster_errors
    def snapshot_with_audit_position(self, shard: int = 0) -> tuple[Snapshot, str | None]:
        """One shard's snapshot and the id of the last audit entry it reflects (None: empty)."""
        return reads.read_snapshot(self.client, self.shard_keys[shard])

    def dead_keys(self, topic: str | None = None, chunk: int = 1_000) -> Iterator[tuple[str, str]]:
        """Every dead (topic, id) of every shard, optionally of one topic, read in chunks."""
        return reads.dead_keys(self.client, self.shard_keys, topic, chunk)

    @_cluster_errors
    def memory(self) -> dict[str, Any]:
        """``used_memory`` and ``maxmemory`` (0: no limit) of the fullest node, and ``full``:
        whether it is within 1% (at least 64 KiB) of its limit or over it, and once full, until
        it is 10% (at least 256 KiB) under it (INFO memory, one call per node). While full, this
        store's scripts trim the audit stream to ``REDIS_FULL_AUDIT_KEEP`` entries.

        Redis refuses an add when its memory, with the add's own request buffered, is over the
        limit, and subtracts buffers INFO counts: right after a refusal ``used_memory`` may be a
        little under ``maxmemory``, hence the margin. A client leaving, or a query buffer that
        Redis shrinks, frees tens of KiB at any moment, hence its floor in bytes."""
        if isinstance(self.client, RedisCluster):
            found = self.client.info("memory", target_nodes=RedisCluster.PRIMARIES)
            infos = [found] if "used_memory" in found else list(found.values())
        else:
            infos = [self.client.info("memory")]
        nodes = [(int(i["used_memory"]), int(i.get("maxmemory", 0))) for i in infos]
        used, limit = max(nodes, key=lambda n: n[0] / n[1] if n[1] else 0.0)
        # Hysteresis: trimming the audit frees memory at once, and a flag that cleared then
        # would let the next transitions write long history again.
        if self.redis_full:
            margin = max(limit * REDIS_FULL_CLEAR_MARGIN, REDIS_FULL_CLEAR_MARGIN_BYTES)
        else:
            margin = max(limit * REDIS_FULL_MARGIN, REDIS_FULL_MARGIN_BYTES)
        self.redis_full = limit > 0 and used >= limit - margin
        return {"used_memory": used, "maxmemory": limit, "full": self.redis_full}

    @_cluster_errors
    def trim_audit(self, keep: int) -> None:
        """Trims every shard's audit stream to about its newest ``keep`` entries: XTRIM frees
        memory and Redis runs it when full, so a full Redis sheds history before anything else."""
        for keys in self.shard_keys:
            self.client.xtrim(keys.audit, maxlen=keep, approximate=True)

    @_cluster_errors
    def audit_length(self, shard: int | None = None) -> int:
        """Entries in every shard's audit stream, or in one shard's."""
        keys = self.shard_keys if shard is None else [self.shard_keys[shard]]
        return reads.audit_length(self.client, keys)

    @_cluster_errors
    def audit_entries(
        self, start: str = "-", end: str = "+", count: int | None = None
    ) -> list[AuditEntry]:
        """Each shard's entries from ``start`` to ``end`` (entry ids, at most ``count`` per
        shard), merged in time order."""
        return list(
            reads.merge_audit(
                reads.audit_entries(self.client, k, start, end, count) for k in self.shard_keys
            )
        )

    @_cluster_errors
    def recent_audit(self, count: int = 1_000, *, after: str | None = None) -> list[AuditEntry]:
        """Each shard's newest ``count`` audit entries (1 to 100,000), only those after the
        entry id ``after`` when given, merged in time order: what happened lately, at a cost
        that does not grow with the stream."""
        validation.count(count, "count", 100_000)
        return list(
            reads.merge_audit(
                reads.recent_audit(self.client, k, count, after) for k in self.shard_keys
            )
        )

    @_cluster_errors
    def workers(self) -> list[WorkerInfo]:
        """The namespace's live workers, from their heartbeats (actors/storage/heartbeats.py)."""
        return heartbeats.workers(self.client, self.namespace)

    def iter_audit(self, chunk: int = 5_000, *, start: str = "-") -> Iterator[AuditEntry]:
        """Every shard's audit entries from ``start`` (an entry id, or "<ms>-0" for a time),
        merged in time order, read ``chunk`` at a time."""
        return reads.merge_audit(
            reads.iter_shard_audit(self.client, k, "+", chunk, start=start) for k in self.shard_keys
        )

    def iter_shard_audit(
        self, shard: int = 0, end: str = "+", chunk: int = 5_000, *, start: str = "-"
    ) -> Iterator[AuditEntry]:
        """One shard's audit entries from ``start`` to ``end`` (entry ids, inclusive), oldest
        first, read ``chunk`` at a time."""
        return reads.iter_shard_audit(self.client, self.shard_keys[shard], end, chunk, start=start)


def _shortest_wait(waits: Sequence[int | None]) -> int | None:
    """The wait of several shards' lease replies: paused only when all were, else the shortest
    a gated shard asked for."""
    if waits and all(wait is None for wait in waits):
        return None
    return min((wait for wait in waits if wait), default=0)


def open_store(
    client: redis.Redis | RedisCluster,
    namespace: str,
    clock: Clock,
    *,
    shards: int | None = None,
    durability: Durability | None = None,
    retention: AuditRetention | None = None,
    default_topic_config: TopicConfig | None = None,
    record: bool = True,
) -> Store:
    """The store for a namespace: checks (or records) its shard count and retention first.

    ``record=False`` only reads them (one shard and the default retention when nothing is
    recorded), for tools that inspect a namespace and must not create its configuration.
    """
    if record:
        count = ensure_shards(client, namespace, shards)
        retention = ensure_retention(client, namespace, retention)
    else:
        count = stored_shards(client, namespace) or shards or 1
        retention = stored_retention(client, namespace) or retention
    return Store(
        client,
        namespace,
        clock,
        shards=count,
        retention=retention,
        default_topic_config=default_topic_config,
        durability=durability,
    )
