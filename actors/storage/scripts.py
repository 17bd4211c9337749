"""Loads the Lua scripts in lua/, from a checkout or from an installed wheel.

A script file is named ``<transition>-<number of keys>.lua``; the loader checks the key count on
every call. Redis has no module system for EVAL scripts, so the loader pastes the source together
from two kinds of directive line:

- ``-- @include <file>`` is replaced by that file, itself expanded. Every file, script or helper,
  includes what it uses; each file is pasted once per script, at the first line that includes it,
  so two helpers may share a third. A missing file or a cycle is a :class:`ScriptSourceError`.
- ``-- @constant <NAME>`` becomes ``local NAME = <value>`` with the value of ``NAME`` in
  :mod:`actors._constants`, so key names and defaults the scripts share with Python are written
  once, there.

The lifecycle's vocabulary is not declared at all: a name ``STATE_<NAME>``, ``EVENT_<NAME>``,
``CODE_<NAME>`` or ``FIELD_<NAME>`` in Lua code (not in a comment or a string) is replaced by its
literal from :class:`~actors.lifecycle.State`, :class:`~actors.lifecycle.Event` (and
``TopicEvent``), :class:`~actors.errors.ErrorCode` and :class:`~actors.storage.codec.RecordField`
(``STATE_LEASED`` -> ``'leased'``, ``CODE_NOT_LEASED`` -> ``(-4)``): the script runs what it ran
when the literal was typed, at no cost per call (a local would be an upvalue in every helper using
it), and an unknown name is a :class:`ScriptSourceError`.

Then the helper functions the script never uses are left out (:mod:`script_pruning`): Redis runs
a script's whole top level on every call, each helper's closure included.

A full Redis (``maxmemory`` reached, ``noeviction``) must keep delivering: the jobs it holds are
what frees memory once they are acked. Redis refuses a script without a shebang at its first write
command that may use memory (XADD, RPUSH, HSET...), and lets every later write through; a first
write that cannot grow memory (DEL) passes. So the scripts in :data:`MEMORY_FLAGS` start with a
DEL of a key that never exists, and keep running when Redis is full, while ``add`` and ``replace``
are refused before writing anything. Redis 7's ``#!lua flags=allow-oom`` shebang says the same
thing, but Redis 6.2 cannot compile a shebang, and one source for both keeps one SHA per script.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from actors import _constants
from actors.errors import ErrorCode, RedisFullError
from actors.lifecycle import Event, State, TopicEvent
from actors.storage.codec import RecordField
from actors.storage.held_connections import HeldConnections, holdable
from actors.storage.script_pruning import HelperSplitError, prune_unused_helpers

_INCLUDE_RE = re.compile(r"^-- @include (\S+)[ \t]*$", re.MULTILINE)
_CONSTANT_RE = re.compile(r"^-- @constant (\S+)[ \t]*$", re.MULTILINE)
_NAME_RE = re.compile(r"^(?P<name>[a-z_]+)-(?P<keys>\d+)\.lua$")
# Constant strings are key names and the like: kept to characters that need no Lua escaping.
_PLAIN_STRING_RE = re.compile(r"^[A-Za-z0-9_.:|@-]*$")
# Lua's comments and strings, matched to be skipped, or a lifecycle name (group "name").
_LIFECYCLE_TOKEN_RE = re.compile(
    r"--\[(?P<c>=*)\[.*?\](?P=c)\]"  # long comment
    r"|--[^\n]*"  # line comment
    r"|\[(?P<s>=*)\[.*?\](?P=s)\]"  # long string
    r"|'(?:\\.|[^'\\\n])*'"
    r'|"(?:\\.|[^"\\\n])*"'
    r"|(?<![\w.])(?P<name>(?:STATE|EVENT|CODE|FIELD)_\w+)",
    re.DOTALL,
)


# The scripts that move or remove jobs and run when Redis is full; adds and replaces are refused.
MEMORY_FLAGS: frozenset[str] = frozenset(
    {"carry", "lease", "ack", "fail", "expire", "extend", "release", "cancel", "purge", "requeue"}
)
# Prepended to those scripts: a write that uses no memory, so later writes pass the OOM check.
# ARGV[4] is the shard's key prefix (see _lib.lua), so the key is in the shard's slot; pcall,
# because during a slot migration it fails and _lib.lua's probe then answers TRYAGAIN. Before it,
# what _lib.lua asks before reading TIME: on a Redis 6.2 set to replicate scripts verbatim
# (lua-replicate-commands no), only a script that has not written yet may switch to effects.
_ALLOW_FULL_PROLOGUE = (
    "if redis.replicate_commands then redis.replicate_commands() end "
    f"redis.pcall('DEL', ARGV[4] .. '{_constants.SLOT_PROBE_KEY}')"
    "  -- runs when Redis is full: see actors/storage/scripts.py\n"
)


class ScriptSourceError(Exception):
    """The Lua sources cannot be put together: a missing include, a cycle, an unknown constant."""


def refused_for_memory(exc: BaseException) -> bool:
    """Whether Redis refused a command or script because it is over ``maxmemory``: redis-py's
    OutOfMemoryError on Redis 7, a ResponseError quoting the script's -OOM reply on 6.2."""
    return isinstance(exc, redis.ResponseError) and "used memory > 'maxmemory'" in str(exc)


def raise_if_full(what: str, exc: BaseException) -> None:
    """Raises RedisFullError for ``what`` from ``exc`` when Redis refused it for memory; the
    caller re-raises ``exc`` itself otherwise."""
    if refused_for_memory(exc):
        raise RedisFullError(what, str(exc)) from exc


