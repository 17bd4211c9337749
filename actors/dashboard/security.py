"""The dashboard's guards: CSRF on every POST, the action token, and read-only mode.

CSRF is a signed double-submit cookie: the first page a browser gets sets a ``redelay_csrf``
cookie (SameSite=Strict, HttpOnly) holding a random nonce and its HMAC under the app's secret,
and every form carries the same value in a hidden field; a POST whose field does not match its
cookie, or whose cookie is not signed by this app, is refused. Another site can make a browser
send the cookie but cannot read it to fill the field. The signature is what stops another app on
the same host: browsers do not scope cookies by port, so a page served by any port of 127.0.0.1
can set a ``redelay_csrf`` cookie there, but not one this app signed. Served over https the cookie
is ``__Host-redelay_csrf``, which browsers only accept from a secure page, for the whole host.

With a token (``--token`` or ``REDELAY_DASHBOARD_TOKEN``), actions also need the
``redelay_token`` cookie, set by the login form when the token is typed in. Reading needs no
token; whoever can reach the dashboard can see the jobs (bind it to loopback, or put it behind
the service's own authentication when mounting it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

CSRF_COOKIE = "redelay_csrf"
CSRF_COOKIE_HTTPS = "__Host-" + CSRF_COOKIE
CSRF_FIELD = "csrf"
TOKEN_COOKIE = "redelay_token"

_NONCE_BYTES = 24
_SIGNATURE_CHARS = 43  # an HMAC-SHA256 in unpadded URL-safe base64
_VALUE_CHARS = 32 + 1 + _SIGNATURE_CHARS  # the nonce (24 bytes), ".", the signature


class Csrf:
    """Issues and checks one app's CSRF values. ``secret``: the HMAC key; a random one per
    process unless given (processes serving one dashboard behind a balancer share one)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def _signature(self, nonce: str) -> str:
        digest = hmac.new(self._secret, nonce.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def signed(self, value: str | None) -> bool:
        if not value or len(value) != _VALUE_CHARS:
            return False
        nonce, _, signature = value.partition(".")
        return hmac.compare_digest(signature.encode(), self._signature(nonce).encode())

    def value(self, request: Request) -> str:
        """The browser's CSRF value: its cookie when this app signed it, else a new one (the
        same for the whole request; :meth:`keep` stores it)."""
        existing = request.cookies.get(cookie_name(request))
        if self.signed(existing):
            return str(existing)
        fresh = request.state.__dict__.get("csrf")
        if fresh is None:
            nonce = secrets.token_urlsafe(_NONCE_BYTES)
            fresh = request.state.csrf = f"{nonce}.{self._signature(nonce)}"
        return str(fresh)

    def keep(self, request: Request, response: Response) -> None:
        name = cookie_name(request)
        if request.cookies.get(name) != self.value(request):
            secure = name == CSRF_COOKIE_HTTPS
            response.set_cookie(
                name, self.value(request), httponly=True, samesite="strict", path="/", secure=secure
            )

    def ok(self, request: Request, submitted: object) -> bool:
        """The form's value is the cookie's, and this app signed it."""
        cookie = request.cookies.get(cookie_name(request))
        return (
            isinstance(submitted, str)
            and self.signed(cookie)
            and hmac.compare_digest(submitted.encode(), str(cookie).encode())
        )


def cookie_name(request: Request) -> str:
    """``__Host-`` names need a secure page: only over https."""
    return CSRF_COOKIE_HTTPS if request.url.scheme == "https" else CSRF_COOKIE


def token_ok_value(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def token_ok(request: Request, token: str | None) -> bool:
    """Actions allowed by the token: always when the app has none."""
    if token is None:
        return True
    return token_ok_value(request.cookies.get(TOKEN_COOKIE, ""), token)
