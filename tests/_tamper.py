"""Changes to a shard's delayed set behind the scripts' back, for the tests of verify and replay.

The delayed set is buckets under an index (lua/_delayed.lua); these edits keep its invariants,
so what a test sees is the one change it made, not a broken layout.
"""

from __future__ import annotations

from typing import Any

import msgpack
import redis

from actors.storage.calls import decoded
from actors.storage.keys import ShardKeys


def bucket_holding(client: redis.Redis, keys: ShardKeys, member: str) -> str:
    """The name of the bucket that holds ``member``."""
    for raw in client.zrange(keys.delayed, 0, -1):
        bucket = decoded(raw)
        if client.zscore(keys.due_bucket(bucket), member) is not None:
            return bucket
    raise AssertionError(f"{member} is in no bucket")


def take_out(client: redis.Redis, keys: ShardKeys, member: str) -> None:
    """Removes a delayed ``member`` from its bucket, as the scripts would (not its record)."""
    bucket = bucket_holding(client, keys, member)
    client.zrem(keys.due_bucket(bucket), member)
    if bucket != member:
        return
    # It was the bucket's first: the bucket is named after its new first, or leaves the index.
    client.zrem(keys.delayed, bucket)
    first = client.zrange(keys.due_bucket(bucket), 0, 0, withscores=True)
    if first:
        new_name = decoded(first[0][0])
        client.rename(keys.due_bucket(bucket), keys.due_bucket(new_name))
        client.zadd(keys.delayed, {new_name: first[0][1]})


def move_due(client: redis.Redis, keys: ShardKeys, member: str, due_ms: int) -> None:
    """Gives a delayed ``member`` another due time, before every other delayed job's, in its
    record and in the delayed set (a bucket of its own, first in the set)."""
    take_out(client, keys, member)
    first = client.zrange(keys.delayed, 0, 0, withscores=True)
    if first:
        name, score = decoded(first[0][0]), float(first[0][1])
        assert due_ms < score, f"move_due moves a job before every other: {due_ms} >= {score}"
        # The first bucket may be named after a job carried since; a bucket after it may not.
        (first_member,) = client.zrange(keys.due_bucket(name), 0, 0)
        if decoded(first_member) != name:
            client.rename(keys.due_bucket(name), keys.due_bucket(decoded(first_member)))
            client.zrem(keys.delayed, name)
            client.zadd(keys.delayed, {decoded(first_member): score})
    client.zadd(keys.due_bucket(member), {member: due_ms})
    client.zadd(keys.delayed, {member: due_ms})
    blob: Any = client.hget(keys.jobs, member)
    record = msgpack.unpackb(blob)
    client.hset(keys.jobs, member, msgpack.packb({**record, "d": due_ms}, use_bin_type=False))
