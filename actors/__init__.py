"""redelay: a delay queue for Python services, built on Redis Lua scripts and Pykka actors."""

from .clock import Clock, FakeClock, RedisSyncedClock, SystemClock
from .errors import (
    ConfigError,
    ErrorCode,
    JobExistsError,
    LeaseLostError,
    RedelayError,
    RedisServerNotFound,
    ValidationError,
)
from .job import Job, Retry
from .queue import AuditEvent, DelayQueue
from .store import AuditRetention, JobInfo, Lease, NewJob, Store, TopicConfig

__all__ = [
    "AuditEvent",
    "AuditRetention",
    "Clock",
    "ConfigError",
    "DelayQueue",
    "ErrorCode",
    "FakeClock",
    "Job",
    "JobExistsError",
    "JobInfo",
    "Lease",
    "LeaseLostError",
    "NewJob",
    "RedelayError",
    "RedisServerNotFound",
    "RedisSyncedClock",
    "Retry",
    "Store",
    "SystemClock",
    "TopicConfig",
    "ValidationError",
]
