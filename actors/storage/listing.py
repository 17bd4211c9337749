"""Paging through a topic's jobs in one state across shards: the cursor and the merge (no I/O).

Delayed, leased and dead jobs sit in one ZSET per shard, scored by due time, lease deadline and
time of death, equal scores in member order. That order is the same on every shard, so a cursor
is one position (score, member) and every shard resumes right after it (lua/list-3.lua). Those
sets hold every topic of the shard, so a shard stops after examining ``LIST_SCAN_ENTRIES`` of
them; the merged page then ends at the earliest position an unfinished shard reached, which
skips none of that shard's jobs, and the next page resumes there.

Ready lists are per topic and have no score to resume from. Each shard keeps its own list order
(the order ``lease`` takes them); the shards are interleaved by due time, and the cursor holds,
per shard, the member listed last. A member that has been leased since is no longer in its list:
that shard resumes from its head, whose jobs were queued after it.

Cursors are opaque strings (URL-safe base64 of a small JSON document naming the topic and state,
so a cursor given for another listing is refused rather than misread).
"""

from __future__ import annotations

import base64
import binascii
import heapq
from collections.abc import Mapping
from typing import Any

import orjson

from actors.errors import ValidationError
from actors.lifecycle import State
from actors.storage.calls import ShardPage
from actors.values import JobInfo, JobPage

LISTED_STATES: tuple[State, ...] = (State.DELAYED, State.READY, State.LEASED, State.DEAD)
_EXPECTED_CURSOR = "the next_after a page returned"

Position = tuple[int, str]  # (score, member)


def listed_state(value: object) -> State:
    """The state to list; ValidationError naming ``state`` for anything else."""
    names = ", ".join(s.value for s in LISTED_STATES)
    if isinstance(value, str) and value in {s.value for s in LISTED_STATES}:
        return State(value)
    raise ValidationError("state", f"is {value!r}", f"one of {names}")


def _encode(document: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(document)).rstrip(b"=").decode()


def _decode(after: str, topic: str, state: State) -> dict[str, Any]:
    try:
        text = after.encode("ascii")
        document = orjson.loads(base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4)))
    except (UnicodeEncodeError, binascii.Error, orjson.JSONDecodeError, ValueError):
        document = None
    if not isinstance(document, dict) or "p" not in document:
        raise ValidationError("after", "is not a cursor of a jobs page", _EXPECTED_CURSOR)
    if document.get("t") != topic or document.get("s") != state.value:
        raise ValidationError(
            "after",
            f"is a cursor for the {document.get('s')} jobs of topic {document.get('t')!r}",
            f"a cursor for the {state.value} jobs of topic {topic!r}",
        )
    return document


def zset_after(after: str | None, topic: str, state: State) -> Position | None:
    """The position a delayed, leased or dead page starts after (None: the start)."""
    if after is None:
        return None
    position = _decode(after, topic, state)["p"]
    match position:
        case [int() as score, str() as name] if not isinstance(score, bool):
            return score, name
    raise ValidationError("after", "is not a cursor of a jobs page", _EXPECTED_CURSOR)


def ready_after(after: str | None, topic: str, shards: int) -> dict[int, str]:
    """Per shard, the member a ready page starts after (a shard not named: its list's head)."""
    if after is None:
        return {}
    document = _decode(after, topic, State.READY)
    positions = document["p"]
    if document.get("n") != shards or not isinstance(positions, dict):
        raise ValidationError("after", "is not a cursor of a jobs page", _EXPECTED_CURSOR)
    found: dict[int, str] = {}
    for shard, name in positions.items():
        if not (shard.isdigit() and int(shard) < shards and isinstance(name, str)):
            raise ValidationError("after", "is not a cursor of a jobs page", _EXPECTED_CURSOR)
        found[int(shard)] = name
    return found


def zset_page(topic: str, state: State, pages: list[ShardPage], limit: int) -> JobPage:
    """The first ``limit`` jobs of every shard's page, in score order, up to the earliest
    position an unfinished shard reached."""
    bound = min((p.reached for p in pages if not p.complete and p.reached), default=None)
    merged = heapq.merge(*(p.jobs for p in pages), key=lambda pair: pair[0])
    candidates = [pair for pair in merged if bound is None or pair[0] <= bound]
    taken = candidates[:limit]
    following: Position | None = None
    if len(candidates) > limit:
        following = taken[-1][0]
    elif bound is not None:
        following = bound  # every job up to it is on this page
    jobs = tuple(info for _, info in taken)
    if following is None:
        return JobPage(jobs, None)
    return JobPage(jobs, _encode({"s": state.value, "t": topic, "p": list(following)}))


def ready_page(
    topic: str, pages: Mapping[int, ShardPage], positions: Mapping[int, str], limit: int
) -> JobPage:
    """The first ``limit`` jobs of the shards' ready lists, interleaved by due time, each list
    in its own order."""

    def tagged(shard: int, page: ShardPage) -> list[tuple[int, str, JobInfo]]:
        return [(shard, name, info) for (_, name), info in page.jobs]

    merged = heapq.merge(
        *(tagged(shard, page) for shard, page in sorted(pages.items())),
        key=lambda item: item[2].due_ms,
    )
    candidates = list(merged)
    taken = candidates[:limit]
    if len(candidates) <= limit and all(page.complete for page in pages.values()):
        return JobPage(tuple(info for _, _, info in taken), None)
    following = dict(positions)
    for shard, name, _ in taken:
        following[shard] = name
    cursor = _encode(
        {
            "s": State.READY.value,
            "t": topic,
            "n": len(pages),
            "p": {str(shard): name for shard, name in sorted(following.items())},
        }
    )
    return JobPage(tuple(info for _, _, info in taken), cursor)
