"""A TCP proxy that fails the way networks fail, for the tests and the chaos simulator (one proxy:
it ships here, with the simulator, and the tests import it from here).

Put it between a client and a real server (a redis-server on TCP or on a Unix socket) and point
the client at ``proxy.url``. It forwards bytes both ways until told otherwise:

- ``blackhole()``: nothing passes either way, on any connection, old or new, and nobody is told:
  no FIN, no RST, every socket stays open (a partition: packets are dropped on the floor). A
  client's connect() still succeeds (the kernel accepts), but nothing it sends arrives. Bytes sent
  meanwhile are held, as TCP would retransmit them, and delivered by ``heal()``; bytes a side sent
  before it reset its connection are dropped (its kernel stopped retransmitting them), and the
  reset reaches the other side only at the heal. A new connection reaches the server only then.
- ``forget()``: every connection open now is forgotten, like a NAT table a middlebox lost:
  nothing passes on it either way ever again, neither side is told, and its sockets stay open
  until ``close()`` (so the server keeps a half-open client too). Connections made afterwards
  pass as usual (unless blackholed).
- ``heal()``: ends a blackhole; held bytes go first. Forgotten connections stay forgotten.

``delivered_up`` counts the bytes delivered to the server, ``accepted`` the connections clients
made: a test that must see a client fall silent compares them before and after. ``links()``
tells how many connections are open and how many of them are forgotten.

A userspace proxy cannot stop its own kernel from acknowledging what a client sends, nor from
answering TCP keepalive probes: a client's keepalive never fires through it. What it exercises is
the client's own detection (socket timeouts, pings with a deadline), which is what a half-open
connection leaves a client with when keepalive is off or slow.

One thread runs every socket (``selectors``); the control methods are thread-safe and take
effect before they return. ``Proxy(upstream).start()`` or ``with Proxy(upstream) as proxy:``;
``upstream`` is ``(host, port)`` or a Unix socket path.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

CHUNK = 65_536
Address = tuple[str, int] | str


@dataclass(eq=False)
class _Link:
    """One client connection and, once forwarding began, its connection to the server."""

    client: socket.socket
    upstream: socket.socket | None = None
    to_up: bytearray = field(default_factory=bytearray)  # read from the client, not yet sent
    to_down: bytearray = field(default_factory=bytearray)
    ended: dict[str, str] = field(default_factory=dict)  # side -> "eof" | "reset"
    forgotten: bool = False
    closed: bool = False

    def sockets(self) -> list[socket.socket]:
        return [s for s in (self.client, self.upstream) if s is not None]


class Proxy:
    def __init__(self, upstream: Address, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self._server = socket.create_server((host, port))
        self._server.setblocking(False)
        self.host, self.port = self._server.getsockname()[:2]
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._links: list[_Link] = []
        self._forgotten_sockets: list[socket.socket] = []
        self._blackholed = False
        self._closing = False
        self._applied = threading.Condition(self._lock)
        self._pending: list[Callable[[], object]] = []  # control calls for the thread to apply
        self._generation = 0  # bumped by every control call; the loop acknowledges it
        self._seen_generation = 0
        self.delivered_up = 0
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    def start(self) -> Proxy:
        self._thread.start()
        return self

    # -- faults (any thread) ----------------------------------------------------------------

    def blackhole(self) -> None:
        self._control(lambda: setattr(self, "_blackholed", True))

    def heal(self) -> None:
        self._control(lambda: setattr(self, "_blackholed", False))

    def forget(self) -> None:
        self._control(self._forget_all)

    def links(self) -> tuple[int, int]:
        """(connections open, of which forgotten)."""
        with self._lock:
            live = [link for link in self._links if not link.closed]
            return len(live), sum(link.forgotten for link in live)

    def close(self) -> None:
        self._control(lambda: setattr(self, "_closing", True))
        self._thread.join(timeout=5)

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _control(self, change: Callable[[], object]) -> None:
        """Runs ``change`` on the proxy's thread and returns once it has taken effect there."""
        with self._lock:
            self._generation += 1
            generation = self._generation
            self._pending.append(change)
            self._wake_w.send(b"x")
            if not self._thread.is_alive():
                self._apply_pending()
                return
            while self._seen_generation < generation:
                self._applied.wait(timeout=1.0)

    def _apply_pending(self) -> None:
        changes, self._pending = self._pending, []
        for change in changes:
            change()
        self._seen_generation = self._generation
        self._applied.notify_all()

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            while True:
                with self._lock:
                    if self._seen_generation < self._generation:
                        self._apply_pending()
                    if self._closing:
                        return
                    self._interest()
                for key, events in self._selector.select(timeout=1.0):
                    with self._lock:
                        self._ready(key, events)
        finally:
            self._shut()

    def _forwarding(self, link: _Link) -> bool:
        return not self._blackholed and not link.forgotten and not link.closed

    def _interest(self) -> None:
        """What each socket is watched for: always reading (to notice EOF and resets while
        blackholed), writing only while it has bytes owed and forwarding is on."""
        for link in list(self._links):
            if link.closed or link.forgotten:
                continue
            if self._forwarding(link):
                if link.upstream is None and "client" in link.ended:
                    self._end(link, reset=True)  # gone before anything reached the server
                    continue
                if link.upstream is None and not self._connect_upstream(link):
                    continue
                self._settle(link)
                if link.closed:
                    continue
            for sock, owed, side in (
                (link.client, link.to_down, "client"),
                (link.upstream, link.to_up, "upstream"),
            ):
                if sock is None:
                    continue
                events = 0 if side in link.ended else selectors.EVENT_READ
                if owed and self._forwarding(link):
                    events |= selectors.EVENT_WRITE
                self._watch(sock, events, (link, side))

    def _watch(self, sock: socket.socket, events: int, data: object) -> None:
        try:
            key = self._selector.get_key(sock)
        except KeyError:
            if events:
                self._selector.register(sock, events, data)
            return
        if not events:
            self._selector.unregister(sock)
        elif key.events != events:
            self._selector.modify(sock, events, data)

    def _ready(self, key: selectors.SelectorKey, events: int) -> None:
        if key.fileobj is self._wake_r:
            try:
                while self._wake_r.recv(CHUNK):
                    pass
            except BlockingIOError:
                pass
            return
        if key.fileobj is self._server:
            self._accept()
            return
        link, side = key.data
        if link.closed or link.forgotten:
            return
        if events & selectors.EVENT_READ:
            self._read(link, side)
        if events & selectors.EVENT_WRITE and self._forwarding(link):
            self._write(link, side)

    def _accept(self) -> None:
        try:
            client, _ = self._server.accept()
        except BlockingIOError:
            return
        client.setblocking(False)
        self.accepted += 1
        self._links.append(_Link(client))

    def _connect_upstream(self, link: _Link) -> bool:
        family = socket.AF_UNIX if isinstance(self.upstream, str) else socket.AF_INET
        upstream = socket.socket(family, socket.SOCK_STREAM)
        try:
            upstream.connect(self.upstream)
        except OSError:
            upstream.close()
            self._end(link, reset=True)
            return False
        upstream.setblocking(False)
        link.upstream = upstream
        return True

    def _read(self, link: _Link, side: str) -> None:
        sock = link.client if side == "client" else link.upstream
        assert sock is not None
        try:
            data: bytes | None = sock.recv(CHUNK)
        except BlockingIOError:
            return
        except OSError:  # a reset: what it sent and was not delivered is gone with it
            data = None
        if data:
            (link.to_up if side == "client" else link.to_down).extend(data)
            return
        link.ended[side] = "eof" if data == b"" else "reset"
        if data is None:
            (link.to_up if side == "client" else link.to_down).clear()
        self._watch(sock, 0, None)

    def _write(self, link: _Link, side: str) -> None:
        sock: socket.socket | None
        if side == "client":
            sock, owed = link.client, link.to_down
        else:
            sock, owed = link.upstream, link.to_up
        if sock is None or not owed:
            return
        try:
            sent = sock.send(owed)
        except BlockingIOError:
            return
        except OSError:
            link.ended[side] = "reset"
            owed.clear()
            return
        if side == "upstream":
            self.delivered_up += sent
        del owed[:sent]

    def _settle(self, link: _Link) -> None:
        """A side that ended, once what it sent is delivered, ends the other side the same way."""
        for side, owed_to_other in (("client", link.to_up), ("upstream", link.to_down)):
            how = link.ended.get(side)
            if how is not None and not owed_to_other:
                self._end(link, reset=how == "reset")
                return

    def _end(self, link: _Link, *, reset: bool) -> None:
        link.closed = True
        for sock in link.sockets():
            self._watch(sock, 0, None)
            if reset:
                _abort(sock)
            else:
                sock.close()
        self._links.remove(link)

    def _forget_all(self) -> None:
        for link in self._links:
            if link.closed or link.forgotten:
                continue
            link.forgotten = True
            link.to_up.clear()
            link.to_down.clear()
            for sock in link.sockets():
                self._watch(sock, 0, None)
                self._forgotten_sockets.append(sock)

    def _shut(self) -> None:
        for link in self._links:
            for sock in link.sockets():
                sock.close()
        for sock in [*self._forgotten_sockets, self._server, self._wake_r, self._wake_w]:
            sock.close()
        self._selector.close()


def _abort(sock: socket.socket) -> None:
    """Closes with an RST, as the peer's reset is passed on."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the caller binds it next; a clash is retried by it)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
