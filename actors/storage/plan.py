"""What a store operation sends to which shard, and what the replies mean: no I/O here.

:class:`ShardPlan` holds a namespace's shards and settings and turns an operation into one
script call per shard (built by actors/storage/calls.py) and the shards' replies into its
result. :class:`actors.storage.store.Store` runs the calls on redis-py's blocking client and
:class:`actors.storage.async_store.AsyncStore` on ``redis.asyncio``; both inherit this, so the
two give the same results and the same errors for the same input.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from actors import _validation as validation
from actors import schedules as _schedules
from actors._constants import (
    BATCH_MAX_JOBS,
    LIST_LIMIT_MAX,
    LIST_SCAN_ENTRIES,
    OCCURRENCES_AHEAD,
    REDIS_FULL_AUDIT_KEEP,
    SHARDS_MAX,
)
from actors.clock import Clock
from actors.errors import (
    JobExistsError,
    NotReplicatedError,
    PartialAddError,
    ValidationError,
)
from actors.lifecycle import State
from actors.schedules import ScheduleInfo, ScheduleSpec
from actors.storage import calls, listing
from actors.storage import codec as _record
from actors.storage import schedules as schedule_calls
from actors.storage.calls import CallTime, ScriptCall, decoded
from actors.storage.keys import ShardKeys, member, schedule_shard, shard_of
from actors.values import AuditRetention, Durability, JobPage, NewJob, TopicConfig

_STATES = ("delayed", "ready", "leased", "dead")

# add_many(if_exists="keep"): rounds of add-then-look-up before a job that keeps appearing and
# ending in between is reported as existing.
KEEP_ROUNDS = 10


class ShardPlan:
    """A namespace's shards and settings, and the pure half of every store operation."""

    def __init__(
        self,
        namespace: str,
        clock: Clock,
        *,
        shards: int = 1,
        retention: AuditRetention | None = None,
        default_topic_config: TopicConfig | None = None,
        durability: Durability | None = None,
    ) -> None:
        validation.count(shards, "shards", SHARDS_MAX)
        self.namespace = validation.namespace(namespace)
        self.clock = clock
        self.retention = retention or AuditRetention()
        self.default_topic_config = default_topic_config or TopicConfig()
        self.topic_configs: dict[str, TopicConfig] = {}  # this process's topic defaults
        self._config_blobs: dict[str, tuple[TopicConfig, bytes]] = {}  # topic -> packed config
        self.durability = durability
        self.shard_keys = [ShardKeys(self.namespace, s) for s in range(shards)]
        self.keys = self.shard_keys[0]  # the only shard's keys, for one-shard callers
        # Set by Store.memory(): while Redis is full, scripts trim the audit to
        # REDIS_FULL_AUDIT_KEEP.
        self.redis_full = False

    @property
    def shard_count(self) -> int:
        return len(self.shard_keys)

    @property
    def wake_channels(self) -> list[str]:
        return [k.wake_channel for k in self.shard_keys]

    @property
    def ready_channels(self) -> list[str]:
        return [k.ready_channel for k in self.shard_keys]

    # -- helpers ----------------------------------------------------------------------------

    def _now(self) -> CallTime:
        """The clock, read once for every shard's call of one operation."""
        # A clock the scripts follow gives its time; any other is only this process's estimate
        # of the server's, which the scripts read themselves.
        script_now = self.clock.scripts_now_ms()
        follow = script_now is not None
        now_ms = self.clock.now_ms() if script_now is None else script_now
        if self.redis_full:  # history goes before jobs: every transition trims it short
            return CallTime(now_ms, "MAXLEN", str(REDIS_FULL_AUDIT_KEEP), follow)
        kind, threshold = self.retention.args(now_ms)
        return CallTime(now_ms, kind, threshold, follow)

    def _topic_config_blob(self, topic: str) -> bytes:
        config = self.topic_configs.get(topic, self.default_topic_config)
        # Every add sends its topics' defaults: packed once per config, not once per call.
        cached = self._config_blobs.get(topic)
        if cached is not None and cached[0] is config:
            return cached[1]
        blob = _record.pack_topic_config(config.retry_ms, config.lease_ms, config.lost_max)
        self._config_blobs[topic] = (config, blob)
        return blob

    @staticmethod
    def _batch_limit(items: Sequence[Any], field_name: str) -> None:
        if len(items) > BATCH_MAX_JOBS:
            raise ValidationError(
                field_name, f"has {len(items)} jobs", f"{BATCH_MAX_JOBS} per call"
            )

    @staticmethod
    def _member(topic: str, job_id: str) -> str:
        """The member of a job named by a caller; checked, so a bad name writes no event."""
        return member(validation.topic(topic), validation.job_id(job_id))

    def _shard_of(self, topic: str, job_id: str) -> int:
        return shard_of(topic, job_id, len(self.shard_keys))

    def _job_keys(self, topic: str, job_id: str) -> tuple[ShardKeys, str]:
        """The keys of the shard holding a job named by a caller, and its member (checked)."""
        job = self._member(topic, job_id)
        return self.shard_keys[self._shard_of(topic, job_id)], job

    def _group(self, items: Sequence[tuple[Any, ...]]) -> dict[int, list[int]]:
        """Indexes of ``items`` (tuples starting with topic, id) per shard, in input order."""
        if len(self.shard_keys) == 1:  # the common case: no hashing on the hot path
            return {0: list(range(len(items)))}
        groups: dict[int, list[int]] = defaultdict(list)
        for n, item in enumerate(items):
            groups[self._shard_of(str(item[0]), str(item[1]))].append(n)
        return groups

    # -- add --------------------------------------------------------------------------------

    def _check_batch(self, jobs: Sequence[NewJob]) -> None:
        """A batch within the size limit that names each (topic, id) once."""
        self._batch_limit(jobs, "jobs")
        if len(jobs) < 2 or len({(job.topic, job.id) for job in jobs}) == len(jobs):
            return
        seen: set[tuple[str, str]] = set()
        for job in jobs:
            key = (job.topic, job.id)
            if key in seen:
                raise ValidationError(
                    "jobs",
                    f"{job.topic}/{job.id} appears twice in one batch",
                    "each (topic, id) once per call",
                )
            seen.add(key)

    def _add_calls(
        self, jobs: Sequence[NewJob], *, replace: bool
    ) -> tuple[dict[int, list[int]], dict[int, ScriptCall]]:
        """Checks a batch and builds its calls: (job indexes per shard, the call per shard)."""
        self._check_batch(jobs)
        blobs = {topic: self._topic_config_blob(topic) for topic in {j.topic for j in jobs}}
        groups = self._group([(j.topic, j.id) for j in jobs])
        at = self._now()
        shard_calls = {
            s: calls.add(self.shard_keys[s], at, [jobs[n] for n in idx], blobs, replace=replace)
            for s, idx in groups.items()
        }
        return groups, shard_calls

    def _add_results(
        self,
        jobs: Sequence[NewJob],
        groups: Mapping[int, list[int]],
        replies: Mapping[int, Any],
        *,
        replace: bool,
        acked: int | None,
    ) -> list[str]:
        """Per job the state it had before; raises as add_many documents."""
        results: list[str] = ["new"] * len(jobs)
        existing: list[tuple[str, str]] = []
        refused: set[int] = set()  # the shards that added nothing
        for shard, indexes in groups.items():
            if replace:
                states = calls.states_before(replies[shard])
                for n, state in zip(indexes, states, strict=True):
                    results[n] = state
            else:
                found = calls.existing_jobs(replies[shard])
                if found:
                    existing += found
                    refused.add(shard)
        if existing:
            if len(groups) == 1:
                raise JobExistsError(existing)
            raise PartialAddError(existing, self._added(jobs, groups, refused))
        durability = self.durability
        if durability is not None and acked is not None and acked < durability.replicas:
            added = self._added(jobs, groups, refused)
            raise NotReplicatedError(added, acked, durability.replicas, results)
        return results

    @staticmethod
    def _added(
        jobs: Sequence[NewJob], groups: Mapping[int, list[int]], refused: set[int]
    ) -> list[tuple[str, str]]:
        """The (topic, id) of the jobs added, for an error to name: a successful batch does
        not list them."""
        return [
            (jobs[n].topic, jobs[n].id)
            for shard, indexes in groups.items()
            if shard not in refused
            for n in indexes
        ]

    # -- add with if_exists="keep" ------------------------------------------------------------
    # The add script refuses a shard's batch when some of its jobs exist and names them; the
    # store looks those up (_states_calls) and adds the rest again (_keep_round), for at most
    # KEEP_ROUNDS rounds: a job that ends between the two is added on the next round.

    def _states_calls(self, jobs: Sequence[tuple[str, str]]) -> list[ScriptCall]:
        """One inspect call per (topic, id), on its shard, for one round trip."""
        at = self._now()
        return [
            calls.inspect(self.shard_keys[self._shard_of(t, i)], at, member(t, i)) for t, i in jobs
        ]

    @staticmethod
    def _states_found(
        jobs: Sequence[tuple[str, str]], replies: Sequence[Any]
    ) -> dict[tuple[str, str], str]:
        """The state of each of ``jobs`` that exists, from the replies of _states_calls."""
        found = {}
        for (t, i), reply in zip(jobs, replies, strict=True):
            info = calls.inspected(t, i, reply)
            if info is not None:
                found[(t, i)] = str(info.state)
        return found

    def _keep_round(
        self,
        jobs: Sequence[NewJob],
        todo: Sequence[int],
        existing: Sequence[tuple[str, str]],
        found: Mapping[tuple[str, str], str],
        results: list[str | None],
    ) -> list[int]:
        """Records the outcome of one round's add of ``jobs[todo]`` (``existing``: the jobs it
        refused, ``found``: their states) in ``results``; returns the indexes to add again."""
        refused = set(existing)
        left = []
        for n in todo:
            key = (jobs[n].topic, jobs[n].id)
            if key in found:
                results[n] = found[key]
            elif key in refused or self._refused_shard(jobs[n], refused):
                left.append(n)  # its shard added nothing, or it ended meanwhile
            else:
                results[n] = State.NEW
        return left

    def _refused_shard(self, job: NewJob, refused: set[tuple[str, str]]) -> bool:
        """Whether ``job``'s shard refused its batch (it holds one of the ``refused`` jobs)."""
        shard = self._shard_of(job.topic, job.id)
        return any(self._shard_of(t, i) == shard for t, i in refused)

    # -- recurring schedules (actors/schedules.py, docs/schedules.md) -------------------------

    def _schedule_call(self, spec: ScheduleSpec) -> ScriptCall:
        """The schedule script's call for a checked spec, with its first stored times."""
        keys = self.shard_keys[schedule_shard(spec.name, self.shard_count)]
        at = self._now()
        anchor = _schedules.first_anchor_ms(spec, at.now_ms) if spec.every_ms else 0
        times = _schedules.occurrences(spec, at.now_ms, OCCURRENCES_AHEAD, anchor)
        return schedule_calls.schedule(
            keys,
            at,
            spec.name,
            schedule_calls.pack_spec(spec),
            anchor,
            self._topic_config_blob(spec.topic),
            times,
        )

    def _unschedule_call(self, name: str) -> ScriptCall:
        """The unschedule script's call; a bad name raises before anything is sent."""
        keys = self.shard_keys[schedule_shard(_schedules.name(name), self.shard_count)]
        return schedule_calls.unschedule(keys, self._now(), name)

    @staticmethod
    def _schedule_infos(hashes: Sequence[Mapping[Any, Any]]) -> list[ScheduleInfo]:
        """Every schedule, by name, from each shard's schedules hash."""
        found = [
            schedule_calls.unpack_schedule(decoded(name), bytes(blob)).info
            for records in hashes
            for name, blob in records.items()
        ]
        return sorted(found, key=lambda info: info.spec.name)

    # -- jobs -------------------------------------------------------------------------------

    def _jobs_calls(
        self, topic: str, state: State | str, after: str | None, limit: int
    ) -> tuple[State, dict[int, str], dict[int, ScriptCall]]:
        """(the state listed, where each ready list resumes, the list call per shard)."""
        validation.topic(topic)
        listed = listing.listed_state(state)
        validation.count(limit, "limit", LIST_LIMIT_MAX)
        # Where each shard resumes: one position for every shard's ZSET, or per shard in the
        # ready lists (see storage/listing.py).
        positions: dict[int, str] = {}
        starts: dict[int, tuple[int | None, str] | None]
        if listed == State.READY:
            positions = listing.ready_after(after, topic, self.shard_count)
            starts = {
                s: (None, positions[s]) if s in positions else None for s in range(self.shard_count)
            }
        else:
            position = listing.zset_after(after, topic, listed)
            starts = dict.fromkeys(range(self.shard_count), position)
        at = self._now()
        shard_calls = {
            s: calls.list_page(
                self.shard_keys[s], at, topic, listed, limit, LIST_SCAN_ENTRIES, start
            )
            for s, start in starts.items()
        }
        return listed, positions, shard_calls

    @staticmethod
    def _jobs_page(
        topic: str,
        listed: State,
        positions: dict[int, str],
        replies: Mapping[int, Any],
        limit: int,
    ) -> JobPage:
        pages = {s: calls.listed(topic, listed, reply) for s, reply in replies.items()}
        if listed == State.READY:
            return listing.ready_page(topic, pages, positions, limit)
        return listing.zset_page(topic, listed, list(pages.values()), limit)

    # -- stats ------------------------------------------------------------------------------

    @staticmethod
    def _paused(gate_fields: Sequence[Any]) -> set[str]:
        """The topics paused in some shard, from every shard's gate field names."""
        found: set[str] = set()
        for raw in gate_fields:
            topic, _, what = decoded(raw).rpartition("|")
            if what == "paused":
                found.add(topic)
        return found

    @staticmethod
    def _with_paused(
        counts: dict[str, dict[str, int]], paused: set[str]
    ) -> dict[str, dict[str, int]]:
        """``counts`` with ``paused`` (1 or 0) per topic; a paused topic without jobs is listed."""
        for topic in paused:
            counts.setdefault(topic, dict.fromkeys(_STATES, 0))
        for topic, row in counts.items():
            row["paused"] = int(topic in paused)
        return counts

    @staticmethod
    def _stats(
        topics: Sequence[Any], counts: Sequence[Mapping[Any, Any]]
    ) -> dict[str, dict[str, int]]:
        """Jobs per topic and state from every shard's topic names and counters HASH."""
        found: dict[str, dict[str, int]] = {}
        for name in sorted({decoded(t) for t in topics}):
            found[name] = dict.fromkeys(_STATES, 0)
        for shard_counts in counts:
            for raw_field, raw_value in shard_counts.items():
                topic, _, state = decoded(raw_field).rpartition("|")
                into = found.setdefault(topic, dict.fromkeys(_STATES, 0))
                into[state] = into.get(state, 0) + int(raw_value)
        return found
