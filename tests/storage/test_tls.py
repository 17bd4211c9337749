"""Passwords and TLS end to end: ``rediss://`` with a password, a certificate made here.

The certificate is a self-signed CA-less one made with the openssl command for 127.0.0.1; the
client verifies it (``ssl_ca_certs`` in the URL). Redis 6.2 from the embedded extra is built
without TLS: only the binaries that accept ``--tls-port`` are used.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from _binaries import redis_binaries
from _certificates import self_signed
from _wait import wait_until

from actors import DelayQueue, Job
from actors.cli.app import main
from actors.server.embedded import RedisProcess

PASSWORD = "tls-pw"


def has_tls(binary: str) -> bool:
    """Whether the binary was built with TLS. Redis reads its arguments as config lines and stops
    at the first it does not know: one built without TLS names ``tls-port``; one with TLS gets
    past it and names the made-up directive after it (and exits without starting)."""
    result = subprocess.run(
        [binary, "--tls-port", "0", "--redelay-no-such-directive", "1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert "redelay-no-such-directive" in output or "tls-port" in output, output
    return "tls-port" not in output


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(params=redis_binaries())
def tls_url(
    request: pytest.FixtureRequest, tmp_path: Path, redis_factory: Callable[..., RedisProcess]
) -> str:
    binary = request.param
    if not has_tls(binary):
        pytest.skip(f"{binary} is built without TLS")
    cert, key = self_signed(tmp_path)
    port = free_port()
    server = redis_factory(
        binary=binary,
        extra_args=(
            "--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
        ),
    )  # fmt: skip
    admin = server.client()
    admin.config_set("requirepass", PASSWORD)  # after start: its readiness probe has none
    admin.close()
    return f"rediss://:{PASSWORD}@127.0.0.1:{port}/0?ssl_ca_certs={cert}"


def test_a_wrong_password_or_no_tls_is_refused(tls_url: str) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(tls_url.replace(PASSWORD, "wrong")).ping()
    with pytest.raises(redis.ConnectionError):
        plain = tls_url.replace("rediss://", "redis://").split("?")[0]
        redis.Redis.from_url(plain, socket_timeout=2).ping()


def test_producer_worker_and_cli_over_tls_with_a_password(
    tls_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = DelayQueue(tls_url, namespace="tls")
    seen: list[str] = []

    def handle(job: Job) -> None:
        seen.append(job.id)

    queue.handler("t", concurrency=4)(handle)
    queue.start()
    try:
        queue.add_many([{"topic": "t", "id": f"j{n}", "delay": 0.05} for n in range(20)])
        wait_until(lambda: len(seen) == 20, what="20 jobs delivered over TLS")
    finally:
        began = time.monotonic()
        report = queue.stop(grace=2)
        assert time.monotonic() - began < 2, report
    assert sorted(seen) == sorted(f"j{n}" for n in range(20))
    assert main(["stats", "--redis", tls_url, "--namespace", "tls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["ready"] == 0
