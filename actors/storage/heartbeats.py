"""Worker heartbeats: one key per worker that expires by itself, and an index of their names.

A worker writes ``redelay:{<namespace>}:worker:<name>`` (JSON, with a TTL of a few beats) and adds
its name to ``redelay:{<namespace>}:workers``. Readers take the index, then every key (one hash
tag, so one slot on a cluster too): two round trips; names whose key expired are dropped from the
index by the reader (a third), so a crashed worker leaves nothing behind. A clean stop deletes both.
"""

from __future__ import annotations

from typing import Any

import orjson

from actors import _validation as validation
from actors._constants import WORKERS_LIST_MAX
from actors.storage.calls import decoded
from actors.storage.keys import worker_key, workers_key
from actors.values import WorkerInfo


def encode(info: WorkerInfo) -> bytes:
    return orjson.dumps(
        {
            "name": info.name,
            "host": info.host,
            "pid": info.pid,
            "topics": list(info.topics),
            "busy_slots": info.busy_slots,
            "slots": info.slots,
            "started_ms": info.started_ms,
            "beat_ms": info.beat_ms,
        }
    )


def decode(raw: bytes) -> WorkerInfo | None:
    """The heartbeat, or None for a value this version cannot read (skipped, not fatal)."""
    try:
        doc = orjson.loads(raw)
        return WorkerInfo(
            name=str(doc["name"]),
            host=str(doc["host"]),
            pid=int(doc["pid"]),
            topics=tuple(str(t) for t in doc["topics"]),
            busy_slots=int(doc["busy_slots"]),
            slots=int(doc["slots"]),
            started_ms=int(doc["started_ms"]),
            beat_ms=int(doc["beat_ms"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def beat(client: Any, namespace: str, info: WorkerInfo, ttl_ms: int) -> None:
    """Writes one heartbeat (SET with PX, SADD to the index) in one round trip."""
    validation.lease_ms(ttl_ms, "ttl_ms")
    pipe = client.pipeline(transaction=False)
    pipe.set(worker_key(namespace, info.name), encode(info), px=ttl_ms)
    pipe.sadd(workers_key(namespace), info.name)
    pipe.execute()


def forget(client: Any, namespace: str, name: str) -> None:
    """Removes a worker's heartbeat at once (a clean stop)."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(worker_key(namespace, name))
    pipe.srem(workers_key(namespace), name)
    pipe.execute()


def workers(client: Any, namespace: str) -> list[WorkerInfo]:
    """Every worker with a live heartbeat, by name; prunes index entries whose key expired."""
    index = workers_key(namespace)
    names = sorted(decoded(n) for n in client.srandmember(index, WORKERS_LIST_MAX) or [])
    if not names:
        return []
    values = client.mget([worker_key(namespace, name) for name in names])
    found: list[WorkerInfo] = []
    gone: list[str] = []
    for name, raw in zip(names, values, strict=True):
        info = None if raw is None else decode(bytes(raw))
        if info is None:
            gone.append(name)
        else:
            found.append(info)
    if gone:
        # Only names whose key is already gone: a worker that beats again re-adds its own.
        client.srem(index, *gone)
    return found
