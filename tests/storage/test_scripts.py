"""The loader finds every transition script, expands includes and constants, checks key counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from actors import FakeClock, Store
from actors import _constants as c
from actors.storage.keys import member
from actors.storage.scripts import (
    ScriptRunner,
    ScriptSourceError,
    expand,
    load_sources,
    lua_dir,
    sources,
)

TRANSITIONS = {
    "add",
    "replace",
    "carry",
    "lease",
    "ack",
    "fail",
    "expire",
    "extend",
    "release",
    "cancel",
    "requeue",
    "purge",
    "inspect",
    "list",
    "delayed",
    "history",
    "schedule",
    "unschedule",
    "refill",
    "pause",
}


def test_every_transition_has_a_script() -> None:
    assert set(sources()) == TRANSITIONS


def test_includes_are_expanded_and_every_script_opens_with_its_contract() -> None:
    for name, (_, source) in sources().items():
        assert "-- @include" not in source, name
        assert "-- @constant" not in source, name
        assert source.startswith(f"-- {name}:"), name
        assert "KEYS[1]" in source.split("\n\n")[0] or "KEYS[1]" in source[:800], name


# -- the loader ---------------------------------------------------------------------------


def write_lua(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_a_file_two_helpers_include_is_pasted_once_before_both(tmp_path: Path) -> None:
    write_lua(
        tmp_path,
        {
            "_base.lua": "local base = 1\n",
            "_left.lua": "-- @include _base.lua\nlocal left = base\n",
            "_right.lua": "-- @include _base.lua\nlocal right = base\n",
            "both-1.lua": "-- both: KEYS[1]\n-- @include _left.lua\n-- @include _right.lua\n",
        },
    )
    source = load_sources(tmp_path)["both"][1]
    assert source.count("local base = 1") == 1
    assert source.index("local base") < source.index("local left") < source.index("local right")


def test_a_file_a_script_and_its_helper_both_include_is_pasted_once(tmp_path: Path) -> None:
    write_lua(
        tmp_path,
        {
            "_base.lua": "local base = 1\n",
            "_helper.lua": "-- @include _base.lua\nlocal helper = base\n",
            "one-1.lua": "-- @include _base.lua\n-- @include _helper.lua\n-- @include _base.lua\n",
        },
    )
    assert expand(tmp_path, "one-1.lua").count("local base = 1") == 1


def test_a_missing_include_names_the_file_that_includes_it(tmp_path: Path) -> None:
    write_lua(
        tmp_path,
        {"_helper.lua": "-- @include _gone.lua\n", "one-1.lua": "-- @include _helper.lua\n"},
    )
    with pytest.raises(ScriptSourceError, match=r"_gone.lua \(_helper.lua includes it\)"):
        load_sources(tmp_path)


def test_an_include_cycle_is_refused_with_its_chain(tmp_path: Path) -> None:
    write_lua(
        tmp_path,
        {
            "_a.lua": "-- @include _b.lua\n",
            "_b.lua": "-- @include _a.lua\n",
            "one-1.lua": "-- @include _a.lua\n",
        },
    )
    with pytest.raises(
        ScriptSourceError, match=re.escape("one-1.lua -> _a.lua -> _b.lua -> _a.lua")
    ):
        load_sources(tmp_path)


def test_a_constant_is_written_from_the_python_constants(tmp_path: Path) -> None:
    write_lua(
        tmp_path, {"one-1.lua": "-- @constant DEFAULT_LEASE_MS\n-- @constant READY_CHANNEL\n"}
    )
    assert expand(tmp_path, "one-1.lua").splitlines() == [
        f"local DEFAULT_LEASE_MS = {c.DEFAULT_LEASE_MS}",
        f"local READY_CHANNEL = '{c.READY_CHANNEL}'",
    ]


@pytest.mark.parametrize("name", ["NO_SUCH_NAME", "DEFAULT_RETRY_SCHEDULE_MS"])
def test_a_constant_that_is_not_a_plain_int_or_str_is_refused(tmp_path: Path, name: str) -> None:
    write_lua(tmp_path, {"one-1.lua": f"-- @constant {name}\n"})
    with pytest.raises(ScriptSourceError, match=name):
        expand(tmp_path, "one-1.lua")


_DEFINITION_RE = re.compile(r"^local function (\w+)\(", re.MULTILINE)
_DIRECT_INCLUDE_RE = re.compile(r"^-- @include (\S+)$", re.MULTILINE)


def helper_functions() -> dict[str, str]:
    """Function name -> the helper file that defines it."""
    return {
        name: path.name
        for path in sorted(lua_dir().glob("_*.lua"))
        for name in _DEFINITION_RE.findall(path.read_text())
    }


@pytest.mark.parametrize("path", sorted(lua_dir().glob("*.lua")), ids=lambda path: path.name)
def test_every_file_includes_the_helpers_it_calls(path: Path) -> None:
    text = path.read_text()
    included = set(_DIRECT_INCLUDE_RE.findall(text)) | {path.name}
    called = {
        name: file
        for name, file in helper_functions().items()
        if re.search(rf"(?<!function )\b{name}\(", text)
    }
    assert {name: file for name, file in called.items() if file not in included} == {}
    if path.name != "_lib.lua":
        assert "_lib.lua" in included  # rcall, now_ms, prefix and the slot probe


@pytest.mark.parametrize("path", sorted(lua_dir().glob("*.lua")), ids=lambda path: path.name)
def test_every_helper_is_defined_before_it_is_called(path: Path) -> None:
    source = expand(lua_dir(), path.name)
    for name in helper_functions():
        calls = [m.start() for m in re.finditer(rf"(?<!function )\b{name}\(", source)]
        if calls:
            assert 0 <= source.find(f"local function {name}(") < min(calls), name


def test_key_count_in_file_name_matches_the_contract() -> None:
    for path in lua_dir().glob("[a-z]*.lua"):
        declared = int(path.stem.rsplit("-", 1)[1])
        text = path.read_text()
        used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", text)}
        assert max(used) == declared, path.name


def test_every_script_compiles_on_the_server(redis_client: redis.Redis) -> None:
    for name, (_, source) in sources().items():
        sha = redis_client.script_load(source)
        assert redis_client.script_exists(sha) == [True], name


def test_runner_refuses_a_wrong_key_count(redis_client: redis.Redis) -> None:
    runner = ScriptRunner(redis_client)
    with pytest.raises(TypeError, match="takes 6 keys"):
        runner("carry", ["a"], [])


def test_expire_drops_a_lease_whose_record_is_gone(store: Store, fake_clock: FakeClock) -> None:
    """A record deleted behind the scripts' back must not stop the other leases expiring."""
    store.add_many([store.new_job("t", job_id, retry_ms=[1_000]) for job_id in ("a", "b", "c")])
    leases = store.lease("t", 3)
    assert [lease.id for lease in leases] == ["a", "b", "c"]
    store.client.hdel(store.keys.jobs, member("t", "a"))  # earliest deadline: expired first
    fake_clock.advance(60_000)

    assert store.expire() == (3, None)

    assert store.client.zscore(store.keys.leased, member("t", "a")) is None
    assert store.client.hget(store.keys.tokens, member("t", "a")) is None
    assert store.get("t", "a") is None
    for job_id in ("b", "c"):
        info = store.get("t", job_id)
        assert info is not None and info.state == "delayed" and info.suspect
    assert store.stats()["t"] == {"delayed": 2, "ready": 0, "leased": 0, "dead": 0}
    lost = [fields["i"] for _, fields in store.iter_audit() if fields["e"] == "lost"]
    assert lost == ["b", "c"]  # no event for the job that no longer exists


# A Lua number passed to redis.call is formatted by Redis with %.17g at every call, about 2,200
# of its instructions an argument (simulations/bench/probes/script_instructions.py); a constant is
# written as the string it stands for instead.
_NUMBER_ARGUMENT_RE = re.compile(r"(?:rcall|redis\.p?call)\((?:[^()]|\([^()]*\))*?,\s*-?\d+\s*[,)]")


def number_arguments(text: str) -> list[str]:
    """The redis.call lines of ``text`` that pass a numeric literal (calls over two lines too)."""
    joined = re.sub(r",\s*\n\s*", ", ", text)
    return [match[0] for match in _NUMBER_ARGUMENT_RE.finditer(joined)]


def test_no_script_passes_a_number_literal_to_redis() -> None:
    found = {p.name: number_arguments(p.read_text()) for p in sorted(lua_dir().glob("*.lua"))}
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_the_number_literal_check_can_fail() -> None:
    assert number_arguments("local x = rcall('ZRANGE', key, 0, -1, 'WITHSCORES')\n")
    assert number_arguments("local x = rcall('LIMIT', f(a, b),\n   'LIMIT', 0, 1)\n")
    assert not number_arguments("local x = rcall('ZRANGE', key, '0', limit - 1)\n")
