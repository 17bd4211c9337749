"""Script calls, built and parsed apart from running them: no Redis here.

For each Lua script in lua/ a *builder* turns a transition's checked arguments into one shard's
call (keys and argv, as the script's header comment lists them), and a *parser* turns that call's
reply into a typed result. The store does the rest: it validates and reads the clock once, groups
the work by shard, builds one call per shard, sends them through
:class:`actors.storage.script_batch.ScriptBatch` and parses the replies. Because building and
parsing do no I/O, nothing is computed twice and a call can be checked without a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from actors.errors import ErrorCode
from actors.lifecycle import State
from actors.storage import codec
from actors.storage.keys import ShardKeys, member, split_member
from actors.values import JobInfo, Lease, LeaseBatch, NewJob

CancelOutcome = Literal["missing", "removed", "requested"]
_CANCEL_OUTCOMES: tuple[CancelOutcome, ...] = ("missing", "removed", "requested")


@dataclass(frozen=True, slots=True)
class ScriptCall:
    name: str
    keys: list[str]
    args: list[Any]


# ARGV[1] that tells a script to read the server's TIME (see _lib.lua).
SERVER_TIME = ""


@dataclass(frozen=True, slots=True)
class CallTime:
    """What every script call of one store operation shares: the clock read once, and the audit
    stream's trim (ARGV[1..3]; ARGV[4] is the shard's key prefix, see _lib.lua).

    ``now_ms`` goes to the scripts only when ``scripts_follow`` (a fake clock's time); otherwise
    they judge by the server's TIME and ``now_ms`` is the caller's estimate of it, for what
    Python computes (retention, a schedule's occurrences)."""

    now_ms: int
    trim_kind: str
    trim_threshold: str
    scripts_follow: bool = True

    def common(self, keys: ShardKeys) -> list[Any]:
        now = self.now_ms if self.scripts_follow else SERVER_TIME
        return [now, self.trim_kind, self.trim_threshold, keys.prefix]


def decoded(value: Any) -> str:
    """A Redis reply as text (redis-py's reply types are loose, hence Any)."""
    return value.decode() if isinstance(value, bytes) else str(value)


# -- builders: one shard's call ---------------------------------------------------------------


def add(
    keys: ShardKeys,
    at: CallTime,
    jobs: Sequence[NewJob],
    topic_configs: dict[str, bytes],
    *,
    replace: bool,
) -> ScriptCall:
    """``topic_configs`` holds each topic's packed defaults (the scripts store them if unset).

    A job given a delay is sent as ``+<delay ms>`` when the scripts read the server's clock, so
    its due time counts from the server's now, not the producer's (lua/_due.lua)."""
    args = [*at.common(keys), keys.wake_channel, len(jobs)]
    server_time = not at.scripts_follow
    for job in jobs:
        relative = job.delay_ms if server_time else None
        record = codec.pack(
            job.body,
            job.due_ms,
            at.now_ms,
            job.retry_ms,
            job.lease_ms,
            job.callback,
            job.traceparent,
            relative,
        )
        due = job.due_ms if relative is None else f"+{relative}"
        args += [member(job.topic, job.id), due, record, topic_configs[job.topic]]
    if replace:
        return ScriptCall(
            "replace",
            keys.ending(
                keys.jobs,
                keys.delayed,
                keys.leased,
                keys.tokens,
                keys.dead,
                keys.topics,
                keys.counts,
            ),
            args,
        )
    return ScriptCall("add", keys.audited(keys.jobs, keys.delayed, keys.topics, keys.counts), args)


def carry(keys: ShardKeys, at: CallTime, limit: int) -> ScriptCall:
    return ScriptCall(
        "carry",
        keys.ending(keys.delayed, keys.jobs, keys.counts),
        [*at.common(keys), limit, keys.wake_channel],
    )


def expire(keys: ShardKeys, at: CallTime, limit: int) -> ScriptCall:
    return ScriptCall(
        "expire",
        keys.ending(
            keys.jobs, keys.delayed, keys.leased, keys.tokens, keys.dead, keys.topics, keys.counts
        ),
        [*at.common(keys), keys.wake_channel, limit],
    )


def lease(keys: ShardKeys, at: CallTime, topic: str, limit: int, consumer: str) -> ScriptCall:
    return ScriptCall(
        "lease",
        [
            keys.ready(topic),
            keys.jobs,
            keys.leased,
            keys.tokens,
            keys.topics,
            keys.counts,
            keys.seq,
            keys.audit,
            keys.gates,
            keys.history,
        ],
        [*at.common(keys), topic, limit, consumer],
    )


def pause(keys: ShardKeys, at: CallTime, topic: str, paused: bool) -> ScriptCall:
    """Pauses (``paused``) or resumes ``topic`` in one shard."""
    return ScriptCall(
        "pause", keys.audited(keys.gates), [*at.common(keys), topic, 1 if paused else 0]
    )


def ack(keys: ShardKeys, at: CallTime, acks: Sequence[tuple[str, str, str]]) -> ScriptCall:
    """``acks``: (member, token, detail) per job."""
    return ScriptCall(
        "ack",
        keys.ending(keys.jobs, keys.leased, keys.tokens, keys.counts),
        [*at.common(keys), len(acks), *_flat(acks)],
    )


def fail(
    keys: ShardKeys, at: CallTime, failures: Sequence[tuple[str, str, str, int, str]]
) -> ScriptCall:
    """``failures``: (member, token, reason, retry after ms or -1, traceback or "") per job."""
    return ScriptCall(
        "fail",
        keys.ending(
            keys.jobs, keys.delayed, keys.leased, keys.tokens, keys.dead, keys.topics, keys.counts
        ),
        [*at.common(keys), keys.wake_channel, len(failures), *_flat(failures)],
    )


def extend(keys: ShardKeys, at: CallTime, extensions: Sequence[tuple[str, str, int]]) -> ScriptCall:
    """``extensions``: (member, token, extend ms) per job."""
    return ScriptCall(
        "extend",
        keys.audited(keys.jobs, keys.leased, keys.tokens),
        [*at.common(keys), len(extensions), *_flat(extensions)],
    )


def release(keys: ShardKeys, at: CallTime, releases: Sequence[tuple[str, str]]) -> ScriptCall:
    """``releases``: (member, token) per job."""
    return ScriptCall(
        "release",
        keys.ending(keys.jobs, keys.leased, keys.tokens, keys.counts),
        [*at.common(keys), len(releases), *_flat(releases)],
    )


def cancel(keys: ShardKeys, at: CallTime, job: str) -> ScriptCall:
    """``job``: the job's member (see keys.member)."""
    return ScriptCall(
        "cancel",
        keys.ending(keys.jobs, keys.delayed, keys.leased, keys.tokens, keys.dead, keys.counts),
        [*at.common(keys), job],
    )


def requeue(keys: ShardKeys, at: CallTime, members: Sequence[str]) -> ScriptCall:
    return ScriptCall(
        "requeue",
        keys.audited(keys.jobs, keys.dead, keys.delayed, keys.counts),
        [*at.common(keys), len(members), *members],
    )


def purge(keys: ShardKeys, at: CallTime, members: Sequence[str]) -> ScriptCall:
    return ScriptCall(
        "purge",
        keys.ending(keys.jobs, keys.dead, keys.counts),
        [*at.common(keys), len(members), *members],
    )


def inspect(keys: ShardKeys, at: CallTime, job: str) -> ScriptCall:
    return ScriptCall(
        "inspect",
        [keys.jobs, keys.delayed, keys.leased, keys.tokens, keys.dead],
        [*at.common(keys), job],
    )


def delayed_layout(keys: ShardKeys, at: CallTime) -> ScriptCall:
    """The whole delayed set as its buckets keep it (lua/delayed-1.lua), for snapshots."""
    return ScriptCall("delayed", [keys.delayed], at.common(keys))


def history(keys: ShardKeys, at: CallTime, job: str) -> ScriptCall:
    """One job's audit entries, read through the shard's per-job index and, for a stored job,
    the id of its ``added`` entry its record keeps (lua/history-4.lua)."""
    return ScriptCall(
        "history",
        [keys.history, keys.audit, keys.history_previous, keys.jobs],
        [*at.common(keys), job],
    )


def history_entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """``history``'s reply as (entry id, fields) pairs of text, oldest first."""
    entries: list[tuple[str, dict[str, str]]] = []
    for entry_id, flat in reply:
        texts = [decoded(v) for v in flat]
        entries.append((decoded(entry_id), dict(zip(texts[::2], texts[1::2], strict=True))))
    return entries


def list_page(
    keys: ShardKeys,
    at: CallTime,
    topic: str,
    state: State,
    limit: int,
    scan: int,
    after: tuple[int | None, str] | None,
) -> ScriptCall:
    """One shard's jobs of ``topic`` in ``state`` after the position ``after``: (score, member)
    in the delayed, leased and dead ZSETs (no score in a ready list), None from the start."""
    where = {State.DELAYED: keys.delayed, State.LEASED: keys.leased, State.DEAD: keys.dead}.get(
        state
    )
    score, last = ("", "") if after is None else ("" if after[0] is None else after[0], after[1])
    kind = "list" if where is None else "delayed" if state is State.DELAYED else "zset"
    return ScriptCall(
        "list",
        [keys.ready(topic) if where is None else where, keys.jobs, keys.tokens],
        [*at.common(keys), topic, kind, limit, scan, score, last],
    )


def _flat(rows: Sequence[tuple[Any, ...]]) -> list[Any]:
    return [value for row in rows for value in row]


# -- parsers: one call's reply ----------------------------------------------------------------


def existing_jobs(reply: Any) -> list[tuple[str, str]]:
    """add: the (topic, id) that already existed (then nothing was added); empty when added."""
    if int(reply[0]) == ErrorCode.EXISTS:
        return [split_member(decoded(m)) for m in reply[1:]]
    return []


def states_before(reply: Any) -> list[str]:
    """replace: per job, the state it had before ("new" when it did not exist)."""
    return [decoded(x) for x in reply]


def count_and_next(reply: Any) -> tuple[int, int | None, int]:
    """carry, expire: how many moved, the next due time or deadline (None: none left), and the
    time the script judged by (the server's, unless a fake clock drives the scripts)."""
    count, next_ms, now_ms = reply[0], reply[1], reply[2]
    return int(count), (None if int(next_ms) < 0 else int(next_ms)), int(now_ms)


def expire_outcomes(reply: Any) -> dict[tuple[str, str], int]:
    """expire: the jobs it ended per (topic, event), after its count, next deadline and time."""
    rest = reply[3:]
    return {
        (decoded(rest[j]), decoded(rest[j + 1])): int(rest[j + 2]) for j in range(0, len(rest), 3)
    }


def lease_batch(topic: str, reply: Any) -> LeaseBatch:
    """lease: the wait the gate asks for (-1 paused: None), then the leased jobs."""
    wait_ms = int(reply[0])
    return LeaseBatch(leases(topic, reply[1:]), None if wait_ms < 0 else wait_ms)


def leases(topic: str, reply: Any) -> list[Lease]:
    """The leased jobs of a lease reply, after its wait."""
    found = []
    for j in range(0, len(reply), 4):
        record = codec.unpack(reply[j + 3])
        _, job_id = split_member(decoded(reply[j]))
        # Positional: one Lease per leased job, and keywords cost 0.5 µs more per call.
        found.append(
            Lease(
                topic,
                job_id,
                decoded(reply[j + 1]),
                int(reply[j + 2]),
                record["b"],
                int(record.get("a", 0)) + 1,
                int(record["d"]),
                record.get("c"),
                record.get("l"),
                record.get("p"),
            )
        )
    return found


def changed(reply: Any) -> bool:
    """pause: whether the topic's state changed."""
    return bool(int(reply))


# Codes by value: calling the enum costs 0.5 µs, and ack returns one code per job.
_ERROR_CODES = {int(code): code for code in ErrorCode}


def error_code(value: Any) -> ErrorCode:
    """A script's numeric code; an unknown one raises ValueError, as ``ErrorCode(value)`` does."""
    number = int(value)
    found = _ERROR_CODES.get(number)
    return ErrorCode(number) if found is None else found


def error_codes(reply: Any) -> list[ErrorCode]:
    """ack: per job, OK or why not."""
    return [error_code(x) for x in reply]


def fail_outcomes(reply: Any) -> list[str | ErrorCode]:
    """fail: per job, the new state, or an ErrorCode."""
    return [error_code(x) if isinstance(x, int) else decoded(x) for x in reply]


def integers(reply: Any) -> list[int]:
    """extend (new deadline or error code), release (0, 1 or error code): per job."""
    return [int(x) for x in reply]


def total(reply: Any) -> int:
    """requeue, purge: how many jobs moved."""
    return sum(int(x) for x in reply)


def cancel_outcome(reply: Any) -> CancelOutcome:
    return _CANCEL_OUTCOMES[int(reply)]


def inspected(topic: str, job_id: str, reply: Any) -> JobInfo | None:
    if not reply:
        return None
    state, blob, token, deadline, dead_since = reply
    return job_info(
        topic,
        job_id,
        State(decoded(state)),
        codec.unpack(blob),
        decoded(token) or None,
        None if int(deadline) < 0 else int(deadline),
        None if int(dead_since) < 0 else int(dead_since),
    )


@dataclass(frozen=True, slots=True)
class ShardPage:
    """One shard's reply to ``list_page``: (position, job) pairs in the shard's order, whether
    nothing follows, and the position of the last entry the script examined."""

    jobs: list[tuple[tuple[int, str], JobInfo]]
    complete: bool
    reached: tuple[int, str] | None


def listed(topic: str, state: State, reply: Any) -> ShardPage:
    """list: the jobs with their positions; a list's jobs get position (due_ms, member)."""
    complete, reached_score, reached_member, *rest = reply
    found: list[tuple[tuple[int, str], JobInfo]] = []
    for j in range(0, len(rest), 4):
        raw_name, raw_score, blob, raw_token = rest[j : j + 4]
        name, token = decoded(raw_name), decoded(raw_token)
        if not blob:  # a member without its record (see docs/redis-layout.md): nothing to show
            continue
        record = codec.unpack(blob)
        score = int(decoded(raw_score) or record["d"])
        if state == State.DELAYED:
            record["d"] = score  # carry acts on the score
        info = job_info(
            topic,
            split_member(name)[1],
            state,
            record,
            token or None,
            score if state == State.LEASED else None,
            score if state == State.DEAD else None,
        )
        found.append(((score, name), info))
    reached = None
    if decoded(reached_member):
        reached = (int(decoded(reached_score) or 0), decoded(reached_member))
    return ShardPage(found, bool(int(complete)), reached)


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
        traceback=record.get("t"),
        lost=int(record.get("o", 0)),
        suspect=bool(record.get("u")),
        quarantined=bool(record.get("q")),
    )
