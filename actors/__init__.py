"""redelay: a delay queue for Python services, built on Redis Lua scripts and Pykka actors.

The names below are the public API (docs/api.md lists each). Modules without a leading
underscore at this level are public too (``actors.replay``, ``actors.model``, ``actors.testing``,
...); the subpackages ``runtime``, ``storage``, ``cli`` and ``server`` are redelay's own layers
(docs/architecture.md).

Each name is imported on first use (PEP 562), so that ``import actors`` (and the ``redelay``
command, which imports submodules of it) does not pay for the Pykka runtime, redis.asyncio,
tracing and metrics it may never use. ``from actors import DelayQueue`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # What type checkers and IDEs see: the same names, imported eagerly.
    from actors.async_queue import AsyncDelayQueue
    from actors.callbacks import register_callbacks
    from actors.clock import Clock, FakeClock, RedisSyncedClock, SteppedClock, SystemClock
    from actors.errors import (
        AddStreamError,
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

    __version__: str

# Public name -> the module that defines it.
_SOURCES: dict[str, str] = {
    "AddStreamError": "actors.errors",
    "AsyncDelayQueue": "actors.async_queue",
    "AuditEvent": "actors.producing",
    "AuditRetention": "actors.values",
    "Clock": "actors.clock",
    "ConfigError": "actors.errors",
    "DelayQueue": "actors.queue",
    "Durability": "actors.values",
    "ErrorCode": "actors.errors",
    "FakeClock": "actors.clock",
    "Job": "actors.job",
    "JobExistsError": "actors.errors",
    "JobInfo": "actors.values",
    "JobPage": "actors.values",
    "Lease": "actors.values",
    "LeaseBatch": "actors.values",
    "NewJob": "actors.values",
    "NotReplicatedError": "actors.errors",
    "PartialAddError": "actors.errors",
    "RedelayError": "actors.errors",
    "RedisFullError": "actors.errors",
    "RedisServerNotFound": "actors.errors",
    "RedisSyncedClock": "actors.clock",
    "Retry": "actors.job",
    "Store": "actors.storage.store",
    "SteppedClock": "actors.clock",
    "SystemClock": "actors.clock",
    "TopicConfig": "actors.values",
    "TopicLimits": "actors.values",
    "ValidationError": "actors.errors",
    "WorkerInfo": "actors.values",
    "register_callbacks": "actors.callbacks",
}

__all__ = [
    "AddStreamError",
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
    "SteppedClock",
    "Store",
    "SystemClock",
    "TopicConfig",
    "TopicLimits",
    "ValidationError",
    "WorkerInfo",
    "register_callbacks",
]


def _version() -> str:
    """The installed distribution's version; in a checkout that is not installed, the version
    its pyproject.toml declares; else ``0+unknown``."""
    # Imported here: importlib.metadata alone costs tens of milliseconds at start-up.
    from importlib import metadata

    try:
        return metadata.version("redelay")
    except metadata.PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"


# Hidden from type checkers, which see the imports above: a module __getattr__ would make them
# accept any name (a typo like actors.DelayQeue) as Any.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Imports a public name's module on first use and keeps the name in this module, so
        later lookups are plain attribute reads."""
        if name == "__version__":
            value = _version()
        elif name in _SOURCES:
            value = getattr(importlib.import_module(_SOURCES[name]), name)
        else:
            # AttributeError (not ImportError) lets `from actors import submodule` import it.
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})
