"""Recurring schedules on Redis: the schedule record's codec, and the builders and parsers of the
schedule, unschedule and refill scripts (no I/O here; the store runs them).

A schedule is one msgpack map in its shard's schedules hash (lua/_schedule.lua lists the fields).
Its ``spec`` is itself msgpack, compared as bytes by the schedule script, so it must be packed the
same way every time: fixed key order, ``use_bin_type=False`` as the job record (Redis's cmsgpack
predates the bin type).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from actors.schedules import ScheduleInfo, ScheduleSpec, misfire
from actors.storage.calls import CallTime, ScriptCall, decoded
from actors.storage.keys import ShardKeys, split_member


def pack_spec(spec: ScheduleSpec) -> bytes:
    fields = {
        "t": spec.topic,
        "b": spec.body,
        "m": spec.misfire,
        "c": spec.cron,
        "e": spec.every_ms,
        "z": spec.tz,
        "s": spec.start_at_ms,
    }
    return msgpack.packb({k: v for k, v in fields.items() if v is not None}, use_bin_type=False)


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule record as read back: what ``schedules()`` shows and what a refill needs."""

    info: ScheduleInfo
    generation: int
    anchor_ms: int

    @property
    def last_ms(self) -> int | None:
        """The latest time known to the schedule: refills continue after it."""
        if self.info.upcoming_ms:
            return self.info.upcoming_ms[-1]
        return self.info.next_ms


def unpack_schedule(name: str, blob: bytes) -> StoredSchedule:
    # raw=True: the spec inside is msgpack bytes, not UTF-8 text.
    record = {decoded(k): v for k, v in msgpack.unpackb(blob, raw=True).items()}
    spec = {decoded(k): v for k, v in msgpack.unpackb(record["spec"], raw=True).items()}
    body = spec["b"]
    text = {key: decoded(spec[key]) for key in ("t", "m", "c", "z") if key in spec}
    pending = decoded(record["p"]) if "p" in record else None
    pending_id = split_member(pending)[1] if pending else None
    times = record.get("q") or []
    return StoredSchedule(
        info=ScheduleInfo(
            spec=ScheduleSpec(
                name=name,
                topic=text["t"],
                cron=text.get("c"),
                every_ms=int(spec["e"]) if "e" in spec else None,
                tz=text["z"],
                body=body if isinstance(body, bytes) else str(body).encode(),
                start_at_ms=int(spec["s"]) if "s" in spec else None,
                misfire=misfire(text["m"]),
            ),
            next_ms=int(pending.rpartition(":")[2]) if pending else None,
            pending_id=pending_id,
            upcoming_ms=tuple(int(t) for t in (times if isinstance(times, list) else [])),
        ),
        generation=int(record["g"]),
        anchor_ms=int(record.get("a", 0)),
    )


# -- builders ---------------------------------------------------------------------------------


def schedule(
    keys: ShardKeys,
    at: CallTime,
    name: str,
    spec_blob: bytes,
    anchor_ms: int,
    topic_config: bytes,
    times: Sequence[int],
) -> ScriptCall:
    return ScriptCall(
        "schedule",
        keys.ending(keys.schedules, keys.jobs, keys.delayed, keys.topics, keys.counts),
        [*at.common(keys), keys.wake_channel, name, spec_blob, anchor_ms, topic_config, *times],
    )


def unschedule(keys: ShardKeys, at: CallTime, name: str) -> ScriptCall:
    return ScriptCall(
        "unschedule",
        keys.ending(keys.schedules, keys.jobs, keys.delayed, keys.counts),
        [*at.common(keys), name],
    )


def refill(
    keys: ShardKeys, at: CallTime, name: str, generation: int, times: Sequence[int]
) -> ScriptCall:
    return ScriptCall(
        "refill",
        keys.audited(keys.schedules, keys.jobs, keys.delayed, keys.counts),
        [*at.common(keys), keys.wake_channel, name, generation, *times],
    )


# -- parsers ----------------------------------------------------------------------------------


def scheduled(reply: Any) -> tuple[str, str | None]:
    """schedule: ("created" | "updated" | "unchanged", the pending occurrence's id or None)."""
    outcome, pending = decoded(reply[0]), decoded(reply[1])
    return outcome, (split_member(pending)[1] if pending else None)


def carried(reply: Any) -> tuple[int, int | None, int, list[str]]:
    """carry: how many moved, the next due time (None: none left), the time the script judged
    by, and the schedules whose stored occurrence times ran low."""
    count, next_ms, now_ms, *low = reply
    next_due = None if int(next_ms) < 0 else int(next_ms)
    return int(count), next_due, int(now_ms), [decoded(n) for n in low]
