"""The reference pages (audit schema, key layout, limits) agree with the code they describe.

The audit table in docs/audit.md is checked against the events each Lua script really emits and
against the contract header at the top of each script; the key table against actors/_constants.py,
the names the Lua scripts build from the shard prefix, and the namespace config key; the limits in
docs/lifecycle.md against the constants; the full-Redis table in docs/operations.md against a real
redis-server; every relative link in docs/*.md resolves; the Python examples are run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from conftest import redis_binaries

from actors import FakeClock, Store, TopicConfig
from actors import _constants as c
from actors.model import Event
from actors.server.embedded import RedisProcess
from actors.storage import codec as _record
from actors.storage.keys import ShardKeys
from actors.storage.namespace_config import config_key
from actors.storage.scripts import lua_dir, sources
from actors.storage.store import ready_channel

DOCS = Path(__file__).resolve().parent.parent / "docs"
_SCRIPT_RE = re.compile(r"[a-z_]+-\d+\.lua")
# An event is appended either directly or through the helper that ends a failed attempt.
_AUDIT_CALL_RE = re.compile(r"audit\(k\.audit, '([a-z_]+)'")
_RETRY_CALL_RE = re.compile(r"end_failed_attempt\([^)']*'([a-z_]+)'")
_HEADER_EVENT_RE = re.compile(r"([a-z_]+) \{")
_LUA_PREFIX_NAME_RE = re.compile(r"prefix \.\. '([^']+)'( \.\. topic)?")
_KEY_ROW_RE = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)


def events_in_code() -> dict[str, set[str]]:
    """Script file name -> events its expanded source appends."""
    found: dict[str, set[str]] = {}
    for path in sorted(lua_dir().glob("[a-z]*.lua")):
        name = path.stem.rsplit("-", 1)[0]
        source = sources()[name][1]
        found[path.name] = set(_AUDIT_CALL_RE.findall(source)) | set(_RETRY_CALL_RE.findall(source))
    return found


def events_in_headers() -> dict[str, set[str]]:
    """Script file name -> events named in the "Events:" part of its contract header."""
    found: dict[str, set[str]] = {}
    for path in sorted(lua_dir().glob("[a-z]*.lua")):
        header = path.read_text().split("-- @include", 1)[0]
        _, _, events = header.partition("-- Events:")
        found[path.name] = set(_HEADER_EVENT_RE.findall(events))
    return found


def documented_events() -> dict[str, set[str]]:
    """Event -> script file names listed as emitting it in docs/audit.md."""
    text = (DOCS / "audit.md").read_text()
    table: dict[str, set[str]] = {}
    section = text.split("## Events", 1)[1].split("\n\n")
    rows = next(block for block in section if block.startswith("| Event |"))
    for line in rows.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        table[cells[0].strip("`")] = set(_SCRIPT_RE.findall(cells[1]))
    return table


def by_event(per_script: dict[str, set[str]]) -> dict[str, set[str]]:
    emitters: dict[str, set[str]] = {}
    for script, events in per_script.items():
        for event in events:
            emitters.setdefault(event, set()).add(script)
    return emitters


def test_every_model_event_is_documented_once() -> None:
    assert set(documented_events()) == {event.value for event in Event}


def test_the_audit_table_names_the_scripts_that_emit_each_event() -> None:
    assert documented_events() == by_event(events_in_code())


def test_the_script_headers_list_the_events_the_code_emits() -> None:
    assert events_in_headers() == events_in_code()


def test_the_event_check_can_fail() -> None:
    code = events_in_code()
    code["ack-5.lua"] = code["ack-5.lua"] - {"acked"}
    assert documented_events() != by_event(code)


def key_names_in_code() -> list[str]:
    """Every name redelay gives a key or channel, as the key table writes it."""
    names = [c.JOBS_KEY, c.DELAYED_KEY, c.LEASED_KEY, c.TOKENS_KEY, c.DEAD_KEY, c.TOPICS_KEY]
    names += [c.COUNTS_KEY, c.SEQ_KEY, c.AUDIT_KEY, c.WAKE_CHANNEL, c.READY_KEY_PREFIX + "<topic>"]
    keys = ShardKeys("ns", 0)
    names.append(ready_channel(keys).removeprefix(keys.prefix))
    # Names the scripts build themselves: `prefix .. 'ready:' .. topic`, `prefix .. 'slot-probe'`.
    for path in sorted(lua_dir().glob("*.lua")):
        for name, topic in _LUA_PREFIX_NAME_RE.findall(path.read_text()):
            names.append(name + ("<topic>" if topic else ""))
    shard_keys = sorted({f"<prefix>{name}" for name in names})
    return [*shard_keys, config_key("<namespace>")]


def key_table_names(text: str) -> list[str]:
    rows = text.split("## Keys and channels\n", 1)[1].split("\n## ", 1)[0]
    return _KEY_ROW_RE.findall(rows)


def test_every_key_and_channel_is_in_the_key_table_once() -> None:
    text = (DOCS / "redis-layout.md").read_text()
    listed = key_table_names(text)
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(key_names_in_code())
    assert f"{c.KEY_ROOT}:{{<namespace>.<shard>}}:" in text


@pytest.mark.parametrize(
    "row", ["| `<prefix>slot-probe` |", "| `<prefix>ready` |", "| `redelay:{<namespace>}:config` |"]
)
def test_a_name_missing_from_the_key_table_is_noticed(row: str) -> None:
    text = (DOCS / "redis-layout.md").read_text()
    assert row in text
    assert sorted(key_table_names(text.replace(row, "| something else |"))) != sorted(
        key_names_in_code()
    )


def test_every_record_field_is_in_the_record_table() -> None:
    assert _record.__doc__ is not None
    in_code = set(re.findall(r"``([a-z])``", _record.__doc__))
    text = (DOCS / "redis-layout.md").read_text().split("## The job record", 1)[1]
    in_docs = set(re.findall(r"^\| `([a-z])` \|", text, re.MULTILINE))
    assert in_docs == in_code == set("bdanrlcx")


@pytest.mark.parametrize(
    "phrase",
    [
        f"1 to {c.NAMESPACE_MAX_CHARS} characters",
        f"1 to {c.TOPIC_MAX_CHARS} characters",
        f"1 to {c.JOB_ID_MAX_CHARS} characters",
        f"{c.BODY_MAX_BYTES // 1024} KiB ({c.BODY_MAX_BYTES:,} bytes)",
        f"({c.DELAY_MAX_MS:,} ms: 10 times 366 days)",
        f"1 to {c.SCHEDULE_MAX_STEPS} delays",
        f"{c.LEASE_MS_MIN} ms to 24 h ({c.LEASE_MS_MAX:,} ms)",
        f"at most {c.CALLBACK_URL_MAX_CHARS:,} characters",
        f"cut to {c.REASON_MAX_CHARS} characters",
        f"at most {c.BATCH_MAX_JOBS:,}",
        f"from 1 to {c.CARRY_LIMIT_MAX:,}",
        f"from 1 to {c.LEASE_LIMIT_MAX:,}",
        f"the job's own, else the topic's, else {c.DEFAULT_LEASE_MS:,}",
    ],
)
def test_the_limits_in_the_docs_are_the_constants(phrase: str) -> None:
    text = " ".join((DOCS / "lifecycle.md").read_text().split())
    assert phrase in text


def python_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text()
    return re.findall(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", ["audit.md", "api.md", "operations.md"])
def test_the_python_examples_run(page: str) -> None:
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python example"
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), {"__name__": "docs_example"})


# -- links between the pages ------------------------------------------------------------------

_FENCE_RE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
_LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING_LINE_RE = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE_RE.sub("", path.read_text())
    return {anchor(heading) for heading in _HEADING_LINE_RE.findall(text)}


def broken_links(page: Path, text: str) -> list[str]:
    """Relative links of ``text`` (the page at ``page``) to a missing file or heading."""
    broken: list[str] = []
    for target in _LINK_RE.findall(_FENCE_RE.sub("", text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path_part, _, fragment = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda path: path.name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page, page.read_text()) == []


def test_a_broken_link_is_noticed() -> None:
    page = DOCS / "index.md"
    text = "[a](operations.md#persistence-what-a-crash-can-lose) [b](nowhere.md) [c](api.md#nope)"
    assert broken_links(page, text) == ["nowhere.md: no such file", "api.md#nope: no such heading"]


# -- docs/operations.md: what a full Redis refuses --------------------------------------------


FULL_REDIS_OPERATIONS = {
    "add", "carry", "extend", "configure_topic", "Store.snapshot", "lease", "ack", "fail",
    "release", "cancel", "expire", "requeue_dead", "purge_dead", "get", "stats",
}  # fmt: skip


def full_redis_table() -> tuple[set[str], set[str]]:
    """(refused, still working) operations, as the table in docs/operations.md lists them."""
    text = (DOCS / "operations.md").read_text()
    table = text.split("| Refused | Still works |\n|---|---|\n", 1)[1].split("\n", 1)[0]
    refused, works = table.strip("|").split(" | ")
    names = re.compile(r"`([A-Za-z_.]+)`")
    # The refused cell also names what follows from a refusal (`DelayQueue.start()` fails).
    return set(names.findall(refused)) & FULL_REDIS_OPERATIONS, set(names.findall(works))


def refused_when_full(server: RedisProcess) -> set[str]:
    """Runs every operation on a Redis over its maxmemory; returns those Redis refused."""
    client, clock = server.client(), FakeClock()
    store = Store(client, "ops", clock)
    store.add_many([store.new_job("t", f"d{n}", retry_ms=[1]) for n in range(2)])
    for _ in range(2):  # two failed attempts each: d0 and d1 end dead
        for lease in store.lease("t", 2):
            store.fail("t", lease.id, lease.token, "boom")
        clock.advance(1)
        store.carry()
    # Half due at once (ready), half a millisecond later (delayed), so every call has work.
    store.add_many([store.new_job("t", f"j{n}", "x" * 100, delay_ms=n % 2) for n in range(5000)])
    a, b, c = store.lease("t", 3)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 100_000)

    def carry_due() -> object:
        clock.advance(1)
        return store.carry()

    def expire_all() -> object:
        clock.advance(60_000)  # past every lease deadline
        return store.expire()

    calls: dict[str, Callable[[], object]] = {
        "add": lambda: store.add(store.new_job("t", "new")),
        "carry": carry_due,
        "extend": lambda: store.extend_many([("t", a.id, a.token, 30_000)]),
        "configure_topic": lambda: store.configure_topic("t", TopicConfig()),
        "Store.snapshot": store.snapshot,
        "ack": lambda: store.ack("t", a.id, a.token),
        "fail": lambda: store.fail("t", b.id, b.token, "x"),
        "release": lambda: store.release_many([("t", c.id, c.token)]),
        "lease": lambda: store.lease("t", 1),
        "cancel": lambda: store.cancel("t", "j10"),
        "expire": expire_all,
        "requeue_dead": lambda: store.requeue_dead([("t", "d0")]),
        "purge_dead": lambda: store.purge_dead([("t", "d1")]),
        "get": lambda: store.get("t", "j11"),
        "stats": store.stats,
    }
    assert set(calls) == FULL_REDIS_OPERATIONS
    refused: set[str] = set()
    for name, call in calls.items():
        try:
            call()
        except redis.RedisError as exc:
            assert "maxmemory" in str(exc), exc
            refused.add(name)
    return refused


def test_the_full_redis_table_names_every_operation_once() -> None:
    refused, works = full_redis_table()
    assert refused | works == FULL_REDIS_OPERATIONS
    assert not refused & works


@pytest.mark.parametrize("binary", redis_binaries())
def test_the_full_redis_table_is_what_redis_does(
    binary: str, redis_factory: Callable[..., RedisProcess]
) -> None:
    refused, _ = full_redis_table()
    assert refused_when_full(redis_factory(binary=binary)) == refused
