"""HTTP callbacks: a job carries a URL instead of a Python handler, and redelay POSTs to it.

``register_callbacks(queue, topic, allowed_hosts=[...])`` registers a built-in handler for the
topic. When a job is due, the handler POSTs the job's body (JSON) to ``job.callback``:

- a 2xx response acks the job, and ``"HTTP <status>"`` lands in the acked audit event;
- any other status, a timeout or a connection error fails the attempt (the reason names the
  status), and the job is retried on the topic's schedule (by default 15s, 3m, 10m, 30m, 30m,
  1h, 2h, 6h, 15h), then dead. A 429 or 503 with ``Retry-After: <seconds>`` sets the next delay.

Which URLs may be called is the operator's decision, not the job's: only http and https, only
hosts in ``allowed_hosts``, and never a loopback, private, link-local or otherwise non-global
address (every address the name resolves to is checked, and the connection goes to a checked
address, so a DNS answer cannot change in between) unless ``allow_private=True``. Redirects are
not followed (a 3xx fails the attempt), and no proxy is used.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from actors.errors import ConfigError, RedelayError
from actors.job import Job, Retry

if TYPE_CHECKING:
    from actors.queue import DelayQueue

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CONCURRENCY = 8
RESPONSE_READ_MAX_BYTES = 64 * 1024  # read (and drop) at most this much of a response body
REASON_BODY_MAX_CHARS = 200  # how much of an error response goes into the failure reason
RETRY_AFTER_MAX_S = 24 * 3600
USER_AGENT = "redelay-callback/0.1"

AddressInfo = tuple[int, tuple[str, int]]  # (family, (ip, port))


class CallbackRefused(RedelayError):
    """The URL may not be called: wrong scheme, host not allowed, or a non-public address."""


class CallbackFailed(RedelayError):
    """The call was made and did not succeed: a non-2xx status, a timeout, a network error."""


def _host_allowed(host: str, allowed_hosts: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in allowed_hosts:
        pattern = pattern.lower().rstrip(".")
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return ip.is_global and not ip.is_multicast


@dataclass(frozen=True)
class CallbackPolicy:
    """Which URLs a callback may call. ``allowed_hosts``: exact names or IPs, ``*.example.com``
    for subdomains, or ``*`` for any host (addresses are still checked)."""

    allowed_hosts: tuple[str, ...]
    allow_private: bool = False

    def check_url(self, url: str) -> tuple[str, str, int]:
        """Scheme, host and port of an allowed URL; raises CallbackRefused otherwise."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise CallbackRefused(f"callback {url!r}: only http and https URLs are called")
        host = parts.hostname
        if not host:
            raise CallbackRefused(f"callback {url!r}: no host")
        if parts.username or parts.password:
            raise CallbackRefused(f"callback {url!r}: credentials in the URL are not sent")
        if not _host_allowed(host, self.allowed_hosts):
            raise CallbackRefused(f"callback host {host!r} is not in allowed_hosts")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise CallbackRefused(f"callback {url!r}: bad port") from None
        return parts.scheme, host, port

    def resolve(self, host: str, port: int) -> list[AddressInfo]:
        """Every address of ``host``; refused if any is not public (unless allow_private)."""
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise CallbackFailed(f"cannot resolve {host!r}: {exc.strerror}") from None
        addresses: list[AddressInfo] = []
        for family, _, _, _, sockaddr in infos:
            ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            if not self.allow_private and not _public(ip):
                raise CallbackRefused(
                    f"callback host {host!r} resolves to {ip}, a non-public address "
                    "(allow_private=True allows it)"
                )
            if (family, (str(ip), port)) not in addresses:
                addresses.append((family, (str(ip), port)))
        return addresses


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address that was checked, whatever the name resolves to now."""

    def __init__(self, host: str, port: int, address: AddressInfo, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        family, sockaddr = self.address
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(sockaddr)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    # http.client writes "Host: name:port" unless the port is the class's default; the plain
    # connection's is 80, so without this an https call on 443 would send "name:443".
    default_port = http.client.HTTPS_PORT

    def __init__(
        self, host: str, port: int, address: AddressInfo, timeout: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(host, port, address, timeout)
        self.context = context

    def connect(self) -> None:
        super().connect()
        # The certificate is checked against the name in the URL, not the address.
        self.sock = self.context.wrap_socket(self.sock, server_hostname=self.host)


def _retry_after_s(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # the HTTP-date form is rare for webhooks; the schedule applies
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


@dataclass
class CallbackHandler:
    """The handler registered by :func:`register_callbacks`; runs on the pool's threads."""

    policy: CallbackPolicy
    timeout_s: float = DEFAULT_TIMEOUT_S
    ssl_context: ssl.SSLContext = field(default_factory=ssl.create_default_context)

    def __call__(self, job: Job) -> str:
        if job.callback is None:
            raise CallbackRefused(f"job {job.topic}/{job.id} has no callback URL")
        scheme, host, port = self.policy.check_url(job.callback)
        addresses = self.policy.resolve(host, port)
        parts = urlsplit(job.callback)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-Redelay-Topic": job.topic,
            "X-Redelay-Id": job.id,
            "X-Redelay-Attempt": str(job.attempt),
        }
        last_error: OSError | None = None
        for address in addresses:  # like a browser: the next address if one does not connect
            connection = self._connection(scheme, host, port, address)
            try:
                connection.connect()
            except OSError as exc:
                connection.close()
                last_error = exc
                continue
            return self._exchange(connection, target, job.body_bytes, headers)
        raise CallbackFailed(f"cannot connect to {host}:{port}: {_describe_os_error(last_error)}")

    def _connection(
        self, scheme: str, host: str, port: int, address: AddressInfo
    ) -> _PinnedHTTPConnection:
        if scheme == "https":
            return _PinnedHTTPSConnection(host, port, address, self.timeout_s, self.ssl_context)
        return _PinnedHTTPConnection(host, port, address, self.timeout_s)

    def _exchange(
        self,
        connection: _PinnedHTTPConnection,
        target: str,
        body: bytes,
        headers: dict[str, str],
    ) -> str:
        started = time.monotonic()
        try:
            connection.request("POST", target, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read(RESPONSE_READ_MAX_BYTES)
        except TimeoutError:
            raise CallbackFailed(f"timed out after {time.monotonic() - started:.1f}s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise CallbackFailed(f"request failed: {_describe_os_error(exc)}") from None
        finally:
            connection.close()
        status = response.status
        if 200 <= status < 300:
            return f"HTTP {status}"
        text = payload.decode("utf-8", errors="replace").strip()[:REASON_BODY_MAX_CHARS]
        reason = f"HTTP {status}" + (f": {text}" if text else "")
        after_s = _retry_after_s(response.getheader("Retry-After"))
        if status in (429, 503) and after_s is not None:
            raise Retry(after=after_s, reason=reason)
        raise CallbackFailed(reason)


def _describe_os_error(exc: BaseException | None) -> str:
    if exc is None:
        return "no address"
    return str(exc) or type(exc).__name__


def register_callbacks(
    queue: DelayQueue,
    topic: str,
    *,
    allowed_hosts: Sequence[str],
    allow_private: bool = False,
    timeout: float = DEFAULT_TIMEOUT_S,
    concurrency: int = DEFAULT_CONCURRENCY,
    retry: Sequence[float | timedelta] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> CallbackHandler:
    """Registers the HTTP callback handler for ``topic`` on ``queue`` (before ``start()``).

    ``timeout`` (seconds) bounds connecting and each read; the handler as a whole gets
    ``2 * timeout + 5`` seconds before the pool fails the attempt. ``retry`` is the topic's
    schedule in seconds (default: the queue's, 15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h).
    """
    if isinstance(allowed_hosts, str):
        raise ConfigError("allowed_hosts must be a list of host names, not one string")
    if not allowed_hosts:
        raise ConfigError("allowed_hosts is empty: no callback could be called")
    if not 0 < timeout <= 300:
        raise ConfigError(f"timeout must be in (0, 300] seconds, got {timeout}")
    handler = CallbackHandler(
        CallbackPolicy(tuple(allowed_hosts), allow_private),
        timeout,
        ssl_context or ssl.create_default_context(),
    )
    queue.handler(topic, concurrency=concurrency, timeout=2 * timeout + 5, retry=retry)(handler)
    return handler
