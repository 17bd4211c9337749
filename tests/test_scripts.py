"""The loader finds every transition script, expands includes, and checks key counts."""

from __future__ import annotations

import re

import pytest
import redis

from actors.storage.scripts import ScriptRunner, lua_dir, sources

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
}


def test_every_transition_has_a_script() -> None:
    assert set(sources()) == TRANSITIONS


def test_includes_are_expanded_and_every_script_opens_with_its_contract() -> None:
    for name, (_, source) in sources().items():
        assert "-- @include" not in source, name
        assert source.startswith(f"-- {name}:"), name
        assert "KEYS[1]" in source.split("\n\n")[0] or "KEYS[1]" in source[:800], name


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
    with pytest.raises(TypeError, match="takes 4 keys"):
        runner("carry", ["a"], [])