def lua_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # actors/
    candidates = (package / "lua", package.parent / "lua")  # wheel, then checkout
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"redelay's Lua scripts are missing: looked in {candidates[0]} and {candidates[1]}"
    )


def lua_constant(name: str) -> str:
    """``local <name> = <value>`` for a constant of actors._constants."""
    value = getattr(_constants, name, None)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ScriptSourceError(f"@constant {name}: actors._constants has no int or str {name}")
    if isinstance(value, str):
        if not _PLAIN_STRING_RE.match(value):
            raise ScriptSourceError(f"@constant {name}: {value!r} would need escaping in Lua")
        return f"local {name} = '{value}'"
    return f"local {name} = {value}"


@cache
def lifecycle_literals() -> dict[str, str]:
    """Each lifecycle name the scripts may use (see the module docstring) -> its Lua literal."""
    literals = {f"STATE_{state.name}": f"'{state.value}'" for state in State}
    literals |= {f"EVENT_{event.name}": f"'{event.value}'" for event in (*Event, *TopicEvent)}
    literals |= {f"CODE_{code.name}": str(code.value) for code in ErrorCode if code.value >= 0}
    literals |= {f"CODE_{code.name}": f"({code.value})" for code in ErrorCode if code.value < 0}
    literals |= {f"FIELD_{field.name}": f"'{field.value}'" for field in RecordField}
    return literals


def write_lifecycle_literals(source: str) -> str:
    """``source`` with its lifecycle names replaced by their literals."""
    literals = lifecycle_literals()

    def literal(match: re.Match[str]) -> str:
        name = match["name"]
        if name is None:
            return match[0]
        if name not in literals:
            raise ScriptSourceError(f"{name} names no state, event, error code or record field")
        return literals[name]

    return _LIFECYCLE_TOKEN_RE.sub(literal, source)


def expand(directory: Path, name: str) -> str:
    """The file ``name`` of ``directory``, its directives replaced (see the module docstring)."""
    pasted: set[str] = set()

    def paste(chain: tuple[str, ...]) -> str:
        path = directory / chain[-1]
        if not path.is_file():
            where = f"{chain[-2]} includes it" if len(chain) > 1 else "asked for"
            raise ScriptSourceError(f"{chain[-1]} ({where}) is not in {directory}")

        def include(match: re.Match[str]) -> str:
            target = match[1]
            if target in chain:
                raise ScriptSourceError(f"include cycle: {' -> '.join((*chain, target))}")
            if target in pasted:
                return ""
            return paste((*chain, target))

        text = _INCLUDE_RE.sub(include, path.read_text())
        pasted.add(chain[-1])
        return _CONSTANT_RE.sub(lambda match: lua_constant(match[1]), text)

    return paste((name,))


def load_sources(directory: Path) -> dict[str, tuple[int, str]]:
    """Script name -> (number of keys, expanded source), for the scripts in ``directory``."""
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(directory.glob("*.lua")):
        match = _NAME_RE.match(path.name)
        if match is None:
            continue  # helpers such as _lib.lua are only included
        try:
            source = prune_unused_helpers(write_lifecycle_literals(expand(directory, path.name)))
        except HelperSplitError as exc:
            raise ScriptSourceError(f"{path.name}: {exc}") from exc
        if match["name"] in MEMORY_FLAGS:
            source = allow_full(source)
        found[match["name"]] = (int(match["keys"]), source)
    return found


def allow_full(source: str) -> str:
    """``source`` with the prologue that lets it run on a full Redis, after its contract header
    (the leading comment lines), before its first statement."""
    lines = source.splitlines(keepends=True)
    first = next((n for n, line in enumerate(lines) if not line.startswith("--")), len(lines))
    return "".join([*lines[:first], _ALLOW_FULL_PROLOGUE, *lines[first:]])


@cache
def sources() -> dict[str, tuple[int, str]]:
    """Script name -> (number of keys, expanded source), for redelay's scripts."""
    return load_sources(lua_dir())


@cache
def shas() -> dict[str, str]:
    """Script name -> the SHA1 of its expanded source, the name EVALSHA knows it by."""
    return {
        name: hashlib.sha1(source.encode()).hexdigest() for name, (_, source) in sources().items()
    }


class ScriptRunner:
    """Runs the scripts by name on one client (EVALSHA, loading again after a server restart)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._scripts: dict[str, tuple[int, Script]] = {
            name: (keys, client.register_script(source))
            for name, (keys, source) in sources().items()
        }
        # A client with one server: calls skip redis-py's per-command layers (held_connections).
        self.held = HeldConnections(client) if holdable(client) else None

    def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        expected, script = self._scripts[name]
        if len(keys) != expected:
            raise TypeError(f"script {name} takes {expected} keys, got {len(keys)}")
        # What Script.__call__ does, without its per-call import, type check and argument tuples
        # (a few µs of an add's round trip): EVALSHA, and on NOSCRIPT load the script and again.
        try:
            return self._evalsha(script.sha, expected, keys, args)
        except NoScriptError:
            script.sha = self._client.script_load(script.script)
            return self._evalsha(script.sha, expected, keys, args)

    def _evalsha(self, sha: str, key_count: int, keys: list[str], args: list[Any]) -> Any:
        if self.held is not None:
            return self.held.call("EVALSHA", sha, key_count, *keys, *args)
        return self._client.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA", sha, key_count, *keys, *args
        )

    @property
    def names(self) -> list[str]:
        return sorted(self._scripts)
