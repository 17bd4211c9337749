"""The web dashboard (the ``dashboard`` extra: starlette, jinja2, python-multipart, uvicorn).

``create_app(queue_or_store, read_only=False, token=None)`` returns an ASGI app; see
docs/dashboard.md for the pages, the security model and how to mount it.
"""

from actors.dashboard.app import create_app

__all__ = ["create_app"]
