"""Fixtures that start private redis-server processes (Unix sockets in temporary directories).

The suite never connects to a server it did not start. The binary comes from
REDELAY_REDIS_SERVER, then PATH, then the `embedded` extra; without one the run stops with a
single message saying how to get one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import _profiles  # noqa: F401  (registers and loads the Hypothesis profile first)
import pytest
import redis
from _reply_cut import ReplyCut
from _wait import WAIT_S

from actors.clock import FakeClock
from actors.errors import RedisServerNotFound
from actors.server.embedded import (
    RedisProcess,
    find_redis_server,
)
from actors.storage.store import Store
from simulations.crash.proxy import Proxy, free_port


def pytest_sessionstart(session: pytest.Session) -> None:
    try:
        find_redis_server()
    except RedisServerNotFound as exc:
        pytest.exit(str(exc), returncode=3)


@pytest.fixture(scope="module")
def binary_server(request: pytest.FixtureRequest) -> Iterator[RedisProcess]:
    """A private server of the binary a test parametrizes it with (indirect), for its module:
    ``@pytest.mark.parametrize("binary_server", redis_binaries(), ids=binary_label,
    indirect=True)`` runs the test once per binary, each on its own server."""
    with tempfile.TemporaryDirectory(prefix="redelay-binary-") as directory:
        server = RedisProcess(os.path.join(directory, "redis"), binary=request.param).start()
        try:
            yield server
        finally:
            server.kill()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    with tempfile.TemporaryDirectory(prefix="redelay-test-") as directory:
        server = RedisProcess(directory).start(timeout_s=WAIT_S)
        try:
            yield server
        finally:
            server.kill()


@pytest.fixture
def redis_client(redis_server: RedisProcess) -> Iterator[redis.Redis]:
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisProcess]]:
    """Starts extra servers a test may kill or restart; all are killed at the end."""
    started: list[RedisProcess] = []

    def start(**kwargs: object) -> RedisProcess:
        server = RedisProcess(tmp_path / f"redis-{len(started)}", **kwargs)  # type: ignore[arg-type]
        started.append(server.start(timeout_s=WAIT_S))
        return server

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(redis_client: redis.Redis, fake_clock: FakeClock) -> Store:
    return Store(redis_client, "test", fake_clock)


@pytest.fixture
def reply_cut(redis_server: RedisProcess, tmp_path: Path) -> Iterator[ReplyCut]:
    """A forwarder in front of ``redis_server`` that loses one reply when armed (_reply_cut.py)."""
    proxy = ReplyCut(redis_server.socket_path, str(tmp_path / "cut.sock"))
    yield proxy
    proxy.close()


@pytest.fixture
def tcp_redis(tmp_path: Path) -> Iterator[tuple[RedisProcess, tuple[str, int]]]:
    """A private server listening on TCP (127.0.0.1, a free port) besides its Unix socket:
    (server, (host, port)). The Unix socket stays a way around any proxy put in front of it."""
    for attempt in range(5):
        port = free_port()
        server = RedisProcess(
            tmp_path / f"redis-tcp-{attempt}",
            extra_args=("--port", str(port), "--bind", "127.0.0.1"),
        )
        try:
            server.start(timeout_s=WAIT_S)
        except RuntimeError:  # the port was taken between the probe and the bind: another one
            continue
        try:
            yield server, ("127.0.0.1", port)
        finally:
            server.kill()
        return
    pytest.fail("no free TCP port for a private redis-server after 5 tries")


@pytest.fixture
def proxy(tcp_redis: tuple[RedisProcess, tuple[str, int]]) -> Iterator[Proxy]:
    """A fault-injecting TCP proxy (simulations/crash/proxy.py) in front of ``tcp_redis``."""
    with Proxy(tcp_redis[1]) as started:
        yield started
