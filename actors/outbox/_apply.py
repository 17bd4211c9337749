"""Applies outbox rows to Redis so that applying a row twice does what applying it once did.

Each row's write has a token (unique per write). Redis keeps, per job, the token of the write
applied last: the *marker*, set in the same MULTI/EXEC transaction as the job's add or cancel,
so the two are in Redis together or not at all. A relay that dies after that transaction but
before deleting the row leaves the row for the next pass, which finds the marker and only deletes
the row: no second job, even if the first already ran and was acked.

Per shard, one round trip reads the markers (and, for rows that keep an existing job, whether
it exists), and one MULTI/EXEC applies the rest: the new jobs in one call of the add script, the
replacing writes in one of the replace script, each cancel in a call of its own, and every marker
in one call. A job someone else added between the check and the transaction makes the add script
refuse the whole call: the markers are taken back and the pass fails, to be retried (a relay
that dies in that instant, between the two, could leave such rows marked and unapplied).
The script sources go as EVAL, not EVALSHA: in a transaction a NOSCRIPT error
(a restarted Redis) could not be retried without the markers having been set.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from actors.errors import JobExistsError
from actors.outbox._rows import OutboxRow
from actors.storage import calls
from actors.storage.calls import ScriptCall
from actors.storage.keys import member
from actors.storage.scripts import raise_if_full, sources
from actors.storage.store import Store

# A marker outlives any row it guards: a row not relayed within this long (a relay down for a
# week) and found applied could be applied a second time.
MARKER_TTL_MS = 7 * 86_400_000
# Every marker of a batch in one command (one reply instead of one per SET: a third of the cost).
# KEYS: the markers; ARGV[1] the TTL in ms, ARGV[2..] each marker's token.
_SET_MARKERS = """
local ttl = ARGV[1]
for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[i + 1], 'PX', ttl) end
return #KEYS
"""


@dataclass(frozen=True, slots=True)
class Applied:
    """What one pass did in Redis: rows applied now, rows found applied before (their relay
    died before deleting them), adds that left an existing job as it was."""

    applied: int
    already: int
    kept: int
    redis_now_ms: int


def apply_rows(store: Store, rows: Sequence[OutboxRow]) -> Applied:
    """Applies ``rows`` (distinct jobs) to ``store``'s Redis; raises, changing nothing for the
    shard whose transaction failed, when Redis refuses or cannot be reached."""
    at = store._now()  # one clock read: due times count from Redis's time now
    by_shard: dict[int, list[OutboxRow]] = defaultdict(list)
    for row in rows:
        by_shard[store._shard_of(row.topic, row.job_id)].append(row)
    applied = already = kept = 0
    for shard, shard_rows in by_shard.items():
        counts = _apply_shard(store, shard, at, shard_rows)
        applied, already, kept = applied + counts[0], already + counts[1], kept + counts[2]
    return Applied(applied, already, kept, at.now_ms)


def _transaction(store: Store, node: redis.Redis, commands: list[tuple[Any, ...]]) -> list[Any]:
    """``commands`` in MULTI/EXEC: their replies, errors in place. On a client of one server
    the store's held connections send it (hiredis packs a batch's thousands of arguments in a
    fraction of redis-py's time); a cluster node goes through a redis-py pipeline."""
    held = store._batch.runner.held if node is store.client else None
    if held is not None:
        replies = held.pipeline([("MULTI",), *commands, ("EXEC",)])
        if isinstance(replies[-1], Exception):
            raise replies[-1]
        return list(replies[-1])
    tx = node.pipeline(transaction=True)
    for command in commands:
        tx.execute_command(*command)  # type: ignore[no-untyped-call]
    return list(tx.execute(raise_on_error=False))


def _node(store: Store, key: str) -> redis.Redis:
    client: Any = store.client
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        return client.get_redis_connection(node)
    return client  # type: ignore[no-any-return]


def _apply_shard(
    store: Store, shard: int, at: calls.CallTime, rows: list[OutboxRow]
) -> tuple[int, int, int]:
    keys = store.shard_keys[shard]
    members = [member(row.topic, row.job_id) for row in rows]
    markers = [keys.outbox_marker(m) for m in members]
    node = _node(store, keys.jobs)
    keeping = [n for n, row in enumerate(rows) if row.op == "add"]
    check = node.pipeline(transaction=False)
    check.mget(markers)
    if keeping:
        check.hmget(keys.jobs, [members[n] for n in keeping])
    replies = check.execute()
    marked = [None if v is None else v.decode() for v in replies[0]]
    existing = {n for n, found in zip(keeping, replies[1] if keeping else [], strict=True) if found}
    todo = [n for n, row in enumerate(rows) if marked[n] != row.token]
    if not todo:
        return 0, len(rows), 0
    # New jobs go through the add script, a third of the replace script's cost per job; only
    # a write that asked to replace takes the replace script.
    adds = [n for n in todo if rows[n].op == "add" and n not in existing]
    replaces = [n for n in todo if rows[n].op == "replace"]
    cancels = [n for n in todo if rows[n].op == "cancel"]
    script_calls: list[ScriptCall] = []
    for chosen, replace in ((adds, False), (replaces, True)):
        if chosen:
            jobs = [rows[n].job(at.now_ms) for n in chosen]
            blobs = {job.topic: store._topic_config_blob(job.topic) for job in jobs}
            script_calls.append(calls.add(keys, at, jobs, blobs, replace=replace))
    script_calls += [calls.cancel(keys, at, members[n]) for n in cancels]
    source = sources()
    marked_now = [markers[n] for n in todo]
    commands: list[tuple[Any, ...]] = [
        ("EVAL", source[call.name][1], len(call.keys), *call.keys, *call.args)
        for call in script_calls
    ]
    tokens = [rows[n].token for n in todo]
    commands.append(("EVAL", _SET_MARKERS, len(marked_now), *marked_now, MARKER_TTL_MS, *tokens))
    try:
        results = _transaction(store, node, commands)
    except redis.ResponseError as exc:  # EXECABORT: nothing ran
        raise_if_full("outbox relay", exc)
        raise
    failed = next((r for r in results if isinstance(r, Exception)), None)
    if failed is None and adds and calls.existing_jobs(results[0]):
        # A job was added by someone else since the check above: the add script then wrote
        # nothing (all or nothing), so the next pass must see these rows as not applied.
        failed = JobExistsError(calls.existing_jobs(results[0]))
    if failed is not None:
        # A script refused (it wrote nothing) while its markers were set: take them back, so
        # the rows are applied again on the next pass rather than found applied.
        with contextlib.suppress(redis.RedisError):
            node.delete(*marked_now)
        raise_if_full("outbox relay", failed)
        raise failed
    return len(todo), len(rows) - len(todo), len(set(todo) & existing)
