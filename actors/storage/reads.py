"""Plain reads of a namespace's shards: dead keys, audit streams, snapshots (the delayed set by
its read-only script).

Each function takes the client and the keys of the shards it reads, so the store can hand it one
shard or all of them. Streams of several shards are merged in time order (the ``ms`` field, then
the entry id), keeping each shard's own order, so one job's events stay in the order written.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from actors._constants import DUE_BUCKET_MAX
from actors.lifecycle import State
from actors.storage import calls, codec
from actors.storage.calls import decoded, job_info
from actors.storage.keys import ShardKeys, split_member
from actors.storage.scripts import sources
from actors.values import AuditEntry, Snapshot

# A new topic between reading the topic list and the MULTI leaves its ready list unread; the
# read is repeated then. Topics appear rarely, so a few tries always suffice in practice.
_SNAPSHOT_ATTEMPTS = 20
# The read-only scripts use no clock and trim nothing.
_READ_ONLY = calls.CallTime(now_ms=0, trim_kind="NONE", trim_threshold="0")


def dead_keys(
    client: Any, shard_keys: Sequence[ShardKeys], topic: str | None, chunk: int
) -> Iterator[tuple[str, str]]:
    """Every dead (topic, id) of the shards, optionally of one topic, read ``chunk`` at a time."""
    for keys in shard_keys:
        start = 0
        while page := client.zrange(keys.dead, start, start + chunk - 1):
            start += len(page)
            for raw in page:
                key = split_member(decoded(raw))
                if topic is None or key[0] == topic:
                    yield key


def audit_length(client: Any, shard_keys: Sequence[ShardKeys]) -> int:
    return sum(int(client.xlen(keys.audit)) for keys in shard_keys)


def audit_entries(
    client: Any, keys: ShardKeys, start: str = "-", end: str = "+", count: int | None = None
) -> list[AuditEntry]:
    return decode_entries(client.xrange(keys.audit, start, end, count=count))


def decode_entries(raw: Any) -> list[AuditEntry]:
    """An XRANGE reply as (entry id, fields) pairs of text."""
    return [
        (decoded(eid), {decoded(f): decoded(v) for f, v in fields.items()}) for eid, fields in raw
    ]


def recent_audit(
    client: Any, keys: ShardKeys, count: int, after: str | None = None
) -> list[AuditEntry]:
    """The shard's newest ``count`` audit entries (newer than the entry id ``after``, when
    given), oldest first (XREVRANGE, then reversed)."""
    low = "-" if after is None else f"({after}"
    raw: Any = client.xrevrange(keys.audit, "+", low, count=count)
    return [
        (decoded(eid), {decoded(f): decoded(v) for f, v in fields.items()})
        for eid, fields in reversed(raw)
    ]


def iter_shard_audit(
    client: Any, keys: ShardKeys, end: str = "+", chunk: int = 5_000, *, start: str = "-"
) -> Iterator[AuditEntry]:
    """One shard's audit entries from ``start`` to ``end`` (inclusive), oldest first, in chunks."""
    while True:
        entries = audit_entries(client, keys, start, end, chunk)
        yield from entries
        if len(entries) < chunk:
            return
        start = "(" + entries[-1][0]


def _audit_order(entry: AuditEntry) -> tuple[int, int, int]:
    entry_id, fields = entry
    ms, _, seq = entry_id.partition("-")
    return int(fields.get("ms", 0)), int(ms), int(seq or 0)


def merge_audit(streams: Iterable[Iterable[AuditEntry]]) -> Iterator[AuditEntry]:
    """The shards' streams as one, in time order; each shard's own order is kept."""
    return heapq.merge(*streams, key=_audit_order)


