"""The job lifecycle on Redis: one method per Lua transition, typed results, no threads.

Every method is one round trip. Methods that take many jobs take them in one script call
(add_many, ack_many, fail_many, extend_many, release_many); carry and lease take a bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import redis

from actors import _constants as c
from actors import _validation as validation
from actors.clock import Clock
from actors.errors import ConfigError, ErrorCode, JobExistsError, ValidationError
from actors.lifecycle import State
from actors.storage import codec as _record
from actors.storage import reads
from actors.storage.calls import job_info
from actors.storage.keys import ShardKeys, member, split_member
from actors.storage.scripts import ScriptRunner
from actors.values import AuditRetention, JobInfo, Lease, NewJob, Snapshot, TopicConfig


def _s(value: Any) -> str:
    """Redis replies as text (redis-py's reply types are loose, hence Any)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Store:
    """One shard of a namespace. Thread-safe as far as the redis client is (redis-py's pool is)."""

    def __init__(
        self,
        client: redis.Redis,
        namespace: str,
        clock: Clock,
        *,
        shard: int = 0,
        retention: AuditRetention | None = None,
        default_topic_config: TopicConfig | None = None,
    ) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise ConfigError("redelay needs a redis client with decode_responses=False")
        self.client = client
        self.namespace = validation.namespace(namespace)
        self.keys = ShardKeys(self.namespace, shard)
        self.clock = clock
        self.retention = retention or AuditRetention()
        self.default_topic_config = default_topic_config or TopicConfig()
        self.topic_configs: dict[str, TopicConfig] = {}
        self._run = ScriptRunner(client)

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
        now = self.clock.now_ms()
        if delay_ms is not None and due_ms is not None:
            raise ValidationError(
                "delay", "give either a delay or a due time, not both", "one of delay and at"
            )
        if due_ms is not None:
            due = validation.due_ms(due_ms, now, "at")
        else:
            due = now + validation.delay_ms(0 if delay_ms is None else delay_ms, "delay")
        return NewJob(
            topic=validation.topic(topic),
            id=validation.job_id(job_id),
            body=validation.body(body),
            due_ms=due,
            retry_ms=None if retry_ms is None else validation.schedule_ms(retry_ms),
            lease_ms=None if lease_ms is None else validation.lease_ms(lease_ms),
            callback=None if callback is None else validation.callback_url(callback),
        )

    # -- helpers ----------------------------------------------------------------------------

    def _common(self, now_ms: int) -> list[Any]:
        kind, threshold = self.retention.args(now_ms)
        return [now_ms, kind, threshold, self.keys.prefix]

    def _topic_config_blob(self, topic: str) -> bytes:
        config = self.topic_configs.get(topic, self.default_topic_config)
        return _record.pack_topic_config(config.retry_ms, config.lease_ms)

    def _job_args(self, jobs: Sequence[NewJob], now_ms: int) -> list[Any]:
        seen: set[tuple[str, str]] = set()
        args: list[Any] = []
        blobs: dict[str, bytes] = {}
        for job in jobs:
            key = (job.topic, job.id)
            if key in seen:
                raise ValidationError(
                    "jobs",
                    f"{job.topic}/{job.id} appears twice in one batch",
                    "each (topic, id) once per call",
                )
            seen.add(key)
            if job.topic not in blobs:
                blobs[job.topic] = self._topic_config_blob(job.topic)
            record = _record.pack(
                job.body, job.due_ms, now_ms, job.retry_ms, job.lease_ms, job.callback
            )
            args += [member(job.topic, job.id), job.due_ms, record, blobs[job.topic]]
        return args

    @staticmethod
    def _batch(items: Sequence[Any], field_name: str) -> None:
        if len(items) > c.BATCH_MAX_JOBS:
            raise ValidationError(
                field_name, f"has {len(items)} jobs", f"{c.BATCH_MAX_JOBS} per call"
            )

    @staticmethod
    def _member(topic: str, job_id: str) -> str:
        """The member of a job named by a caller; checked, so a bad name writes no event."""
        return member(validation.topic(topic), validation.job_id(job_id))

    # -- transitions ------------------------------------------------------------------------

    def configure_topic(self, topic: str, config: TopicConfig) -> None:
        """Stores the topic's defaults (retry schedule, lease) for every process to use."""
        validation.topic(topic)
        validation.schedule_ms(config.retry_ms)
        validation.lease_ms(config.lease_ms)
        self.topic_configs[topic] = config
        self.client.hset(self.keys.topics, topic, self._topic_config_blob(topic))

    def stored_topic_config(self, topic: str) -> TopicConfig | None:
        blob = self.client.hget(self.keys.topics, topic)
        if blob is None:
            return None
        retry_ms, lease_ms = _record.unpack_topic_config(bytes(blob))  # type: ignore[arg-type]
        return TopicConfig(retry_ms, lease_ms)

    def add_many(self, jobs: Sequence[NewJob], *, replace: bool = False) -> list[str]:
        """Adds jobs in one round trip, all or nothing.

        Without ``replace`` an existing (topic, id) raises JobExistsError and nothing is added.
        With it, returns per job the state it had before ("new" when it did not exist).
        """
        if not jobs:
            return []
        self._batch(jobs, "jobs")
        now = self.clock.now_ms()
        args = [*self._common(now), self.keys.wake_channel, len(jobs)]
        args += self._job_args(jobs, now)
        k = self.keys
        if replace:
            keys = [k.jobs, k.delayed, k.leased, k.tokens, k.dead, k.topics, k.counts, k.audit]
            return [_s(x) for x in self._run("replace", keys, args)]
        result = self._run("add", [k.jobs, k.delayed, k.topics, k.counts, k.audit], args)
        if int(result[0]) == ErrorCode.EXISTS:
            raise JobExistsError([split_member(_s(m)) for m in result[1:]])
        return ["new"] * len(jobs)

    def add(self, job: NewJob, *, replace: bool = False) -> str:
        return self.add_many([job], replace=replace)[0]

    def carry(self, limit: int = c.DEFAULT_CARRY_BATCH) -> tuple[int, int | None]:
        """Moves up to ``limit`` due jobs to ready lists. Returns (moved, next due ms or None)."""
        validation.count(limit, "limit", c.CARRY_LIMIT_MAX)
        k = self.keys
        now = self.clock.now_ms()
        moved, next_due = self._run(
            "carry", [k.delayed, k.jobs, k.counts, k.audit], [*self._common(now), limit]
        )
        return int(moved), (None if int(next_due) < 0 else int(next_due))

    def lease(self, topic: str, limit: int, consumer: str = "") -> list[Lease]:
        """Leases up to ``limit`` ready jobs of ``topic``, oldest first, in one round trip."""
        validation.topic(topic)
        validation.count(limit, "limit", c.LEASE_LIMIT_MAX)
        k = self.keys
        now = self.clock.now_ms()
        keys = [k.ready(topic), k.jobs, k.leased, k.tokens, k.topics, k.counts, k.seq, k.audit]
        flat = self._run("lease", keys, [*self._common(now), topic, limit, consumer])
        leases = []
        for j in range(0, len(flat), 4):
            record = _record.unpack(flat[j + 3])
            _, job_id = split_member(_s(flat[j]))
            leases.append(
                Lease(
                    topic=topic,
                    id=job_id,
                    token=_s(flat[j + 1]),
                    deadline_ms=int(flat[j + 2]),
                    body=record["b"],
                    attempt=int(record.get("a", 0)) + 1,
                    due_ms=int(record["d"]),
                    callback=record.get("c"),
                    lease_ms=record.get("l"),
                )
            )
        return leases

    def ack_many(
        self, acks: Sequence[tuple[str, str, str] | tuple[str, str, str, str]], detail: str = ""
    ) -> list[ErrorCode]:
        """Acks (topic, id, token[, detail]) tuples. Per job: OK, STALE_TOKEN or NOT_LEASED.

        ``detail`` (e.g. an HTTP status) is kept in the acked event; a 4th item overrides it.
        """
        if not acks:
            return []
        self._batch(acks, "acks")
        k = self.keys
        args = [*self._common(self.clock.now_ms()), len(acks)]
        for ack in acks:
            note = ack[3] if len(ack) == 4 else detail
            args += [self._member(ack[0], ack[1]), ack[2], validation.reason(note)]
        result = self._run("ack", [k.jobs, k.leased, k.tokens, k.counts, k.audit], args)
        return [ErrorCode(int(x)) for x in result]

    def ack(self, topic: str, job_id: str, token: str, detail: str = "") -> ErrorCode:
        return self.ack_many([(topic, job_id, token)], detail)[0]

    def fail_many(
        self, failures: Sequence[tuple[str, str, str, str, int | None]]
    ) -> list[str | ErrorCode]:
        """Fails (topic, id, token, reason, retry_after_ms or None) attempts.

        Per job: the new state ("delayed", "ready", "dead", "cancelled") or an ErrorCode.
        """
        if not failures:
            return []
        self._batch(failures, "failures")
        k = self.keys
        args = [*self._common(self.clock.now_ms()), k.wake_channel, len(failures)]
        for topic, job_id, token, why, after_ms in failures:
            after = -1 if after_ms is None else validation.delay_ms(after_ms, "retry_after")
            args += [self._member(topic, job_id), token, validation.reason(why), after]
        keys = [k.jobs, k.delayed, k.leased, k.tokens, k.dead, k.topics, k.counts, k.audit]
        return [
            ErrorCode(int(x)) if isinstance(x, int) else _s(x)
            for x in self._run("fail", keys, args)
        ]

    def fail(
        self, topic: str, job_id: str, token: str, reason: str, retry_after_ms: int | None = None
    ) -> str | ErrorCode:
        return self.fail_many([(topic, job_id, token, reason, retry_after_ms)])[0]

    def extend_many(self, extensions: Sequence[tuple[str, str, str, int]]) -> list[int]:
        """Extends (topic, id, token, extend_ms) leases. Per job: new deadline ms or error code."""
        if not extensions:
            return []
        self._batch(extensions, "extensions")
        k = self.keys
        args = [*self._common(self.clock.now_ms()), len(extensions)]
        for topic, job_id, token, extend_ms in extensions:
            args += [self._member(topic, job_id), token, validation.lease_ms(extend_ms, "extend")]
        return [int(x) for x in self._run("extend", [k.jobs, k.leased, k.tokens, k.audit], args)]

    def release_many(self, releases: Sequence[tuple[str, str, str]]) -> list[int]:
        """Gives (topic, id, token) leases back to the front of the ready list, no attempt counted.

        Per job: 0 released, 1 removed (its cancel was requested), or an ErrorCode value.
        """
        if not releases:
            return []
        self._batch(releases, "releases")
        k = self.keys
        args = [*self._common(self.clock.now_ms()), len(releases)]
        for topic, job_id, token in releases:
            args += [self._member(topic, job_id), token]
        return [
            int(x)
            for x in self._run("release", [k.jobs, k.leased, k.tokens, k.counts, k.audit], args)
        ]

    def expire(self, limit: int = c.DEFAULT_CARRY_BATCH) -> tuple[int, int | None]:
        """Recovers up to ``limit`` expired leases. Returns (count, next deadline ms or None)."""
        validation.count(limit, "limit", c.CARRY_LIMIT_MAX)
        k = self.keys
        keys = [k.jobs, k.delayed, k.leased, k.tokens, k.dead, k.topics, k.counts, k.audit]
        args = [*self._common(self.clock.now_ms()), k.wake_channel, limit]
        count, next_deadline = self._run("expire", keys, args)
        return int(count), (None if int(next_deadline) < 0 else int(next_deadline))

    def cancel(self, topic: str, job_id: str) -> Literal["missing", "removed", "requested"]:
        """Cancels a job: removed when delayed, ready or dead; marked when leased."""
        validation.topic(topic)
        validation.job_id(job_id)
        k = self.keys
        keys = [k.jobs, k.delayed, k.leased, k.tokens, k.dead, k.counts, k.audit]
        code = int(
            self._run("cancel", keys, [*self._common(self.clock.now_ms()), member(topic, job_id)])
        )
        outcomes: tuple[Literal["missing", "removed", "requested"], ...] = (
            "missing",
            "removed",
            "requested",
        )
        return outcomes[code]

    def requeue_dead(self, jobs: Sequence[tuple[str, str]]) -> int:
        """Gives dead jobs a fresh start (attempts reset, due now). Returns how many moved."""
        if not jobs:
            return 0
        self._batch(jobs, "jobs")
        k = self.keys
        args = [*self._common(self.clock.now_ms()), len(jobs)]
        args += [self._member(t, i) for t, i in jobs]
        return sum(
            int(x)
            for x in self._run("requeue", [k.jobs, k.dead, k.delayed, k.counts, k.audit], args)
        )

    def purge_dead(self, jobs: Sequence[tuple[str, str]]) -> int:
        """Deletes dead jobs. Returns how many were deleted."""
        if not jobs:
            return 0
        self._batch(jobs, "jobs")
        k = self.keys
        args = [*self._common(self.clock.now_ms()), len(jobs)]
        args += [self._member(t, i) for t, i in jobs]
        return sum(int(x) for x in self._run("purge", [k.jobs, k.dead, k.counts, k.audit], args))

    # -- reads ------------------------------------------------------------------------------

    def get(self, topic: str, job_id: str) -> JobInfo | None:
        validation.topic(topic)
        validation.job_id(job_id)
        k = self.keys
        result = self._run(
            "inspect",
            [k.jobs, k.delayed, k.leased, k.tokens, k.dead],
            [*self._common(self.clock.now_ms()), member(topic, job_id)],
        )
        if not result:
            return None
        state, blob, token, deadline, dead_since = result
        return job_info(
            topic,
            job_id,
            State(_s(state)),
            _record.unpack(blob),
            _s(token) or None,
            None if int(deadline) < 0 else int(deadline),
            None if int(dead_since) < 0 else int(dead_since),
        )

    def topics(self) -> list[str]:
        return sorted(_s(t) for t in self.client.hkeys(self.keys.topics))

    def stats(self) -> dict[str, dict[str, int]]:
        """Jobs per topic and state, from the counters the scripts keep (O(topics))."""
        counts: dict[str, dict[str, int]] = {}
        for name in self.topics():
            counts[name] = {"delayed": 0, "ready": 0, "leased": 0, "dead": 0}
        for raw_field, raw_value in self.client.hgetall(self.keys.counts).items():
            topic, _, state = _s(raw_field).rpartition("|")
            counts.setdefault(topic, {"delayed": 0, "ready": 0, "leased": 0, "dead": 0})
            counts[topic][state] = int(raw_value)
        return counts

    def dead(self, topic: str | None = None, limit: int = 100) -> list[JobInfo]:
        """Dead jobs, oldest death first (optionally of one topic)."""
        found: list[JobInfo] = []
        start = 0
        while len(found) < limit:
            chunk = self.client.zrange(self.keys.dead, start, start + 499)
            if not chunk:
                break
            start += len(chunk)
            for raw in chunk:
                t, i = split_member(_s(raw))
                if topic is not None and t != topic:
                    continue
                info = self.get(t, i)
                if info is not None:
                    found.append(info)
                if len(found) >= limit:
                    break
        return found

    def earliest_due_ms(self) -> int | None:
        first = self.client.zrange(self.keys.delayed, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    def earliest_deadline_ms(self) -> int | None:
        first = self.client.zrange(self.keys.leased, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    def snapshot(self) -> Snapshot:
        """Reads every job and where it is, in one MULTI; O(jobs). Used by verify and the tests."""
        return reads.read_snapshot(self.client, self.keys)[0]

    def snapshot_with_audit_position(self, shard: int = 0) -> tuple[Snapshot, str | None]:
        """One shard's snapshot and the id of the last audit entry it reflects (None: empty)."""
        if shard != 0:
            raise ValueError(f"a one-shard store has no shard {shard}")
        return reads.read_snapshot(self.client, self.keys)

    @property
    def shard_count(self) -> int:
        return 1

    def dead_keys(self, topic: str | None = None, chunk: int = 1_000) -> Iterator[tuple[str, str]]:
        """Every dead (topic, id), optionally of one topic, read in chunks."""
        return reads.dead_keys(self.client, [self.keys], topic, chunk)

    def audit_length(self) -> int:
        return reads.audit_length(self.client, [self.keys])

    def audit_entries(
        self, start: str = "-", end: str = "+", count: int | None = None
    ) -> list[tuple[str, dict[str, str]]]:
        return reads.audit_entries(self.client, self.keys, start, end, count)

    def iter_audit(self, chunk: int = 5_000) -> Iterator[tuple[str, dict[str, str]]]:
        """Every audit entry, oldest first, read in chunks."""
        return reads.iter_shard_audit(self.client, self.keys, "+", chunk)

    def iter_shard_audit(
        self, shard: int = 0, end: str = "+", chunk: int = 5_000
    ) -> Iterator[tuple[str, dict[str, str]]]:
        """One shard's audit entries up to ``end`` (an entry id, inclusive), oldest first."""
        if shard != 0:
            raise ValueError(f"a one-shard store has no shard {shard}")
        return reads.iter_shard_audit(self.client, self.keys, end, chunk)
