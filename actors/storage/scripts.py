"""Loads the Lua scripts in lua/, from a checkout or from an installed wheel.

A script file is named ``<transition>-<number of keys>.lua``; the loader checks the key count on
every call. Lines ``-- @include <file>`` are replaced by that file, so shared helpers are written
once (Redis has no module system for EVAL scripts).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script

_INCLUDE_RE = re.compile(r"^-- @include (\S+)\s*$", re.MULTILINE)
_NAME_RE = re.compile(r"^(?P<name>[a-z_]+)-(?P<keys>\d+)\.lua$")


def lua_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # actors/
    candidates = (package / "lua", package.parent / "lua")  # wheel, then checkout
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"redelay's Lua scripts are missing: looked in {candidates[0]} and {candidates[1]}"
    )


def _expand(directory: Path, text: str, seen: frozenset[str] = frozenset()) -> str:
    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return ""
        return _expand(directory, (directory / name).read_text(), seen | {name})

    return _INCLUDE_RE.sub(include, text)


@cache
def sources() -> dict[str, tuple[int, str]]:
    """Script name -> (number of keys, expanded source)."""
    directory = lua_dir()
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(directory.glob("*.lua")):
        match = _NAME_RE.match(path.name)
        if match is None:
            continue  # helpers such as _lib.lua are only included
        found[match["name"]] = (int(match["keys"]), _expand(directory, path.read_text()))
    return found


class ScriptRunner:
    """Runs the scripts by name on one client (EVALSHA, loading again after a server restart)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._scripts: dict[str, tuple[int, Script]] = {
            name: (keys, client.register_script(source))
            for name, (keys, source) in sources().items()
        }

    def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        expected, script = self._scripts[name]
        if len(keys) != expected:
            raise TypeError(f"script {name} takes {expected} keys, got {len(keys)}")
        return script(keys=keys, args=args, client=self._client)

    @property
    def names(self) -> list[str]:
        return sorted(self._scripts)
