"""The namespace's stored configuration: how many shards it has.

Stored once, in the HASH ``redelay:{<namespace>}:config`` (its own hash tag, so it lives on one
node whatever the shards do). The first process to use a namespace records its shard count;
every later process must agree, because a job's shard is ``crc32(member) mod shards``: a process
with another count would look for jobs in the wrong shard and never carry some of them.
"""

from __future__ import annotations

from typing import Any

from . import _constants as c
from . import validation
from .errors import ConfigError
from .keys import ShardKeys

SHARDS_FIELD = "shards"
SHARDS_MAX = 1_024  # each shard costs every carrier and sweeper one script call per round


def config_key(namespace: str) -> str:
    return f"{c.KEY_ROOT}:{{{namespace}}}:config"


def _shards_arg(shards: object) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= SHARDS_MAX:
        raise ConfigError(f"shards must be an integer from 1 to {SHARDS_MAX}, got {shards!r}")
    return shards


def stored_shards(client: Any, namespace: str) -> int | None:
    """The recorded shard count, or None when the namespace has none recorded yet."""
    raw = client.hget(config_key(validation.namespace(namespace)), SHARDS_FIELD)
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    if not text.isdigit():
        raise ConfigError(f"{config_key(namespace)} holds shards={text!r}, not a number")
    return int(text)


def _has_unrecorded_jobs(client: Any, namespace: str) -> bool:
    """Shard 0 holds jobs or history written before the shard count was recorded."""
    keys = ShardKeys(namespace, 0)
    return bool(client.exists(keys.jobs)) or bool(client.exists(keys.audit))


def ensure_shards(client: Any, namespace: str, shards: int | None = None) -> int:
    """The namespace's shard count, recording ``shards`` (default 1) if none is recorded.

    Raises ConfigError, naming both numbers, when ``shards`` disagrees with the record.
    ``shards=None`` adopts whatever is recorded.
    """
    namespace = validation.namespace(namespace)
    wanted = None if shards is None else _shards_arg(shards)
    recorded = stored_shards(client, namespace)
    if recorded is None:
        proposal = wanted or c.DEFAULT_SHARDS
        if proposal != 1 and _has_unrecorded_jobs(client, namespace):
            raise ConfigError(
                f"namespace {namespace!r} already holds jobs in one shard (written before its "
                f"shard count was recorded); this process was configured with {proposal} "
                "shards. Drain it or use a new namespace for a sharded queue."
            )
        # HSETNX: of two processes starting at once, the first one's count wins for both.
        client.hsetnx(config_key(namespace), SHARDS_FIELD, str(proposal))
        recorded = stored_shards(client, namespace)
        assert recorded is not None
    if wanted is not None and wanted != recorded:
        raise ConfigError(
            f"namespace {namespace!r} is stored with {recorded} shard"
            f"{'' if recorded == 1 else 's'}; this process was configured with {wanted}. "
            "A namespace's shard count cannot change while it holds jobs: start every process "
            f"with shards={recorded} (or leave shards unset to adopt it), or use a new namespace."
        )
    return recorded
