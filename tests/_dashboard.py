"""Serving a dashboard app for the tests: uvicorn on a free loopback port, in a thread."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from _wait import wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """The app's base URL while it is served."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="dashboard-test", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what="uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def fetch(
    url: str,
    *,
    data: dict[str, Any] | None = None,
    cookies: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, list[tuple[str, str]]]:
    """(status, body, headers) of a GET, or of a form POST when ``data`` is given; redirects
    are not followed."""
    body = None if data is None else urllib.parse.urlencode(data, doseq=True).encode()
    request = urllib.request.Request(url, data=body, headers=headers or {})
    if cookies:
        request.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()))
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.read().decode(), list(response.headers.items())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), list(exc.headers.items())


def cookie_from(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == "set-cookie" and value.startswith(name + "="):
            return value.split(";", 1)[0].split("=", 1)[1]
    return None
