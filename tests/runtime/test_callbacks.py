"""HTTP callbacks against a real local HTTP server, alone and end to end through a DelayQueue."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from _certificates import self_signed
from _wait import wait_until

from actors import DelayQueue, Job, Retry
from actors.callbacks import (
    CallbackFailed,
    CallbackHandler,
    CallbackPolicy,
    CallbackRefused,
    _PinnedHTTPSConnection,
    register_callbacks,
)
from actors.errors import ConfigError
from actors.server.embedded import RedisProcess


@dataclass
class Received:
    path: str
    body: Any
    headers: dict[str, str]


@dataclass
class Hook:
    """A local HTTP server whose paths behave differently: /ok, /fail, /slow, /busy, /moved."""

    server: ThreadingHTTPServer
    received: list[Received] = field(default_factory=list)
    release_slow: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [r.path for r in self.received]


@pytest.fixture
def hook() -> Iterator[Hook]:
    state: dict[str, Hook] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            hook = state["hook"]
            hook.received.append(Received(self.path, json.loads(raw), dict(self.headers)))
            if self.path.startswith("/ok"):
                self._answer(200, b"thanks")
            elif self.path.startswith("/created"):
                self._answer(201, b"")
            elif self.path.startswith("/fail"):
                self._answer(500, b"upstream exploded")
            elif self.path.startswith("/busy"):
                self._answer(503, b"later", {"Retry-After": "1"})
            elif self.path.startswith("/moved"):
                self._answer(302, b"", {"Location": "http://127.0.0.1:1/"})
            elif self.path.startswith("/slow"):
                hook.release_slow.wait(10)  # answers only when the test lets it (or at teardown)
                self._answer(200, b"late")
            else:
                self._answer(404, b"no such hook")

        def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["hook"] = Hook(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state["hook"]
    state["hook"].release_slow.set()
    server.shutdown()
    server.server_close()


def job(url: str | None, body: Any = None, attempt: int = 1) -> Job:
    raw = json.dumps(body if body is not None else {"order": "A1"}).encode()
    return Job("hooks", "A1", json.loads(raw), raw, attempt, 0, 0, "tok", url)


LOCAL = CallbackPolicy(("127.0.0.1", "localhost"), allow_private=True)


# -- the handler alone ------------------------------------------------------------------------


def test_a_2xx_acks_with_the_status_and_posts_the_body_as_json(hook: Hook) -> None:
    handler = CallbackHandler(LOCAL, timeout_s=5)
    assert handler(job(hook.url("/ok?x=1"), {"order": "A1", "total": 12}, attempt=3)) == "HTTP 200"
    assert handler(job(hook.url("/created"))) == "HTTP 201"
    first = hook.received[0]
    assert first.path == "/ok?x=1"
    assert first.body == {"order": "A1", "total": 12}
    assert first.headers["Content-Type"] == "application/json"
    assert first.headers["X-Redelay-Topic"] == "hooks"
    assert first.headers["X-Redelay-Id"] == "A1"
    assert first.headers["X-Redelay-Attempt"] == "3"


def test_a_hostname_is_resolved_and_called(hook: Hook) -> None:
    handler = CallbackHandler(LOCAL, timeout_s=5)
    assert handler(job(hook.url("/ok", host="localhost"))) == "HTTP 200"


def test_a_5xx_fails_with_the_status_and_body_in_the_reason(hook: Hook) -> None:
    handler = CallbackHandler(LOCAL, timeout_s=5)
    with pytest.raises(CallbackFailed, match=r"^HTTP 500: upstream exploded$"):
        handler(job(hook.url("/fail")))
    with pytest.raises(CallbackFailed, match=r"^HTTP 404"):
        handler(job(hook.url("/nothing-here")))


def test_a_redirect_is_not_followed(hook: Hook) -> None:
    with pytest.raises(CallbackFailed, match="HTTP 302"):
        CallbackHandler(LOCAL, timeout_s=5)(job(hook.url("/moved")))
    assert hook.paths() == ["/moved"]


def test_503_with_retry_after_picks_the_next_delay(hook: Hook) -> None:
    with pytest.raises(Retry) as caught:
        CallbackHandler(LOCAL, timeout_s=5)(job(hook.url("/busy")))
    assert caught.value.after_ms == 1000
    assert caught.value.reason == "HTTP 503: later"


def test_a_slow_server_times_out(hook: Hook) -> None:
    handler = CallbackHandler(LOCAL, timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(CallbackFailed, match="timed out after"):
        handler(job(hook.url("/slow")))
    assert time.monotonic() - started < 5


def test_a_closed_port_fails_the_attempt() -> None:
    with pytest.raises(CallbackFailed, match=r"cannot connect to 127\.0\.0\.1:1"):
        CallbackHandler(LOCAL, timeout_s=2)(job("http://127.0.0.1:1/hook"))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://172.16.5.4/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[fe80::1]/hook",
        "http://0.0.0.0/hook",
        "http://100.64.0.1/hook",
    ],
)
def test_private_addresses_are_refused_before_any_connection(url: str) -> None:
    policy = CallbackPolicy(("*",))
    with pytest.raises(CallbackRefused, match="non-public address"):
        CallbackHandler(policy)(job(url))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/x", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("http://evil.example.net/hook", "not in allowed_hosts"),
        ("http://example.com.evil.net/hook", "not in allowed_hosts"),
        ("http://user:pw@api.example.com/hook", "credentials"),
        ("http://api.example.com:99999/hook", "bad port"),
    ],
)
def test_urls_outside_the_policy_are_refused(url: str, message: str) -> None:
    policy = CallbackPolicy(("api.example.com", "*.hooks.example.org"))
    with pytest.raises(CallbackRefused, match=message):
        CallbackHandler(policy)(job(url))


def test_allowed_hosts_match_exact_names_and_subdomain_patterns() -> None:
    policy = CallbackPolicy(("API.example.com", "*.hooks.example.org"))
    assert policy.check_url("https://api.example.com/x") == ("https", "api.example.com", 443)
    assert policy.check_url("http://a.b.hooks.example.org:8080/x")[2] == 8080
    with pytest.raises(CallbackRefused):
        policy.check_url("http://hooks.example.org/x")  # the pattern means subdomains only


def test_a_job_without_a_url_is_refused() -> None:
    with pytest.raises(CallbackRefused, match="no callback URL"):
        CallbackHandler(LOCAL)(job(None))


def test_register_callbacks_checks_its_configuration(redis_client: redis.Redis) -> None:
    queue = DelayQueue(redis_client, "cbconf", producer_only=True)
    try:
        with pytest.raises(ConfigError, match="list of host names"):
            register_callbacks(queue, "hooks", allowed_hosts="example.com")
        with pytest.raises(ConfigError, match="empty"):
            register_callbacks(queue, "hooks", allowed_hosts=[])
        with pytest.raises(ConfigError, match="timeout"):
            register_callbacks(queue, "hooks", allowed_hosts=["example.com"], timeout=0)
    finally:
        queue.close()


# -- end to end through a DelayQueue ----------------------------------------------------------


def wait_for_event(queue: DelayQueue, job_id: str, event: str) -> None:
    wait_until(
        lambda: last_event(queue, job_id).get("event") == event, what=f"{job_id} to be {event}"
    )


def last_event(queue: DelayQueue, job_id: str) -> dict[str, Any]:
    events = queue.history("hooks", job_id)
    if not events:
        return {}
    return {"event": events[-1].event, "attempt": events[-1].attempt, **events[-1].fields}


@pytest.fixture
def queue(redis_client: redis.Redis, redis_server: RedisProcess) -> Iterator[DelayQueue]:
    queue = DelayQueue(redis_server.url, "cb", sweep_interval_s=0.1)
    yield queue
    queue.stop(grace=2)


def test_end_to_end_ack_retry_and_dead(queue: DelayQueue, hook: Hook) -> None:
    register_callbacks(
        queue, "hooks", allowed_hosts=["127.0.0.1"], allow_private=True, timeout=0.5,
        retry=[0.05, 0.05],
    )  # fmt: skip
    queue.add("hooks", "ok", {"order": "ok"}, callback=hook.url("/ok"))
    queue.add("hooks", "fail", {"order": "fail"}, callback=hook.url("/fail"))
    queue.add("hooks", "slow", {"order": "slow"}, callback=hook.url("/slow"))
    queue.start()
    wait_for_event(queue, "ok", "acked")
    wait_for_event(queue, "fail", "dead")
    wait_for_event(queue, "slow", "dead")
    acked = last_event(queue, "ok")
    assert acked["detail"] == "HTTP 200" and acked["attempt"] == 1
    dead = last_event(queue, "fail")
    assert dead["attempt"] == 3 and "HTTP 500: upstream exploded" in dead["why"]
    failures = [e for e in queue.history("hooks", "fail") if e.event == "failed"]
    assert [e.attempt for e in failures] == [1, 2]
    assert "timed out" in last_event(queue, "slow")["why"]
    assert hook.paths().count("/fail") == 3
    assert {"order": "ok"} in [r.body for r in hook.received]


def test_end_to_end_private_address_refused_by_default(queue: DelayQueue, hook: Hook) -> None:
    register_callbacks(queue, "hooks", allowed_hosts=["127.0.0.1"], retry=[0.05])
    queue.add("hooks", "local", {"order": "x"}, callback=hook.url("/ok"))
    queue.start()
    wait_for_event(queue, "local", "dead")
    assert "non-public address" in last_event(queue, "local")["why"]
    assert hook.received == []  # never called


def test_end_to_end_retry_after_sets_the_next_due_time(queue: DelayQueue, hook: Hook) -> None:
    register_callbacks(queue, "hooks", allowed_hosts=["127.0.0.1"], allow_private=True, retry=[600])
    queue.add("hooks", "busy", {"order": "b"}, callback=hook.url("/busy"))
    queue.start()
    wait_for_event(queue, "busy", "failed")
    failed = last_event(queue, "busy")
    delay_ms = int(failed["due"]) - next(
        e.at_ms for e in reversed(queue.history("hooks", "busy")) if e.event == "failed"
    )
    assert delay_ms == 1000  # Retry-After: 1, not the schedule's 600 s
    assert failed["why"] == "HTTP 503: later"


def test_an_https_callback_on_port_443_sends_the_host_without_a_port(tmp_path: Path) -> None:
    # A callback connects to the address its URL's host was checked to resolve to (here a local
    # TLS server on a free port) while the URL says port 443: the Host header must then be the
    # bare name, as any https client sends it, or a server that routes by Host may not match.
    cert, key = self_signed(tmp_path)
    hosts: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hosts.append(self.headers.get("Host"))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = (socket.AF_INET, ("127.0.0.1", server.server_address[1]))
        trusted = ssl.create_default_context(cafile=str(cert))
        connection = _PinnedHTTPSConnection("127.0.0.1", 443, address, 5.0, trusted)
        connection.request("POST", "/orders", body=b"{}")
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        server.shutdown()
        server.server_close()
    assert hosts == ["127.0.0.1"]