def read_snapshot(client: Any, keys: ShardKeys) -> tuple[Snapshot, str | None]:
    """One shard's jobs and where they are, with the id of its last audit entry.

    Everything is read in one MULTI, so the snapshot is the state right after that entry (every
    transition writes its event in the same script as its change). A delayed job's due time is
    its score in the delayed set: that is what carry acts on. The delayed set's buckets are read
    whole (lua/delayed-1.lua) and their invariants checked: a break is a problem of the jobs
    it concerns.
    """
    for _ in range(_SNAPSHOT_ATTEMPTS):
        topics = sorted(decoded(t) for t in client.hkeys(keys.topics))
        pipe = client.pipeline(transaction=True)
        pipe.hkeys(keys.topics)
        pipe.hgetall(keys.jobs)
        # EVAL by name: redis-py's cluster pipeline has no eval() of its own.
        pipe.execute_command("EVAL", *_eval_args(calls.delayed_layout(keys, _READ_ONLY)))
        pipe.zrange(keys.leased, 0, -1, withscores=True)
        pipe.hgetall(keys.tokens)
        pipe.zrange(keys.dead, 0, -1, withscores=True)
        pipe.xrevrange(keys.audit, "+", "-", count=1)
        for t in topics:
            pipe.lrange(keys.ready(t), 0, -1)
        topics_now, jobs_raw, layout, leased, tokens_raw, dead, last, *ready = pipe.execute()
        if sorted(decoded(t) for t in topics_now) != topics:
            continue
        last_id = decoded(last[0][0]) if last else None
        delayed, layout_problems = _delayed_entries(layout)
        snapshot = _snapshot(
            topics,
            _as_mapping(jobs_raw),
            delayed,
            _as_scored(leased),
            _as_mapping(tokens_raw),
            _as_scored(dead),
            ready,
        )
        for where, text in layout_problems:
            snapshot.problems.setdefault(where, []).append(text)
        return snapshot, last_id
    raise RuntimeError(f"the topics of {keys.prefix} changed during {_SNAPSHOT_ATTEMPTS} reads")


def delayed_entries(client: Any, keys: ShardKeys) -> list[tuple[str, int]]:
    """One shard's delayed jobs as (member, due ms), in due order."""
    layout = client.execute_command("EVAL", *_eval_args(calls.delayed_layout(keys, _READ_ONLY)))
    return [(decoded(m), int(due)) for m, due in _delayed_entries(layout)[0]]


def _eval_args(call: calls.ScriptCall) -> list[Any]:
    """EVAL's arguments for ``call``: the source, not its SHA, so a MULTI needs no SCRIPT LOAD."""
    return [sources()[call.name][1], len(call.keys), *call.keys, *call.args]


def _delayed_entries(
    layout: list[Any],
) -> tuple[list[tuple[Any, float]], list[tuple[tuple[str, str], str]]]:
    """The delayed set's (member, due) from ``delayed-1.lua``'s reply, with the breaks of the
    buckets' invariants (lua/_delayed.lua) as ((topic, id), text)."""
    entries: list[tuple[Any, float]] = []
    problems: list[tuple[tuple[str, str], str]] = []
    previous_last: tuple[float, bytes] | None = None
    stale_first_name: str | None = None
    for position, (name_raw, score_raw, flat) in enumerate(layout):
        name, score = decoded(name_raw), float(score_raw)
        bucket = _as_scored(flat)
        if not bucket:
            problems.append((("(delayed set)", name), f"bucket {name} is empty but indexed"))
            continue
        first_member = decoded(bucket[0][0])
        first = split_member(first_member)
        if position == 0 and first_member != name and bucket[0][1] == score:
            # The first bucket may keep the name of a job carry took (settle_first_bucket);
            # that job must not be in the set, checked below.
            stale_first_name = name
        elif (first_member, bucket[0][1]) != (name, score):
            problems.append(
                (
                    first,
                    f"first in bucket {name}, due {bucket[0][1]:.0f}, "
                    f"but the index says {name} due {score:.0f}",
                )
            )
        if len(bucket) > DUE_BUCKET_MAX:
            problems.append(
                (first, f"in bucket {name} of {len(bucket)} jobs, more than {DUE_BUCKET_MAX}")
            )
        # The set's order: due time, then member bytes (as a ZSET orders equal scores).
        if previous_last is not None and (bucket[0][1], _raw(bucket[0][0])) <= previous_last:
            problems.append(
                (
                    first,
                    f"in bucket {name}, due {bucket[0][1]:.0f}, not after the "
                    f"bucket before it (last due {previous_last[0]:.0f})",
                )
            )
        previous_last = (bucket[-1][1], _raw(bucket[-1][0]))
        entries.extend(bucket)
    if stale_first_name is not None and any(
        decoded(member) == stale_first_name for member, _ in entries
    ):
        problems.append(
            (
                split_member(stale_first_name),
                "names the first bucket but is not its first job: a bucket key of two buckets",
            )
        )
    return entries, problems


