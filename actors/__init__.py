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
from .store import AuditRetention, JobInfo, Lease, NewJob, Store, TopicConfig

__all__ = [
    "AuditRetention",
    "Clock",
    "ConfigError",
    "ErrorCode",
    "FakeClock",
    "JobExistsError",
    "JobInfo",
    "Lease",
    "LeaseLostError",
    "NewJob",
    "RedelayError",
    "RedisServerNotFound",
    "RedisSyncedClock",
    "Store",
    "SystemClock",
    "TopicConfig",
    "ValidationError",
]
