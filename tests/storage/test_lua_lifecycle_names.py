"""The Lua scripts spell states, events, error codes and job record fields by name
(STATE_LEASED, CODE_STALE_TOKEN, FIELD_DUE...), which the loader writes from the Python tables;
a literal typed into lua/ again is a second copy of the lifecycle, and these tests name it."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from actors.errors import ErrorCode
from actors.lifecycle import Event, State, TopicEvent
from actors.storage.codec import RecordField
from actors.storage.scripts import (
    ScriptSourceError,
    lifecycle_literals,
    load_sources,
    lua_dir,
)

# Lua code with comments dropped: each string literal (group "string") or number (group "number").
_TOKEN_RE = re.compile(
    r"--\[(?P<c>=*)\[.*?\](?P=c)\]"
    r"|--[^\n]*"
    r"|'(?P<string>(?:\\.|[^'\\\n])*)'"
    r'|"(?:\\.|[^"\\\n])*"'
    r"|(?<![\w.])(?P<number>-\s*\d+)(?![\w.])"
    r"|\w+",
    re.DOTALL,
)
_RECORD_FIELD_RE = re.compile(r"\brecord\[\s*'[a-z]'\s*\]")

# Literals that spell a state or an event's word but are something else: audit entry field names
# and reasons, and a listing kind. Counted per file, so one more of them is still caught.
NOT_LIFECYCLE = Counter(
    {
        ("_lost.lua", "lost"): 3,  # quarantined {why="lost", lost=n}; lost {lost=n}
        ("ack-7.lua", "cancelled"): 1,  # acked {cancelled=1}
        ("release-7.lua", "released"): 1,  # cancelled {why='released'}
        ("list-3.lua", "delayed"): 1,  # the listing kind the Python side asks for
    }
)
LIFECYCLE_WORDS = {str(value) for value in (*State, *Event, *TopicEvent)}
NEGATIVE_CODES = {str(code.value) for code in ErrorCode if code.value < 0}


def literals_in(source: str) -> tuple[Counter[str], list[str]]:
    """The lifecycle words among the string literals of ``source``'s code, and its negative
    numbers that are error codes."""
    words: Counter[str] = Counter()
    codes: list[str] = []
    for match in _TOKEN_RE.finditer(source):
        if match["string"] in LIFECYCLE_WORDS:
            words[match["string"]] += 1
        number = match["number"]
        if number is not None and re.sub(r"\s", "", number) in NEGATIVE_CODES:
            codes.append(number)
    return words, codes


def test_no_lua_file_types_a_state_event_or_error_code() -> None:
    found: Counter[tuple[str, str]] = Counter()
    codes: dict[str, list[str]] = {}
    for path in sorted(lua_dir().glob("*.lua")):
        words, numbers = literals_in(path.read_text())
        found.update({(path.name, word): n for word, n in words.items()})
        if numbers:
            codes[path.name] = numbers
    typed = found - NOT_LIFECYCLE
    assert not typed, f"write STATE_<NAME> / EVENT_<NAME> instead of these literals: {dict(typed)}"
    assert not codes, f"write CODE_<NAME> instead of these error codes: {codes}"


def test_no_lua_file_types_a_job_record_field() -> None:
    code = {
        path.name: re.sub(r"--[^\n]*", "", path.read_text()) for path in lua_dir().glob("*.lua")
    }
    typed = {name: _RECORD_FIELD_RE.findall(text) for name, text in code.items()}
    typed = {name: found for name, found in typed.items() if found}
    assert not typed, f"write record[FIELD_<NAME>] instead: {typed}"


def test_the_guard_finds_a_typed_literal() -> None:
    words, codes = literals_in(
        "-- 'leased' in a comment is fine\n"
        "if state == 'leased' then return -3 end\n"
        "count(k, m, STATE_READY, -1)\n"
    )
    assert words == Counter({"leased": 1})
    assert codes == ["-3"]


def write_lua(directory: Path, source: str) -> None:
    (directory / "one-1.lua").write_text(f"-- one: a test script\n{source}")


def test_names_are_written_as_their_python_values(tmp_path: Path) -> None:
    write_lua(
        tmp_path,
        "-- STATE_LEASED stays in a comment\n"
        "local s = 'STATE_LEASED'\n"
        "return {STATE_LEASED, EVENT_PAUSED, CODE_OK, CODE_NOT_LEASED,\n"
        "        record[FIELD_DUE], k.FIELD_X}\n",
    )
    source = load_sources(tmp_path)["one"][1]
    assert source.splitlines()[1:] == [
        "-- STATE_LEASED stays in a comment",
        "local s = 'STATE_LEASED'",
        f"return {{'{State.LEASED}', '{TopicEvent.PAUSED}', {ErrorCode.OK.value}, "
        f"({ErrorCode.NOT_LEASED.value}),",
        f"        record['{RecordField.DUE}'], k.FIELD_X}}",
    ]


@pytest.mark.parametrize("name", ["STATE_SLEEPING", "EVENT_EXPLODED", "CODE_NOPE", "FIELD_ZZ"])
def test_an_unknown_name_is_refused(tmp_path: Path, name: str) -> None:
    write_lua(tmp_path, f"return {name}\n")
    with pytest.raises(ScriptSourceError, match=name):
        load_sources(tmp_path)


def test_every_state_event_code_and_field_has_a_name() -> None:
    literals = lifecycle_literals()
    assert len(literals) == len(State) + len(Event) + len(TopicEvent) + len(ErrorCode) + len(
        RecordField
    )
    assert literals["EVENT_CANCEL_REQUESTED"] == f"'{Event.CANCEL_REQUESTED}'"
    assert literals["CODE_STALE_TOKEN"] == f"({ErrorCode.STALE_TOKEN.value})"