def _raw(member: Any) -> bytes:
    return member if isinstance(member, bytes) else str(member).encode()


# redis-py's cluster client before 8.0 runs a MULTI's commands without their reply callbacks:
# HGETALL comes back as a flat [field, value, ...] list and ZRANGE WITHSCORES as a flat [member,
# score, ...] list of bytes, not the dict and (member, float) pairs a plain client gives. Both
# shapes are read here, so the snapshot is the same whatever the client.
def _as_mapping(reply: Any) -> dict[Any, Any]:
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _as_scored(reply: Any) -> list[tuple[Any, float]]:
    if not reply or isinstance(reply[0], list | tuple):
        return [(member, float(score)) for member, score in reply]
    return [(member, float(score)) for member, score in zip(reply[::2], reply[1::2], strict=True)]


def _snapshot(
    topics: list[str],
    jobs_raw: dict[Any, Any],
    delayed: list[tuple[Any, float]],
    leased: list[tuple[Any, float]],
    tokens_raw: dict[Any, Any],
    dead: list[tuple[Any, float]],
    ready_lists: list[list[Any]],
) -> Snapshot:
    places: dict[str, list[str]] = {}
    where: dict[str, State] = {}

    def put(raw: Any, state: State, place: str) -> None:
        name = decoded(raw)
        places.setdefault(name, []).append(place)
        where[name] = state

    for raw, _ in delayed:
        put(raw, State.DELAYED, "delayed")
    for t, lst in zip(topics, ready_lists, strict=True):
        for raw in lst:
            put(raw, State.READY, f"ready:{t}")
    for raw, _ in leased:
        put(raw, State.LEASED, "leased")
    for raw, _ in dead:
        put(raw, State.DEAD, "dead")
    due = {decoded(m): int(s) for m, s in delayed}
    deadlines = {decoded(m): int(s) for m, s in leased}
    dead_since = {decoded(m): int(s) for m, s in dead}
    tokens = {decoded(m): decoded(v) for m, v in tokens_raw.items() if m}  # "": the pin
    records = {decoded(m): blob for m, blob in jobs_raw.items()}
    snapshot = Snapshot()

    def problem(name: str, text: str) -> None:
        snapshot.problems.setdefault(split_member(name), []).append(text)

    for name, blob in records.items():
        t, i = split_member(name)
        state = where.get(name, State.READY)
        record = codec.unpack(blob)
        if state == State.DELAYED:
            if record["d"] != due[name]:
                # The delayed set finds a job's bucket by the due time its record keeps.
                problem(name, f"due {record['d']} in its record, {due[name]} in the delayed set")
            record["d"] = due[name]
        snapshot.jobs[(t, i)] = job_info(
            t, i, state, record, tokens.get(name), deadlines.get(name), dead_since.get(name)
        )
        found = places.get(name, [])
        if len(found) != 1:
            problem(name, f"in {' and '.join(found) or 'no structure'}")
        if (name in tokens) != (name in deadlines):
            problem(name, "has a lease token but no deadline, or the reverse")
    for name, found in places.items():
        if name not in records:
            problem(name, f"in {' and '.join(found)} without a record")
    for name in tokens:
        if name not in records:
            problem(name, "has a lease token without a record")
    return snapshot


def merge_snapshots(parts: Iterable[Snapshot]) -> Snapshot:
    """The shards' snapshots as one: jobs and problems of every shard."""
    merged = Snapshot()
    for part in parts:
        merged.jobs.update(part.jobs)
        for key, texts in part.problems.items():
            merged.problems.setdefault(key, []).extend(texts)
    return merged
