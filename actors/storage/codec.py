"""The job record: one msgpack map per job in the jobs hash.

Fields (single letters keep ~40 bytes per pending job off Redis memory):
``b`` body (orjson bytes), ``d`` due time ms, ``a`` failed attempts so far, ``n`` created ms,
``r`` retry schedule ms (only when set per job), ``l`` lease ms (only when set per job),
``c`` callback URL (optional), ``x`` 1 once a cancel was requested while leased, ``t`` the
traceback of the last failed attempt (only when it had one; written by Lua), ``p`` the W3C
traceparent of the add's producer span (only when traced: actors/tracing.py), ``s`` the name of
the schedule whose occurrence the job is (written by Lua, lua/_arm.lua), ``h`` the id of the
job's ``added`` audit entry (appended by lua/add-6.lua; the history index gets it when the
record goes, lua/_lib.lua), ``w`` the delay ms of a job added with one that the script counted
from the server's now (lua/_due.lua: a resent add is known by it, as its due time differs),
``o`` the lost leases held against the job, ``u`` set while it is a suspect (1, or the consumer
it is leased to), ``q`` 1 once it was quarantined (lua/_lost.lua).
Lua edits the same map with its built-in cmsgpack.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import msgpack

from actors._constants import DEFAULT_LOST_MAX

# Making a Packer costs as much as packing a record with it, and packb makes one per call: each
# thread keeps its own (a Packer's buffer is not safe to share).
# use_bin_type=False: Redis's cmsgpack predates the bin type; the body is UTF-8 JSON anyway.
_packers = threading.local()


class RecordField(StrEnum):
    """The job record's field names (see the module docstring); the Lua scripts spell them as
    ``FIELD_<NAME>``, which the loader writes as these values (actors/storage/scripts.py)."""

    BODY = "b"
    DUE = "d"
    ATTEMPTS = "a"
    CREATED = "n"
    RETRY = "r"
    LEASE = "l"
    CALLBACK = "c"
    CANCEL = "x"
    TRACE = "t"
    TRACEPARENT = "p"
    SCHEDULE = "s"
    HISTORY = "h"
    DELAY = "w"
    LOST = "o"
    SUSPECT = "u"
    QUARANTINED = "q"


def _packer() -> msgpack.Packer:
    try:
        return _packers.packer  # type: ignore[no-any-return]
    except AttributeError:
        _packers.packer = msgpack.Packer(use_bin_type=False)
        return _packers.packer  # type: ignore[no-any-return]


def pack(
    body: bytes,
    due_ms: int,
    created_ms: int,
    retry_ms: Sequence[int] | None = None,
    lease_ms: int | None = None,
    callback: str | None = None,
    traceparent: str | None = None,
    delay_ms: int | None = None,
) -> bytes:
    # The due time first: an add whose delay the script counts from the server's now writes the
    # due time it found over these bytes without unpacking the record (lua/_due.lua).
    record: dict[str, Any] = {"d": due_ms, "b": body, "a": 0, "n": created_ms}
    if retry_ms is not None:
        record["r"] = list(retry_ms)
    if lease_ms is not None:
        record["l"] = lease_ms
    if callback is not None:
        record["c"] = callback
    if traceparent is not None:
        record["p"] = traceparent
    if delay_ms is not None:
        record["w"] = delay_ms
    return _packer().pack(record)


def unpack(blob: bytes) -> dict[str, Any]:
    record: dict[str, Any] = msgpack.unpackb(blob, raw=False)
    body = record.get("b", b"null")
    # Lua's cmsgpack re-packs the body as msgpack str; the bytes are the same either way.
    if isinstance(body, str):
        record["b"] = body.encode()
    return record


def pack_topic_config(retry_ms: Sequence[int], lease_ms: int, lost_max: int) -> bytes:
    """A topic's stored defaults: ``r`` retry schedule, ``l`` lease, ``o`` lost_max."""
    return msgpack.packb({"r": list(retry_ms), "l": lease_ms, "o": lost_max})


def unpack_topic_config(blob: bytes) -> tuple[tuple[int, ...], int, int]:
    """(retry_ms, lease_ms, lost_max); a config stored before lost_max existed has the default."""
    config: dict[str, Any] = msgpack.unpackb(blob, raw=False)
    return (
        tuple(int(x) for x in config.get("r", ())),
        int(config.get("l", 0)),
        int(config.get("o", DEFAULT_LOST_MAX)),
    )
