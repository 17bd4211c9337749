"""redelay: a delay queue for Python services, built on Redis Lua scripts and Pykka actors.

The names below are the public API (docs/api.md lists each). Modules without a leading
underscore at this level are public too (``actors.replay``, ``actors.model``, ``actors.testing``,
...); the subpackages ``runtime``, ``storage``, ``cli`` and ``server`` are redelay's own layers
(docs/architecture.md).
"""

from actors.callbacks import register_callbacks
from actors.clock import Clock, FakeClock, RedisSyncedClock, SystemClock
from actors.errors import (
    ConfigError,
    ErrorCode,
    JobExistsError,
    NotReplicatedError,
    PartialAddError,
    RedelayError,
    RedisServerNotFound,
    ValidationError,
)
from actors.job import Job, Retry
from actors.queue import AuditEvent, DelayQueue
from actors.storage.store import Store
from actors.values import AuditRetention, Durability, JobInfo, Lease, NewJob, TopicConfig

__all__ = [
    "AuditEvent",
    "AuditRetention",
    "Clock",
    "ConfigError",
    "DelayQueue",
    "Durability",
    "ErrorCode",
    "FakeClock",
    "Job",
    "JobExistsError",
    "JobInfo",
    "Lease",
    "NewJob",
    "NotReplicatedError",
    "PartialAddError",
    "RedelayError",
    "RedisServerNotFound",
    "RedisSyncedClock",
    "Retry",
    "Store",
    "SystemClock",
    "TopicConfig",
    "ValidationError",
    "register_callbacks",
]
