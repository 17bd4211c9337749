"""The namespace's stored configuration: how many shards it has, and its audit retention.

Stored once, in the HASH ``redelay:{<namespace>}:config`` (its own hash tag, so it lives on one
node whatever the shards do). The first process to use a namespace records its shard count;
every later process must agree, because a job's shard is ``crc32(member) mod shards``: a process
with another count would look for jobs in the wrong shard and never carry some of them.
"""

from __future__ import annotations

from typing import Any

from actors import _validation as validation
from actors._constants import DEFAULT_SHARDS, SHARDS_MAX
from actors.errors import ConfigError
from actors.storage.keys import ShardKeys, config_key
from actors.values import AuditRetention

SHARDS_FIELD = "shards"
RETENTION_FIELDS = ("audit_trim", "audit_maxlen", "audit_retention_ms")


def shards_arg(shards: object) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= SHARDS_MAX:
        raise ConfigError(f"shards must be an integer from 1 to {SHARDS_MAX}, got {shards!r}")
    return shards


def stored_shards(client: Any, namespace: str) -> int | None:
    """The recorded shard count, or None when the namespace has none recorded yet."""
    return parse_shards(
        namespace, client.hget(config_key(validation.namespace(namespace)), SHARDS_FIELD)
    )


def parse_shards(namespace: str, raw: Any) -> int | None:
    """The shard count from the config HASH's field (None: not recorded)."""
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


def unrecorded_jobs_error(namespace: str, proposal: int) -> ConfigError:
    return ConfigError(
        f"namespace {namespace!r} already holds jobs in one shard (written before its "
        f"shard count was recorded); this process was configured with {proposal} "
        "shards. Drain it or use a new namespace for a sharded queue."
    )


def check_shards(namespace: str, wanted: int | None, recorded: int) -> int:
    """``recorded``, unless this process was configured with another count."""
    if wanted is not None and wanted != recorded:
        raise ConfigError(
            f"namespace {namespace!r} is stored with {recorded} shard"
            f"{'' if recorded == 1 else 's'}; this process was configured with {wanted}. "
            "A namespace's shard count cannot change while it holds jobs: start every process "
            f"with shards={recorded} (or leave shards unset to adopt it), or use a new namespace."
        )
    return recorded


def ensure_shards(client: Any, namespace: str, shards: int | None = None) -> int:
    """The namespace's shard count, recording ``shards`` (default 1) if none is recorded.

    Raises ConfigError, naming both numbers, when ``shards`` disagrees with the record.
    ``shards=None`` adopts whatever is recorded.
    """
    namespace = validation.namespace(namespace)
    wanted = None if shards is None else shards_arg(shards)
    recorded = stored_shards(client, namespace)
    if recorded is None:
        proposal = wanted or DEFAULT_SHARDS
        if proposal != 1 and _has_unrecorded_jobs(client, namespace):
            raise unrecorded_jobs_error(namespace, proposal)
        # HSETNX: of two processes starting at once, the first one's count wins for both.
        client.hsetnx(config_key(namespace), SHARDS_FIELD, str(proposal))
        recorded = stored_shards(client, namespace)
        assert recorded is not None
    return check_shards(namespace, wanted, recorded)


def stored_retention(client: Any, namespace: str) -> AuditRetention | None:
    """The recorded audit retention, or None when none is recorded."""
    raw = client.hmget(config_key(validation.namespace(namespace)), *RETENTION_FIELDS)
    return parse_retention(namespace, raw)


def parse_retention(namespace: str, raw: Any) -> AuditRetention | None:
    """The retention from the config HASH's RETENTION_FIELDS (None: not recorded)."""
    if raw[0] is None:
        return None
    kind, maxlen, retention_ms = (v.decode() if isinstance(v, bytes) else str(v) for v in raw)
    if kind not in ("MAXLEN", "MINID", "NONE"):
        raise ConfigError(f"{config_key(namespace)} holds audit_trim={kind!r}")
    return AuditRetention(kind, int(maxlen), int(retention_ms))  # type: ignore[arg-type]


def retention_fields(retention: AuditRetention) -> dict[str, str]:
    """What records ``retention`` in the config HASH."""
    values = (retention.kind, str(retention.maxlen), str(retention.retention_ms))
    return dict(zip(RETENTION_FIELDS, values, strict=True))


def ensure_retention(
    client: Any, namespace: str, retention: AuditRetention | None = None
) -> AuditRetention:
    """The retention every process of the namespace trims the audit stream with.

    Each script call trims the stream, so a process with a shorter retention (a CLI command, a
    web app that only adds) would delete history the workers were configured to keep. Given
    explicitly, ``retention`` is recorded for everyone (the last explicit setting wins); left
    unset, the recorded one is used, else the default.
    """
    if retention is not None:
        client.hset(
            config_key(validation.namespace(namespace)), mapping=retention_fields(retention)
        )
        return retention
    return stored_retention(client, namespace) or AuditRetention()
