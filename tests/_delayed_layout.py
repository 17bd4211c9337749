"""Readers of the delayed set's layout (lua/_delayed.lua) for the tests that check it: its
buckets as stored, its order as the scripts read it and as the listing pages it, and the order a
map of due times should give."""

from __future__ import annotations

import random
from typing import Any

from actors import _constants as c
from actors.lifecycle import State
from actors.storage import reads
from actors.storage.calls import decoded
from actors.storage.store import Store


def buckets(store: Store) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """(name, index score, entries) of every bucket, in index order."""
    client, keys = store.client, store.keys
    found = []
    index: Any = client.zrange(keys.delayed, 0, -1, withscores=True)
    for raw, score in index:
        name = decoded(raw)
        entries: Any = client.zrange(keys.due_bucket(name), 0, -1, withscores=True)
        found.append((name, int(score), [(decoded(m), int(s)) for m, s in entries]))
    return found


def assert_compact(store: Store, most: int = c.DUE_BUCKET_MAX) -> None:
    """No problem in the snapshot, and every bucket at most ``most`` jobs, in Redis's compact
    encoding."""
    assert store.snapshot().problems == {}
    for name, _, entries in buckets(store):
        assert 0 < len(entries) <= most, (name, len(entries))
        encoding = decoded(store.client.object("encoding", store.keys.due_bucket(name)))
        assert encoding in ("listpack", "ziplist"), (name, encoding)


def delayed_order(store: Store) -> list[str]:
    return [member for member, _ in reads.delayed_entries(store.client, store.keys)]


def listed_delayed(store: Store, page_size: int) -> list[str]:
    """Topic t's delayed jobs as the listing pages them, every page followed."""
    listed: list[str] = []
    after = None
    while True:
        page = store.jobs("t", State.DELAYED, after=after, limit=page_size)
        listed.extend(f"t|{job.id}" for job in page.jobs)
        if page.next_after is None:
            return listed
        after = page.next_after


def expected_order(dues: dict[str, int]) -> list[str]:
    return [f"t|{job_id}" for job_id, _ in sorted(dues.items(), key=lambda kv: (kv[1], kv[0]))]


def mixed_ids(rng: random.Random, count: int) -> list[str]:
    """Distinct job ids whose byte order is neither their order of creation nor a locale's
    (upper case sorts before lower case in bytes)."""
    letters = "AbBaZz09.-"
    ids: set[str] = set()
    while len(ids) < count:
        ids.add("".join(rng.choice(letters) for _ in range(rng.randrange(1, 7))))
    found = sorted(ids)
    rng.shuffle(found)
    return found
