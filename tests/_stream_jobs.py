"""Jobs and reads the add_stream tests share (test_add_stream.py, test_async_add_stream.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors import DelayQueue
from actors.storage.store import Store

Spec = Mapping[str, Any]


def jobs(n: int, prefix: str = "j", **extra: Any) -> list[Spec]:
    """``n`` jobs of topic mail as add_many takes them, ids ``<prefix>0`` on."""
    return [{"topic": "mail", "id": f"{prefix}{k}", "body": {"k": k}, **extra} for k in range(n)]


def stored_ids(queue: DelayQueue | Store) -> set[str]:
    """The ids of topic mail's delayed and ready jobs, every page."""
    ids: set[str] = set()
    for state in ("delayed", "ready"):
        after: str | None = None
        while True:
            page = queue.jobs("mail", state, after=after, limit=1_000)
            ids |= {info.id for info in page.jobs}
            after = page.next_after
            if after is None:
                break
    return ids
