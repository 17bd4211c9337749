"""The loader drops the helpers a script never uses (actors/storage/script_pruning.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from actors.storage.script_pruning import HelperSplitError, names_in, prune_unused_helpers
from actors.storage.scripts import ScriptSourceError, expand, load_sources, lua_dir, sources

_DEFINED_RE = re.compile(r"^local function (\w+)\(", re.MULTILINE)

HELPERS = """\
local rcall = redis.call
local function leaf(x)
  return x + 1
end
local function middle(x)
  return leaf(x) * 2
end
local function unused(x)
  return middle(x)
end
local function by_value(a, b)
  return a < b
end
"""


def defined(source: str) -> set[str]:
    return set(_DEFINED_RE.findall(source))


def test_a_helper_nothing_calls_is_dropped_and_what_is_called_stays_with_its_callees() -> None:
    pruned = prune_unused_helpers(HELPERS + "return middle(1)\n")
    assert defined(pruned) == {"leaf", "middle"}
    assert pruned.startswith("local rcall = redis.call\n")  # top-level statements stay
    assert pruned.index("function leaf(") < pruned.index("function middle(")  # order too
    assert pruned.endswith("return middle(1)\n")


def test_a_helper_passed_as_a_value_stays() -> None:
    pruned = prune_unused_helpers(HELPERS + "local t = {3, 1}\ntable.sort(t, by_value)\n")
    assert defined(pruned) == {"by_value"}


def test_a_name_in_a_comment_or_a_string_keeps_nothing() -> None:
    body = "-- middle(1) would do\nlocal s = 'leaf(2)' .. \"unused\" .. [[by_value]]\nreturn s\n"
    assert defined(prune_unused_helpers(HELPERS + body)) == set()
    assert names_in(body) == {"local", "s", "return"}


def test_a_helper_that_only_dropped_helpers_call_is_dropped_too() -> None:
    # unused calls middle, which calls leaf: none of them is reached from the body.
    assert defined(prune_unused_helpers(HELPERS + "return 0\n")) == set()


def test_a_helper_closed_by_an_end_with_a_comment_is_refused() -> None:
    source = "local function a()\n  return 1\nend -- a\nlocal function b()\n  return 2\nend\n"
    with pytest.raises(HelperSplitError, match="helper a runs into the next one"):
        prune_unused_helpers(source + "return b()\n")


def test_the_loader_names_the_script_whose_helpers_cannot_be_split(tmp_path: Path) -> None:
    (tmp_path / "_h.lua").write_text("local function a()\n  return 1\nend -- a\n")
    (tmp_path / "_g.lua").write_text("local function b()\n  return 2\nend\n")
    (tmp_path / "s-0.lua").write_text("-- @include _h.lua\n-- @include _g.lua\nreturn b()\n")
    with pytest.raises(ScriptSourceError, match=r"s-0\.lua: helper a"):
        load_sources(tmp_path)


def test_every_shipped_script_keeps_each_helper_its_kept_code_names() -> None:
    dropped_somewhere = False
    for path in sorted(lua_dir().glob("[a-z]*.lua")):
        name = path.stem.rsplit("-", 1)[0]
        whole = defined(expand(lua_dir(), path.name))
        kept_source = sources()[name][1]
        kept = defined(kept_source)
        assert names_in(kept_source) & whole <= kept, name
        dropped_somewhere |= kept < whole
    assert dropped_somewhere  # the check above compared something that was pruned


def test_read_only_scripts_carry_no_write_helpers() -> None:
    inspect = sources()["inspect"][1]
    assert "local function bucket_for(" in inspect  # inspect finds a job's bucket
    assert "local function buckets_by_rank(" not in inspect  # only an add writes by rank
    assert "local function audit(" not in inspect


def test_every_pruned_script_compiles_on_redis(redis_client: redis.Redis) -> None:
    for name, (_, source) in sources().items():
        assert redis_client.script_load(source), name
