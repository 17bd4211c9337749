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
            cut = threading.Event()  # set once this connection's next reply is to be lost
            threading.Thread(target=self._requests, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, cut), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        seen = b""  # the end of the previous chunk, so a pattern split across two is found
        while True:
            try:
                data = client.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                _close(client, server)
                return
            with self._lock:
                pattern = self._pattern
                if pattern is not None and pattern in seen + data:
                    self._pattern = None
                    cut.set()  # before sending: the reply must not slip through
            seen = data[-256:]
            try:
                server.sendall(data)
            except OSError:
                _close(client, server)
                return

    def _replies(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        while True:
            try:
                data = server.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                _close(client, server)
                return
            if cut.is_set():
                # The request ran on Redis (here is its answer); the client never learns so.
                with self._lock:
                    self.cuts += 1
                _close(client, server)
                return
            try:
                client.sendall(data)
            except OSError:
                _close(client, server)
                return


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
