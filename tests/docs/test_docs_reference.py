"""The reference pages (audit schema, key layout, limits) agree with the code they describe.

The audit table in docs/audit.md is checked against the events each Lua script really emits and
against the contract header at the top of each script; each header also against the keys,
arguments and channels its script uses; the key table against actors/_constants.py, the names the
Lua scripts build from the shard prefix, the namespace config key and the scripts that publish on
each channel; the limits in
docs/lifecycle.md against the constants; the full-Redis table in docs/operations.md against a real
redis-server; every relative link in docs/*.md resolves; the Python examples are run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from _binaries import redis_binaries

from actors import FakeClock, RedisFullError, Store, TopicConfig
from actors import _constants as c
from actors.lifecycle import LEGACY_EVENTS, TopicEvent
from actors.model import Event
from actors.server.embedded import RedisProcess
from actors.storage import codec as _record
from actors.storage.keys import ShardKeys, config_key, worker_key, workers_key
from actors.storage.scripts import lua_dir, sources

DOCS = Path(__file__).resolve().parents[2] / "docs"
_SCRIPT_RE = re.compile(r"[a-z_]+-\d+\.lua")
# An event is appended either directly or through the helper that ends a failed attempt.
_AUDIT_CALL_RE = re.compile(r"audit\(k\.audit, '([a-z_]+)'")
_RETRY_CALL_RE = re.compile(r"end_failed_attempt\([^)']*'([a-z_]+)'")
_HEADER_EVENT_RE = re.compile(r"([a-z_]+) \{")
_HEADER_SECTION_RE = re.compile(r"^-- ([A-Z][a-z]+):", re.MULTILINE)
# `prefix .. NAME`, `prefix .. NAME .. topic` (a ready list), `prefix .. NAME .. name` (a bucket)
_LUA_PREFIX_NAME_RE = re.compile(r"prefix \.\. ([A-Z_]+)( \.\. (?:topic|name))?")
_BUILT_PARTS = {"": "", " .. topic": "<topic>", " .. name": "<member>"}
_LUA_PREFIX_LITERAL_RE = re.compile(r"prefix \.\. ['\"]")
_KEY_ROW_RE = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)


def events_in_code() -> dict[str, set[str]]:
    """Script file name -> events its expanded source appends."""
    found: dict[str, set[str]] = {}
    for path in sorted(lua_dir().glob("[a-z]*.lua")):
        name = path.stem.rsplit("-", 1)[0]
        source = sources()[name][1]
        found[path.name] = set(_AUDIT_CALL_RE.findall(source)) | set(_RETRY_CALL_RE.findall(source))
    return found


def contract_header(path: Path) -> str:
    """The comment lines a script opens with, up to its first include or line of code."""
    lines: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("--") or line.startswith("-- @include"):
            break
        lines.append(line)
    return "\n".join(lines) + "\n"


def header_sections(path: Path) -> dict[str, str]:
    """The labelled parts of a contract header ("Returns", "Events", ...) -> their text."""
    parts = _HEADER_SECTION_RE.split(contract_header(path))
    labels = parts[1::2]
    assert len(labels) == len(set(labels)), f"{path.name} repeats a section: {labels}"
    return dict(zip(labels, parts[2::2], strict=True))


def events_in_headers() -> dict[str, set[str]]:
    """Script file name -> events named in the "Events:" part of its contract header."""
    return {
        path.name: set(_HEADER_EVENT_RE.findall(header_sections(path).get("Events", "")))
        for path in sorted(lua_dir().glob("[a-z]*.lua"))
    }


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
    events = {event.value for event in Event} | {event.value for event in TopicEvent}
    assert set(documented_events()) == events


def test_the_audit_table_names_the_scripts_that_emit_each_event() -> None:
    # Events no script writes any more: documented, emitted by none.
    legacy: dict[str, set[str]] = {event.value: set() for event in LEGACY_EVENTS}
    assert documented_events() == by_event(events_in_code()) | legacy


def test_the_script_headers_list_the_events_the_code_emits() -> None:
    assert events_in_headers() == events_in_code()


def test_the_event_check_can_fail() -> None:
    code = events_in_code()
    code["ack-7.lua"] = code["ack-7.lua"] - {"acked"}
    assert documented_events() != by_event(code)


# -- the channels each script publishes on ---------------------------------------------------

_FUNCTION_RE = re.compile(r"^local function (\w+)\(.*?^end$", re.MULTILINE | re.DOTALL)
_PUBLISH_RE = re.compile(r"rcall\('PUBLISH', ([^,]+),")
# What a PUBLISH names -> the channel, as the key table writes it. The wake channel reaches the
# helpers as a parameter; a script publishes on it only when the script takes it as an argument.
_CHANNEL_EXPRESSIONS = {"wake_channel": "<prefix>wake", "prefix .. READY_CHANNEL": "<prefix>ready"}
_WAKE_ARGUMENT_RE = re.compile(r"^local wake_channel = ARGV\[\d+\]$", re.MULTILINE)
_HEADER_CHANNEL_RE = re.compile(r"<prefix>(?:wake|ready)\b(?!:)")


def reachable_code(source: str) -> tuple[str, str]:
    """(the script's own body, that body plus every helper function it calls, directly or through
    other helpers) of an expanded script: helpers it includes but never calls are left out."""
    functions = {match[1]: match[0] for match in _FUNCTION_RE.finditer(source)}
    body = _FUNCTION_RE.sub("", source)
    reached: dict[str, str] = {}
    pending = [body]
    while pending:
        text = pending.pop()
        for name, definition in functions.items():
            if name not in reached and re.search(rf"\b{name}\(", text):
                reached[name] = definition
                pending.append(definition.split("\n", 1)[1])  # the body, not the name itself
    return body, "\n".join([body, *reached.values()])


def channels_published(source: str) -> set[str]:
    """The channels an expanded script can publish on."""
    body, code = reachable_code(source)
    channels = {_CHANNEL_EXPRESSIONS[expr.strip()] for expr in _PUBLISH_RE.findall(code)}
    if not _WAKE_ARGUMENT_RE.search(body):
        channels.discard("<prefix>wake")
    return channels


def publishes_in_code() -> dict[str, set[str]]:
    return {
        path.name: channels_published(sources()[path.stem.rsplit("-", 1)[0]][1])
        for path in sorted(lua_dir().glob("[a-z]*.lua"))
    }


def publishes_in_headers() -> dict[str, set[str]]:
    """Script file name -> channels named in the "Publishes:" part of its contract header."""
    found: dict[str, set[str]] = {}
    for path in sorted(lua_dir().glob("[a-z]*.lua")):
        sections = header_sections(path)
        assert "Publishes" in sections, f"{path.name} has no Publishes: section"
        found[path.name] = set(_HEADER_CHANNEL_RE.findall(sections["Publishes"]))
    return found


def test_the_script_headers_list_the_channels_the_code_publishes_on() -> None:
    assert publishes_in_headers() == publishes_in_code()


def publishers_in_key_table(text: str) -> dict[str, set[str]]:
    """Channel -> the scripts the "Written by" cell of its row in docs/redis-layout.md names."""
    rows = text.split("## Keys and channels\n", 1)[1].split("\n## ", 1)[0]
    scripts = set(sources())
    found: dict[str, set[str]] = {}
    for line in rows.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) > 3 and "pub/sub channel" in cells[1]:
            found[cells[0].strip("`")] = set(re.findall(r"`([a-z]+)`", cells[3])) & scripts
    return found


def publishers_in_code() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for script, channels in publishes_in_code().items():
        for channel in channels:
            found.setdefault(channel, set()).add(script.rsplit("-", 1)[0])
    return found


def test_the_key_table_names_the_scripts_that_publish_on_each_channel() -> None:
    text = (DOCS / "redis-layout.md").read_text()
    assert publishers_in_key_table(text) == publishers_in_code()
    assert publishers_in_key_table(text.replace("`expire`, `requeue`", "`requeue`")) != (
        publishers_in_code()
    )


def test_the_publish_check_follows_helpers_and_can_fail() -> None:
    code = publishes_in_code()
    # fail-9 publishes only through end_failed_attempt -> place (two helpers deep).
    assert code["fail-10.lua"] == {"<prefix>wake", "<prefix>ready"}
    # requeue-6 calls place without a wake channel, so it can only publish ready notices.
    assert code["requeue-6.lua"] == {"<prefix>ready"}
    assert code["purge-6.lua"] == set()
    headers = publishes_in_headers()
    headers["carry-6.lua"] = set()
    assert headers != code


# -- keys, arguments and returns in the contract headers ------------------------------------

_KEYS_RE = re.compile(r"KEYS\[(\d+)\]")
_ARGV_USED_RE = re.compile(r"ARGV\[(\d+)[\] ]")  # ARGV[5] and the base of ARGV[6 + j * 3]
_ARGV_LISTED_RE = re.compile(r"ARGV\[(\d+)(?:\.\.(\d*))?\]")  # ARGV[5], ARGV[1..4], ARGV[6..]


def script_paths() -> list[Path]:
    return sorted(lua_dir().glob("[a-z]*.lua"))


def arguments_listed(header: str) -> Callable[[int], bool]:
    """Whether the header describes ARGV[n]."""
    listed: list[tuple[int, float]] = []  # (first, last) index; ARGV[6..] has no last
    for match in _ARGV_LISTED_RE.finditer(header):
        first, last = match[1], match[2]
        if last is None:
            listed.append((int(first), int(first)))
        else:
            listed.append((int(first), float(last) if last else float("inf")))

    def covers(n: int) -> bool:
        return any(first <= n <= last for first, last in listed)

    return covers


@pytest.mark.parametrize("path", script_paths(), ids=lambda path: path.name)
def test_the_contract_header_lists_every_key_argument_and_return(path: Path) -> None:
    header = contract_header(path)
    code = path.read_text()[len(header) :]
    declared = int(path.stem.rsplit("-", 1)[1])
    assert {int(n) for n in _KEYS_RE.findall(header)} == set(range(1, declared + 1))
    assert {int(n) for n in _KEYS_RE.findall(code)} == set(range(1, declared + 1))
    covers = arguments_listed(header)
    assert [n for n in sorted({int(n) for n in _ARGV_USED_RE.findall(code)}) if not covers(n)] == []
    assert covers(1) and covers(4), "the common ARGV[1..4] of _lib.lua"
    assert {"Returns", "Events", "Publishes"} <= set(header_sections(path))
    _, reached = reachable_code(sources()[path.stem.rsplit("-", 1)[0]][1])
    if "ready_key(" in reached:  # a key the script builds rather than takes in KEYS
        assert "<prefix>ready:<topic>" in header


def test_an_unlisted_argument_is_noticed() -> None:
    covers = arguments_listed("-- ARGV[1..4] common   ARGV[5] n   ARGV[7..] groups")
    assert [n for n in (1, 4, 5, 6, 7, 90) if not covers(n)] == [6]


def key_names_in_code() -> list[str]:
    """Every name redelay gives a key or channel, as the key table writes it."""
    keys = ShardKeys("ns", 0)
    names = [keys.jobs, keys.delayed, keys.leased, keys.tokens, keys.dead, keys.topics]
    names += [keys.counts, keys.seq, keys.audit, keys.history, keys.history_previous]
    names += [keys.gates, keys.wake_channel]
    names += [keys.ready("<topic>")]
    names += [keys.ready_channel, keys.slot_probe, keys.outbox_marker("<member>")]
    shard_keys = {name.replace(keys.prefix, "<prefix>", 1) for name in names}
    # Names the scripts build themselves, e.g. `prefix .. READY_KEY_PREFIX .. topic`.
    for path in sorted(lua_dir().glob("*.lua")):
        for constant, topic in _LUA_PREFIX_NAME_RE.findall(path.read_text()):
            shard_keys.add(f"<prefix>{getattr(c, constant)}" + _BUILT_PARTS[topic])
    namespace_keys = [config_key("<namespace>"), workers_key("<namespace>")]
    return [*sorted(shard_keys), *namespace_keys, worker_key("<namespace>", "<name>")]


def test_the_scripts_build_key_names_from_the_constants_only() -> None:
    built = []
    for path in sorted(lua_dir().glob("*.lua")):
        built += _LUA_PREFIX_NAME_RE.findall(path.read_text())
        assert _LUA_PREFIX_LITERAL_RE.findall(path.read_text()) == [], path.name
    assert sorted(constant for constant, _ in built) == sorted(
        [
            "READY_KEY_PREFIX",
            "READY_CHANNEL",
            "SLOT_PROBE_KEY",
            "SCHEDULES_KEY",
            "GATES_KEY",  # a lost suspect's mark goes (HDEL only: lua/_lost.lua)
            "DUE_BUCKET_PREFIX",  # the delayed set's buckets (lua/_delayed.lua)
        ]
    )


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


def test_the_record_table_gives_the_lease_default() -> None:
    text = (DOCS / "redis-layout.md").read_text()
    assert f"else {c.DEFAULT_LEASE_MS} (`DEFAULT_LEASE_MS`)" in text


def test_every_record_field_is_in_the_record_table() -> None:
    assert _record.__doc__ is not None
    in_code = set(re.findall(r"``([a-z])``", _record.__doc__))
    text = (DOCS / "redis-layout.md").read_text().split("## The job record", 1)[1]
    in_docs = set(re.findall(r"^\| `([a-z])` \|", text, re.MULTILINE))
    assert in_docs == in_code == set("bdanrlcxtpshwouq")


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
        except (redis.RedisError, RedisFullError) as exc:
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
