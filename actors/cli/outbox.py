"""``redelay outbox relay`` and ``redelay outbox status``: the transactional outbox's relay on
its own, and how far behind it is (actors/outbox; the `outbox` extra)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from actors.cli.context import Context
from actors.cli.output import CliError, Exit, format_duration_ms, print_json, usage_error

if TYPE_CHECKING:
    from sqlalchemy import Engine

ENV_DB = "REDELAY_OUTBOX_DB"
INSTALL_HINT = (
    "needs SQLAlchemy (the outbox extra): pip install sqlalchemy (or '.[outbox]' in a redelay "
    "checkout) and a driver"
)


def add_db_option(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--db",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"the application database's SQLAlchemy URL, e.g. postgresql+psycopg://host/app "
        f"(env {ENV_DB}){'' if required else '; shows the outbox too'}",
    )


def db_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "db", None) or os.environ.get(ENV_DB) or None


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser(
        "outbox",
        parents=[common],
        help="the transactional outbox: relay its rows into Redis, or show its backlog",
    )
    commands = group.add_subparsers(dest="outbox_command", metavar="ACTION", required=True)
    p = commands.add_parser(
        "relay",
        parents=[common],
        help="move committed outbox rows into Redis until SIGTERM or SIGINT",
        description="Relays the outbox table of --db into the namespace's Redis: wakes on each "
        "commit (PostgreSQL with psycopg 3), polls otherwise. Several may run at once.",
    )
    add_db_option(p, required=True)
    p.add_argument("--once", action="store_true", help="drain what is there now, then exit")
    p.add_argument("--batch", type=int, default=1_000, help="rows per pass (default 1000)")
    p.add_argument(
        "--poll", type=float, default=1.0, help="seconds between polls without a NOTIFY (1)"
    )
    p.add_argument(
        "--lag-warn",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="log a warning when a row waited longer than this (5)",
    )
    p.set_defaults(run=run_relay)
    p = commands.add_parser(
        "status", parents=[common], help="rows waiting in the outbox and the oldest one's age"
    )
    add_db_option(p, required=True)
    p.set_defaults(run=run_status)


def engine_for(args: argparse.Namespace) -> Engine:
    url = db_url(args)
    if url is None:
        raise usage_error(f"outbox: give --db URL (or set {ENV_DB})")
    try:
        import sqlalchemy as sa
    except ImportError:
        raise usage_error(f"outbox: {INSTALL_HINT}") from None
    try:
        return sa.create_engine(url)
    except Exception as exc:  # an unknown dialect or driver: the URL is the user's to fix
        raise usage_error(f"--db: {exc}") from None


def outbox_status(url: str) -> dict[str, Any]:
    """Depth and oldest age, as `redelay stats --db` and `redelay outbox status` print them."""
    import sqlalchemy as sa

    from actors.outbox.relay import status

    engine = sa.create_engine(url)
    try:
        found = status(engine)
    except Exception as exc:
        message = f"cannot read the outbox at --db: {exc}"
        raise CliError(Exit.NOT_FOUND, "no_outbox", message) from None
    finally:
        engine.dispose()
    return {"depth": found.depth, "oldest_ms": found.oldest_ms}


def status_line(found: dict[str, Any]) -> str:
    oldest = found["oldest_ms"]
    age = "" if oldest is None else f", oldest waiting {format_duration_ms(oldest)}"
    return f"outbox: {found['depth']} rows{age}"


def run_status(ctx: Context, args: argparse.Namespace) -> int:
    engine_for(args).dispose()  # the URL's checks and the install hint
    found = outbox_status(str(db_url(args)))
    if ctx.json:
        print_json(found)
    else:
        print(status_line(found))
    return Exit.OK


def run_relay(ctx: Context, args: argparse.Namespace) -> int:
    import logging
    import sys

    from actors.outbox.relay import Relay

    engine = engine_for(args)
    logging.basicConfig(
        level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        relay = Relay(
            engine,
            ctx.store(),
            batch=args.batch,
            poll_s=args.poll,
            lag_warn_ms=round(args.lag_warn * 1000),
        )
    except ValueError as exc:
        raise usage_error(f"outbox relay: {exc}") from None
    try:
        if args.once:
            relay.drain()
        else:
            try:
                relay.run()
            except KeyboardInterrupt:  # SIGTERM or SIGINT: a pass cut short rolled back
                relay.stop()
    finally:
        engine.dispose()
    report = relay.stats()
    if ctx.json:
        print_json(report)
    else:
        print(
            f"relayed {report['applied']} rows ({report['already_applied']} found applied "
            f"before), deleted {report['deleted']}, last lag {report['lag_ms']} ms"
        )
    return Exit.OK
