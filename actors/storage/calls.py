"""Script calls, built and parsed apart from running them: no Redis here.

For each Lua script in lua/ a *builder* turns a transition's arguments into the keys and argv of
one shard's call, and a *parser* turns that call's reply into a typed result. The store does the
rest: it validates and reads the clock once, groups the work by shard, sends the built calls
through :class:`actors.storage.script_batch.ScriptBatch` and parses the replies.
"""

from __future__ import annotations

from typing import Any

from actors.lifecycle import State
from actors.values import JobInfo


def decoded(value: Any) -> str:
    """A Redis reply as text (redis-py's reply types are loose, hence Any)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def job_info(
    topic: str,
    job_id: str,
    state: State,
    record: dict[str, Any],
    token: str | None,
    deadline_ms: int | None,
    dead_since_ms: int | None,
) -> JobInfo:
    """A job's public description from its record (see codec.py) and where it is."""
    retry = record.get("r")
    failed = int(record.get("a", 0))
    return JobInfo(
        topic=topic,
        id=job_id,
        state=state,
        due_ms=int(record["d"]),
        attempt=failed + (0 if state == State.DEAD else 1),
        attempts_failed=failed,
        body_bytes=record["b"],
        created_ms=int(record.get("n", 0)),
        token=token,
        lease_deadline_ms=deadline_ms,
        dead_since_ms=dead_since_ms,
        cancel_requested=bool(record.get("x")),
        callback=record.get("c"),
        retry_ms=None if retry is None else tuple(int(x) for x in retry),
    )
