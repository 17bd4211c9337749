"""The embedded default: a private, persistent redis-server when no Redis URL is given.

``start_embedded(data_dir)`` runs redis-server (see :mod:`actors.server.embedded` for where
the binary comes from) on a Unix socket with append-only persistence in ``data_dir`` (default
``./.redelay/``), so jobs survive a restart of the command. It is stopped when the process exits
(``atexit``) or when :meth:`EmbeddedServer.stop` is called or its ``with`` block ends.

Several processes may use one data directory at once (a worker in one terminal, ``redelay stats``
in another): the server is shared, never doubled, because two servers writing one append-only
file would corrupt it. Two file locks in the data directory make that safe, crashes included
(the kernel drops a dead process's ``flock``):

- ``start.lock`` (exclusive, held for a moment) serializes deciding whether to start a server,
  reuse the running one, or shut it down;
- ``users.lock`` (shared, held while a process uses the server) counts the users: the process that
  stops last (it can take the lock exclusively) shuts the server down, whoever started it.

A server left behind by a process that was killed (SIGKILL skips ``atexit``) keeps running in its
own session; the next ``start_embedded`` on that directory finds it answering on the socket and
reuses it, and the last user then shuts it down.

The directory holds every job body (orders, e-mail addresses), so it is private to its owner:
created 0700, its files 0600 and its subdirectories 0700, made so again on every start (a
directory from an older version, or copied with other modes), and redis-server runs with umask
077 so the files it writes later (an AOF rewrite) are born private.

The directory's data belongs to the redis-server version that first served it (recorded in
``server-version.json``): a server is only ever started with a binary of that version, so a
change of ``PATH`` cannot make a second dataset appear (see :mod:`actors.server.ownership`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors.server.embedded import RedisProcess
from actors.server.ownership import choose_binary, read_owner, record_owner

DEFAULT_DATA_DIR = ".redelay"
START_LOCK = "start.lock"
USERS_LOCK = "users.lock"
SOCKET_NAME = "redis.sock"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077
# A Unix socket path must fit sun_path: 108 bytes on Linux, 104 on macOS. Longer data-dir paths
# get their socket in a per-user temp directory named from the data dir, so every process finds it.
SOCKET_PATH_MAX_CHARS = 100
DEFAULT_START_TIMEOUT_S = 60.0  # loading a large append-only file takes a while
STOP_TIMEOUT_S = 30.0


def socket_path_for(data_dir: Path) -> str:
    """Where the server of ``data_dir`` (an absolute path) listens; the same for every process."""
    candidate = str(data_dir / SOCKET_NAME)
    if len(candidate.encode()) <= SOCKET_PATH_MAX_CHARS:
        return candidate
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    short_dir = Path(tempfile.gettempdir()) / f"redelay-{os.getuid()}-{digest}"
    with contextlib.suppress(FileExistsError):
        short_dir.mkdir(mode=0o700)
    info = os.lstat(short_dir)
    # Someone else's directory (or a symlink) in /tmp must not receive our socket.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeError(f"{short_dir} is not a directory owned by this user; remove it")
    return str(short_dir / SOCKET_NAME)


def make_private(directory: Path) -> None:
    """``directory`` and everything in it readable by its owner only (symlinks not followed:
    what they point at is not ours to change)."""
    os.chmod(directory, PRIVATE_DIR_MODE)
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            path = Path(root) / name
            if not path.is_symlink():
                os.chmod(path, PRIVATE_DIR_MODE)
        for name in files:
            path = Path(root) / name
            if not path.is_symlink() and not stat.S_ISSOCK(os.lstat(path).st_mode):
                os.chmod(path, PRIVATE_FILE_MODE)


def _answering(socket_path: str, timeout_s: float) -> bool:
    """True when a server answers on the socket; False when none listens there.

    A server that is still loading its append-only file counts as answering once it is loaded.
    One that accepts but does not answer within ``timeout_s`` is an error: starting a second
    server on the same files would be worse.
    """
    if not os.path.exists(socket_path):
        return False
    client = redis.Redis(
        unix_socket_path=socket_path,
        socket_timeout=5,
        socket_connect_timeout=1,
        retry=Retry(NoBackoff(), 0),  # a refused connection is an answer, not a hiccup
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                client.ping()
                return True
            except redis.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # waiting for the server to load its data; not a race fix
            except redis.TimeoutError as exc:
                raise RuntimeError(f"a redis-server on {socket_path} is not answering") from exc
            except (redis.ConnectionError, FileNotFoundError):
                return False
    finally:
        client.close()


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # held by others only while they start or stop
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class EmbeddedServer:
    """A handle on the data directory's server. ``stop()`` is idempotent and thread-safe."""

    def __init__(
        self,
        data_dir: Path,
        socket_path: str,
        process: RedisProcess | None,
        users_lock: IO[bytes],
    ) -> None:
        self.data_dir = data_dir
        self.socket_path = socket_path
        self._process = process
        self._users_lock: IO[bytes] | None = users_lock
        self._stop_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def started_here(self) -> bool:
        """True when this process started the server; False when it reused a running one."""
        return self._process is not None

    @property
    def running(self) -> bool:
        return self._users_lock is not None

    def client(self, **kwargs: object) -> redis.Redis:
        """A new client on the server's socket (bytes replies, as redelay needs)."""
        return redis.Redis(unix_socket_path=self.socket_path, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Stops using the server; shuts it down (flushing the append-only file) if last user."""
        with self._stop_lock:
            users = self._users_lock
            if users is None:
                return
            self._users_lock = None
            atexit.unregister(self.stop)
            try:
                fcntl.flock(users, fcntl.LOCK_UN)
                with _exclusive(self.data_dir / START_LOCK):
                    try:
                        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return  # another process still uses it; the last one shuts it down
                    self._shutdown()
                    fcntl.flock(users, fcntl.LOCK_UN)
            finally:
                users.close()

    def _shutdown(self) -> None:
        if self._process is not None and self._process.process is not None:
            self._process.stop()  # SIGTERM: Redis flushes the append-only file and exits
            return
        # No retries: the server closing the connection is the expected answer to SHUTDOWN.
        client = self.client(socket_timeout=STOP_TIMEOUT_S, retry=Retry(NoBackoff(), 0))
        try:
            client.shutdown()  # the same as SIGTERM, for a server another process started
        except redis.ConnectionError:
            return  # already gone
        finally:
            client.close()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while os.path.exists(self.socket_path) and time.monotonic() < deadline:
            time.sleep(0.02)  # waiting for the server to remove its socket on exit

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        how = "started here" if self.started_here else "reused"
        return f"EmbeddedServer({self.url!r}, {how}, {'running' if self.running else 'stopped'})"


def _record_running_owner(directory: Path, socket_path: str) -> None:
    """A server from before owners were recorded: its version owns the data it has loaded."""
    if read_owner(directory) is not None:
        return
    client = redis.Redis(unix_socket_path=socket_path, socket_timeout=5)
    try:
        info = client.info("server")
    finally:
        client.close()
    version = tuple(int(part) for part in str(info["redis_version"]).split("."))
    record_owner(directory, version, str(info.get("executable") or "unknown binary"))


def start_embedded(
    data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR,
    *,
    binary: str | None = None,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> EmbeddedServer:
    """Starts (or reuses) the private redis-server of ``data_dir``; stopped at exit.

    Raises :class:`~actors.errors.RedisServerNotFound` when no redis-server binary is available,
    and :class:`~actors.server.ownership.DataDirVersionError` (a ``ConfigError``) when none of
    those found is the version that owns the directory's data.
    """
    directory = Path(data_dir).resolve()
    directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    make_private(directory)
    socket_path = socket_path_for(directory)
    users = os.fdopen(  # held until stop()
        os.open(directory / USERS_LOCK, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE),
        "a+b",
    )
    try:
        with _exclusive(directory / START_LOCK):
            # Never blocks: an exclusive holder of users.lock holds start.lock too.
            fcntl.flock(users, fcntl.LOCK_SH)
            process = None
            if _answering(socket_path, timeout_s):
                _record_running_owner(directory, socket_path)
            else:
                # Only a binary that reads this directory's data (see actors.server.ownership).
                chosen, version = choose_binary(directory, binary)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(socket_path)  # left by a server that died
                process = RedisProcess(
                    directory, binary=chosen, appendonly=True, new_session=True,
                    umask=PRIVATE_UMASK,
                )  # fmt: skip
                process.socket_path = socket_path
                try:
                    process.start(timeout_s)
                except BaseException:
                    process.kill()
                    raise
                record_owner(directory, version, chosen)
            make_private(directory)  # the locks, log and version record written since
    except BaseException:
        users.close()
        raise
    server = EmbeddedServer(directory, socket_path, process, users)
    atexit.register(server.stop)
    return server
