"""The embedded default's data directory holds every job body: it is private to its owner."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import DelayQueue
from actors.server.embedded_default import start_embedded


def modes(directory: Path) -> dict[str, int]:
    """Relative path -> permission bits, of the directory and everything in it but sockets."""
    found = {".": stat.S_IMODE(os.lstat(directory).st_mode)}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            info = os.lstat(path)
            if not stat.S_ISSOCK(info.st_mode):
                found[str(path.relative_to(directory))] = stat.S_IMODE(info.st_mode)
    return found


def assert_private(directory: Path) -> None:
    found = modes(directory)
    assert any("appendonly" in name for name in found), found  # the files that hold the jobs
    for name, mode in found.items():
        wanted = 0o700 if (directory / name).is_dir() else 0o600
        assert mode == wanted, f"{name}: {oct(mode)}, wanted {oct(wanted)} ({found})"


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The permissive umask of many desktops: what made the files world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_data_dir_is_created_0700_with_its_files_0600(tmp_path: Path, open_umask: None) -> None:
    data_dir = tmp_path / ".redelay"
    with DelayQueue(data_dir=data_dir, namespace="private") as queue:
        queue.add("t", "j1", {"email": "someone@example.com"})
        queue.store.client.bgrewriteaof()  # an AOF rewrite writes new files later
    assert_private(data_dir)


def test_a_data_dir_with_open_modes_is_made_private_on_restart(
    tmp_path: Path, open_umask: None
) -> None:
    data_dir = tmp_path / ".redelay"
    with start_embedded(data_dir) as server:
        client = server.client()
        client.set("k", "v")
        client.close()
    for path in [data_dir, *data_dir.rglob("*")]:  # as an older redelay left it
        if not path.is_socket():
            path.chmod(0o755 if path.is_dir() else 0o644)
    with start_embedded(data_dir) as server:
        client = server.client()
        assert client.get("k") == b"v"
        client.close()
        assert_private(data_dir)
    assert_private(data_dir)
