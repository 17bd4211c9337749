"""``redelay dashboard``: serve the web dashboard (actors.dashboard) with uvicorn.

starlette, jinja2 and uvicorn come with the ``dashboard`` extra and are imported only here, when
the command runs, so the rest of the command line works without them.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import Any

from actors.cli.context import Context
from actors.cli.output import usage_error

INSTALL_HINT = (
    "needs the dashboard extra: pip install '.[dashboard]' in a redelay checkout (redelay is not "
    "on PyPI yet), or pip install starlette jinja2 python-multipart uvicorn"
)
ENV_TOKEN = "REDELAY_DASHBOARD_TOKEN"


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "dashboard",
        parents=[common],
        help="serve the web dashboard (the dashboard extra)",
        description="Serves the dashboard: topics, jobs, dead jobs and workers, with actions "
        "(cancel, run now, reschedule, requeue, purge). Binds 127.0.0.1 unless --host says "
        f"otherwise; off loopback, actions need --token (or {ENV_TOKEN}).",
    )
    p.add_argument("--port", type=int, default=8088, help="the port (default 8088; 0: any)")
    p.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    p.add_argument(
        "--token",
        default=None,
        help=f"the token actions need (env {ENV_TOKEN}); required for actions off loopback",
    )
    p.add_argument("--read-only", action="store_true", help="show everything, change nothing")
    p.set_defaults(run=run_dashboard)


def run_dashboard(ctx: Context, args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from actors.dashboard import create_app
    except ModuleNotFoundError:
        raise usage_error(f"dashboard: {INSTALL_HINT}") from None
    if not 0 <= args.port <= 65_535:
        raise usage_error(f"dashboard: --port must be from 0 to 65535, got {args.port}")
    token = args.token or os.environ.get(ENV_TOKEN) or None
    read_only = args.read_only
    if token is None and not read_only and not is_loopback(args.host):
        # Anyone who can reach the port could act: off loopback, actions need a token.
        ctx.note(f"dashboard: --host {args.host} without --token or {ENV_TOKEN}: read-only")
        read_only = True
    store = ctx.store()
    app = create_app(store, read_only=read_only, token=token)
    ctx.note(
        f"redelay dashboard on http://{args.host}:{args.port}/ "
        f"(namespace {store.namespace}{', read-only' if read_only else ''})"
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def is_loopback(host: str) -> bool:
    """Whether --host binds a loopback address: an IP address that is one (127.0.0.0/8, ::1,
    [::1]), or "localhost". Any other name is not, whatever it starts with
    (127.0.0.1.example.com resolves to wherever its owner points it)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False
