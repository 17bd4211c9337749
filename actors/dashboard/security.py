"""The dashboard's guards: CSRF on every POST, the action token, and read-only mode.

CSRF is a double-submit cookie: the first page a browser gets sets a random ``redelay_csrf``
cookie (SameSite=Strict, HttpOnly) and every form carries the same value in a hidden field; a
POST whose field does not match its cookie is refused. Another site can make a browser send the
cookie but cannot read it to fill the field.

With a token (``--token`` or ``REDELAY_DASHBOARD_TOKEN``), actions also need the
``redelay_token`` cookie, set by the login form when the token is typed in. Reading needs no
token; whoever can reach the dashboard can see the jobs (bind it to loopback, or put it behind
the service's own authentication when mounting it).
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

CSRF_COOKIE = "redelay_csrf"
CSRF_FIELD = "csrf"
TOKEN_COOKIE = "redelay_token"


def csrf_value(request: Request) -> str:
    """The browser's CSRF value (a new one when it has none; :func:`keep_csrf` stores it)."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and 20 <= len(existing) <= 100:
        return existing
    fresh: str = request.state.__dict__.setdefault("csrf", secrets.token_urlsafe(32))
    return fresh


def keep_csrf(request: Request, response: Response) -> None:
    if request.cookies.get(CSRF_COOKIE) != csrf_value(request):
        response.set_cookie(
            CSRF_COOKIE, csrf_value(request), httponly=True, samesite="strict", path="/"
        )


def csrf_ok(request: Request, submitted: object) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    return (
        isinstance(submitted, str)
        and bool(cookie)
        and hmac.compare_digest(submitted.encode(), (cookie or "").encode())
    )


def token_ok_value(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def token_ok(request: Request, token: str | None) -> bool:
    """Actions allowed by the token: always when the app has none."""
    if token is None:
        return True
    return token_ok_value(request.cookies.get(TOKEN_COOKIE, ""), token)
