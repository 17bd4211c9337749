"""The Redis binaries a test can run once per: the machine's, and the embedded extra's."""

from __future__ import annotations

import os

from actors.server.embedded import embedded_binary, find_redis_server, server_version


def redis_binaries() -> list[str]:
    """The main binary, plus the embedded extra's Redis 6.2 when it is installed and different."""
    binaries = [find_redis_server()]
    extra = embedded_binary()
    if extra is not None and os.path.realpath(extra) != os.path.realpath(binaries[0]):
        binaries.append(extra)
    return binaries


def binary_label(binary: str) -> str:
    """A test id for a Redis binary: its version, as "redis-7.0.15"."""
    return "redis-" + ".".join(str(n) for n in server_version(binary))
