"""redelay: a delay queue for Python services, built on Redis Lua scripts and Pykka actors.

The names below are the public API (docs/api.md lists each). Modules without a leading
underscore at this level are public too (``actors.replay``, ``actors.model``, ``actors.testing``,
...); the subpackages ``runtime``, ``storage``, ``cli`` and ``server`` are redelay's own layers
(docs/architecture.md).
"""

from importlib import metadata as _metadata
from pathlib import Path as _Path

from actors.async_queue import AsyncDelayQueue
from actors.callbacks import register_callbacks
from actors.clock import Clock, FakeClock, RedisSyncedClock, SystemClock
from actors.errors import (
    ConfigError,
    ErrorCode,
    JobExistsError,
    NotReplicatedError,
    PartialAddError,
    RedelayError,
    RedisFullError,
    RedisServerNotFound,
    ValidationError,
)
from actors.job import Job, Retry
from actors.producing import AuditEvent
from actors.queue import DelayQueue
from actors.storage.store import Store
from actors.values import (
    AuditRetention,
    Durability,
    JobInfo,
    JobPage,
    Lease,
    LeaseBatch,
    NewJob,
    TopicConfig,
    TopicLimits,
    WorkerInfo,
)


def _version() -> str:
    """The installed distribution's version; in a checkout that is not installed, the version
    its pyproject.toml declares; else ``0+unknown``."""
    try:
        return _metadata.version("redelay")
    except _metadata.PackageNotFoundError:
        pass
    import tomllib

    pyproject = _Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"


__version__ = _version()

__all__ = [
    "AsyncDelayQueue",
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
    "JobPage",
    "Lease",
    "LeaseBatch",
    "NewJob",
    "NotReplicatedError",
    "PartialAddError",
    "RedelayError",
    "RedisFullError",
    "RedisServerNotFound",
    "RedisSyncedClock",
    "Retry",
    "Store",
    "SystemClock",
    "TopicConfig",
    "TopicLimits",
    "ValidationError",
    "WorkerInfo",
    "register_callbacks",
]
