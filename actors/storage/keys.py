"""Key names of one shard of a namespace, and the namespace's config key.

Every key of a shard carries the hash tag ``{<namespace>.<shard>}``, so every script touches one
cluster slot. A namespace has one shard by default; more shards give more hash tags. The names
themselves are in actors/_constants.py (the Lua scripts get theirs from there too).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from actors import _constants


@dataclass(frozen=True, slots=True)
class ShardKeys:
    namespace: str
    shard: int = 0
    # Every key name starts with it, and a script call names several: made once, not per name.
    prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "prefix", f"{_constants.KEY_ROOT}:{{{self.namespace}.{self.shard}}}:"
        )

    @property
    def jobs(self) -> str:
        return self.prefix + _constants.JOBS_KEY

    @property
    def delayed(self) -> str:
        """The delayed set's index: a bucket's first member -> its due time (lua/_delayed.lua)."""
        return self.prefix + _constants.DELAYED_KEY

    def due_bucket(self, name: str) -> str:
        """The delayed set's bucket named after its first member ``name`` (the first bucket:
        perhaps a job carried since): a ZSET of member -> due time (ms)."""
        return self.prefix + _constants.DUE_BUCKET_PREFIX + name

    @property
    def leased(self) -> str:
        return self.prefix + _constants.LEASED_KEY

    @property
    def tokens(self) -> str:
        return self.prefix + _constants.TOKENS_KEY

    @property
    def dead(self) -> str:
        return self.prefix + _constants.DEAD_KEY

    @property
    def topics(self) -> str:
        return self.prefix + _constants.TOPICS_KEY

    @property
    def counts(self) -> str:
        return self.prefix + _constants.COUNTS_KEY

    @property
    def seq(self) -> str:
        return self.prefix + _constants.SEQ_KEY

    @property
    def audit(self) -> str:
        return self.prefix + _constants.AUDIT_KEY

    @property
    def history(self) -> str:
        """The per-job index of the audit stream (written by _lib.lua's audit())."""
        return self.prefix + _constants.HISTORY_KEY

    @property
    def history_previous(self) -> str:
        """The index's previous generation: ids written before ``history`` began."""
        return self.prefix + _constants.HISTORY_PREVIOUS_KEY

    def audited(self, *structures: str) -> list[str]:
        """A transition script's keys: its own ``structures``, then the audit stream and its
        per-job index, declared last (lua/_lib.lua)."""
        return [*structures, self.audit, self.history]

    def ending(self, *structures: str) -> list[str]:
        """As :meth:`audited`, for a script that ends jobs: it may drop the index's previous
        generation (rotate_history_index in lua/_lib.lua), so that is declared last."""
        return [*self.audited(*structures), self.history_previous]

    @property
    def history_keys(self) -> tuple[str, str]:
        """Both generations of the index, the previous one first (as history reads them)."""
        return self.history_previous, self.history

    @property
    def schedules(self) -> str:
        return self.prefix + _constants.SCHEDULES_KEY

    @property
    def gates(self) -> str:
        return self.prefix + _constants.GATES_KEY

    @property
    def wake_channel(self) -> str:
        return self.prefix + _constants.WAKE_CHANNEL

    @property
    def ready_channel(self) -> str:
        """Pub/sub channel of the shard's ready notices (published by the scripts in lua/)."""
        return self.prefix + _constants.READY_CHANNEL

    @property
    def slot_probe(self) -> str:
        """A key that never exists; the scripts check it to notice a slot migration."""
        return self.prefix + _constants.SLOT_PROBE_KEY

    def ready(self, topic: str) -> str:
        return self.prefix + _constants.READY_KEY_PREFIX + topic

    def outbox_marker(self, member: str) -> str:
        """The token of the outbox write last applied to the job (actors/outbox/_apply.py)."""
        return self.prefix + _constants.OUTBOX_MARKER_PREFIX + member


# The field of each history index generation that holds when it began (lua/_lib.lua).
HISTORY_GENERATION_FIELD = _constants.HISTORY_GENERATION_FIELD


def config_key(namespace: str) -> str:
    """The namespace's one key outside its shards, under its own hash tag."""
    return f"{_constants.KEY_ROOT}:{{{namespace}}}:{_constants.CONFIG_KEY}"


def worker_key(namespace: str, name: str) -> str:
    """A worker's heartbeat key (expires by itself when the worker stops beating)."""
    return f"{_constants.KEY_ROOT}:{{{namespace}}}:{_constants.WORKER_KEY_PREFIX}{name}"


def workers_key(namespace: str) -> str:
    """The index of worker names, so listing them needs no SCAN (same hash tag as their keys)."""
    return f"{_constants.KEY_ROOT}:{{{namespace}}}:{_constants.WORKERS_KEY}"


def member(topic: str, job_id: str) -> str:
    """The string a job is stored under. Topics never contain the separator."""
    return f"{topic}{_constants.MEMBER_SEPARATOR}{job_id}"


def split_member(value: str) -> tuple[str, str]:
    topic, _, job_id = value.partition(_constants.MEMBER_SEPARATOR)
    return topic, job_id


def shard_of(topic: str, job_id: str, shards: int) -> int:
    """The shard of a job, from (topic, id) only, so get and cancel go straight to it."""
    if shards == 1:
        return 0
    if job_id.startswith(_constants.OCCURRENCE_ID_PREFIX):
        # A schedule's occurrence lives with its schedule, whose shard depends on its name only
        # (the occurrence time ends the id, after the last ":").
        return schedule_shard(
            job_id[len(_constants.OCCURRENCE_ID_PREFIX) :].rpartition(":")[0], shards
        )
    return zlib.crc32(member(topic, job_id).encode()) % shards


def schedule_shard(name: str, shards: int) -> int:
    """The shard of a schedule: the carry that moves one occurrence on makes the next there."""
    if shards == 1:
        return 0
    return zlib.crc32((_constants.OCCURRENCE_ID_PREFIX + name).encode()) % shards
