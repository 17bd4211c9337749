"""``create_app``: the dashboard as an ASGI app, for ``redelay dashboard`` or to mount inside a
Starlette or FastAPI service (``app.mount("/queue", create_app(queue))``)."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from actors.dashboard import security
from actors.dashboard.routes import Pages
from actors.queue import DelayQueue
from actors.storage.store import Store

HERE = Path(__file__).resolve().parent


def create_app(
    source: DelayQueue | Store,
    *,
    read_only: bool = False,
    token: str | None = None,
    csrf_secret: bytes | None = None,
) -> Starlette:
    """The dashboard for ``source``'s namespace.

    ``read_only`` hides every action and refuses its POST; ``token``, when given, must be typed
    in once (the login page sets a cookie) before actions are allowed. Every POST is checked
    against the CSRF cookie either way, which this app signs with ``csrf_secret`` (random for
    each app unless given: processes that serve one dashboard behind a balancer share one).
    """
    store = source.store if isinstance(source, DelayQueue) else source
    # Autoescaping everywhere, whatever the file name: bodies, ids and reasons are user data.
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    pages = Pages(
        store,
        Jinja2Templates(env=env),
        read_only=read_only,
        token=token,
        csrf=security.Csrf(csrf_secret),
    )
    return Starlette(
        routes=[
            Route("/", pages.overview, name="overview"),
            Route("/topic", pages.topic, name="topic"),
            Route("/job", pages.job, name="job"),
            Route("/dead", pages.dead, name="dead"),
            Route("/workers", pages.workers, name="workers"),
            Route("/schedules", pages.schedules, name="schedules"),
            Route("/confirm", pages.confirm, name="confirm"),
            Route("/act", pages.act, methods=["POST"], name="act"),
            Route("/login", pages.login, methods=["GET", "POST"], name="login"),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
    )
