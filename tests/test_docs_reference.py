"""The reference pages (audit schema, key layout, limits) agree with the code they describe.

The audit table in docs/audit.md is checked against the events each Lua script really emits and
against the contract header at the top of each script; the key table against actors/_constants.py;
the limits in docs/lifecycle.md against the constants; the Python examples are run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from actors import _constants as c
from actors import _record
from actors._scripts import lua_dir, sources
from actors.model import Event

DOCS = Path(__file__).resolve().parent.parent / "docs"
_SCRIPT_RE = re.compile(r"[a-z_]+-\d+\.lua")
# An event is appended either directly or through the helper that ends a failed attempt.
_AUDIT_CALL_RE = re.compile(r"audit\(k\.audit, '([a-z_]+)'")
_RETRY_CALL_RE = re.compile(r"end_failed_attempt\([^)']*'([a-z_]+)'")
_HEADER_EVENT_RE = re.compile(r"([a-z_]+) \{")


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


def test_every_key_and_the_channel_are_in_the_key_table() -> None:
    text = (DOCS / "redis-layout.md").read_text()
    names = [c.JOBS_KEY, c.DELAYED_KEY, c.LEASED_KEY, c.TOKENS_KEY, c.DEAD_KEY, c.TOPICS_KEY]
    names += [c.COUNTS_KEY, c.SEQ_KEY, c.AUDIT_KEY, c.WAKE_CHANNEL, c.READY_KEY_PREFIX + "<topic>"]
    rows = text.split("## Keys and channel", 1)[1].split("## ", 1)[0]
    listed = re.findall(r"^\| `<prefix>([^`]+)` \|", rows, re.MULTILINE)
    assert sorted(listed) == sorted(names)
    assert f"{c.KEY_ROOT}:{{<namespace>.<shard>}}:" in text


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


@pytest.mark.parametrize("page", ["audit.md"])
def test_the_python_examples_run(page: str) -> None:
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python example"
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), {"__name__": "docs_example"})
