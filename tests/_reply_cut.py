"""A TCP forwarder in front of a real redis-server that can lose one reply on purpose.

A client whose connection drops after Redis ran its command, and before the reply came back,
cannot know whether the command ran. A SIGKILL of Redis makes that happen only by luck of
timing; this makes it happen every time: once armed with a byte pattern, the next request that
contains it is passed on to Redis, Redis's answer is read and thrown away, and the client's
connection is closed. Everything else is passed through as it is, on every connection.

It is a network fault, not a stand-in for Redis: every command still runs on the real server.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

import redis

from actors.storage.scripts import shas, sources

CHUNK = 65_536


class ReplyCut:
    def __init__(self, redis_socket: str, own_socket: str) -> None:
        self.redis_socket = redis_socket  # the real server's Unix socket
        self.socket_path = own_socket
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(own_socket)
        self._listener.listen()
        self._lock = threading.Lock()
        self._pattern: bytes | None = None
        self.cuts = 0  # replies thrown away so far
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="reply-cut", daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def arm(self, pattern: bytes) -> None:
        """Loses the reply to the next request that contains ``pattern`` (once)."""
        with self._lock:
            self._pattern = pattern

    def arm_script(self, script: str) -> None:
        """Loses the reply to the next call of one of redelay's scripts (``"add"``, ``"ack"``,
        ...). Every script is loaded first, straight on the server, so the call that loses its
        reply is the script's own and not a NOSCRIPT that is sent again."""
        with contextlib.closing(redis.Redis(unix_socket_path=self.redis_socket)) as direct:
            for _, source in sources().values():
                direct.script_load(source)
        self.arm(shas()[script].encode())

    def close(self) -> None:
        self._closed = True
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.redis_socket)
            self._sockets += [client, server]
            link = _Link(self, client, server)
            for source, target, drop in (
                (client, server, link.request),
                (server, client, link.reply),
            ):
                threading.Thread(
                    target=_pump, args=(source, target, drop, link.sockets), daemon=True
                ).start()


class _Link:
    """One client connection and its own connection to Redis."""

    def __init__(self, cut: ReplyCut, client: socket.socket, server: socket.socket) -> None:
        self.proxy = cut
        self.sockets = (client, server)
        self.cutting = False  # this connection's next reply is to be lost
        self.tail = b""  # the end of the last request chunk: a pattern split in two is found

    def request(self, data: bytes) -> bool:
        """Every request goes on to Redis; the one with the pattern marks its reply lost."""
        proxy = self.proxy
        with proxy._lock:
            if proxy._pattern is not None and proxy._pattern in self.tail + data:
                proxy._pattern = None
                self.cutting = True  # before it is sent: the reply must not slip through
        self.tail = data[-256:]
        return False

    def reply(self, data: bytes) -> bool:
        """True (throw it away, close) for the answer to the marked request: it ran on Redis
        and the client never learns so."""
        if self.cutting:
            with self.proxy._lock:
                self.proxy.cuts += 1
        return self.cutting


def _pump(
    source: socket.socket,
    target: socket.socket,
    drop: Callable[[bytes], bool],
    both: tuple[socket.socket, socket.socket],
) -> None:
    """Passes what ``source`` sends on to ``target`` until either side closes, or until
    ``drop`` says a chunk is to be thrown away, which closes the connection's two sockets."""
    while True:
        try:
            data = source.recv(CHUNK)
        except OSError:
            data = b""
        if not data or drop(data):
            _close(*both)
            return
        try:
            target.sendall(data)
        except OSError:
            _close(*both)
            return


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
