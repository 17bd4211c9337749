"""The ``redelay`` command: inspect and drive a queue, run workers, and the demo.

Every subcommand takes ``--redis URL`` / ``--namespace`` (or ``REDELAY_REDIS_URL`` /
``REDELAY_NAMESPACE``); without a URL it uses the embedded default server in ``--data-dir``.
Exit codes are in :class:`actors.cli.output.Exit` and docs/cli.md.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from actors.cli.context import ENV_DATA_DIR, ENV_NAMESPACE, ENV_URL, Context, not_redis
from actors.cli.output import CliError, Exit, print_json
from actors.errors import ConfigError, RedisFullError, ValidationError


def reference_path() -> Path:
    """The full reference (docs/cli.md): shipped inside the wheel as actors/cli/cli.md; in a
    checkout (editable install) it is the repository's page."""
    shipped = Path(__file__).resolve().parent / "cli.md"
    if shipped.is_file():
        return shipped
    return Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def epilog() -> str:
    return f"""exit codes: 0 ok, 1 not found or drift, 2 usage or bad input,
3 no Redis, 4 job exists, 5 busy (verify), 6 worker failed, 7 Redis refused, 130 interrupted;
simulate: 10-20, the first failed check.
Full reference (options, JSON shapes, exit codes): {reference_path()}"""


class UsageError(CliError):
    """argparse's complaint about the command line, with the usage line of the (sub)command."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(Exit.USAGE, "usage", message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """Raises instead of printing and exiting, so that a usage error ends like every other
    error: one message on stderr and, with --json, one JSON document on stdout."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())


def json_requested(argv: Sequence[str]) -> bool:
    """Whether --json is on the command line (also when parsing it fails). argparse accepts
    unambiguous prefixes, and no other option starts with --j."""
    for word in argv:
        if word == "--":
            return False
        if len(word) >= 3 and "--json".startswith(word):
            return True
    return False


class _Version(argparse.Action):
    def __init__(
        self, option_strings: list[str], dest: str, *, json_output: bool, help: str
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)
        self.json_output = json_output

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        from actors import __version__  # read from the installed metadata: only when asked

        if self.json_output:
            print_json({"version": __version__})
        else:
            print(f"redelay {__version__}")
        parser.exit()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# The module (actors.cli.<module>) that defines each subcommand, in the order of --help after
# demo and worker (defined here). A command line whose command is found is parsed by a parser of
# that command alone, so only its module is imported (tests/cli/test_cli_imports.py checks this
# table against the modules).
COMMAND_MODULES: dict[str, str] = {
    "add": "jobs",
    "cancel": "jobs",
    "get": "jobs",
    "stats": "jobs",
    "jobs": "listing",
    "dead": "dead",
    "history": "audit",
    "replay": "audit",
    "verify": "audit",
    "metrics": "metrics",
    "simulate": "simulate",
    "workers": "workers",
    "dashboard": "dashboard",
    "schedules": "schedules",
    "pause": "topics",
    "resume": "topics",
    "limit": "limits",
    "import": "importing",
    "outbox": "outbox",
}
INLINE_COMMANDS = ("demo", "worker")
# The options before the command that take a value (argparse also accepts their prefixes).
VALUE_OPTIONS = ("--redis", "--namespace", "--data-dir")


def _common_options() -> Parser:
    """Options every subcommand takes, before or after its name (hence SUPPRESS defaults)."""
    common = Parser(add_help=False)
    where = common.add_argument_group("where the queue is")
    where.add_argument(
        "--redis",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"redis://host:port/db, rediss://..., unix:///path.sock (env {ENV_URL}); "
        "default: a private embedded redis-server in --data-dir",
    )
    where.add_argument(
        "--namespace",
        default=argparse.SUPPRESS,
        help=f"the queue's namespace (env {ENV_NAMESPACE}; default: default)",
    )
    where.add_argument(
        "--data-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=f"the embedded server's data directory (env {ENV_DATA_DIR}; default: ./.redelay)",
    )
    output = common.add_argument_group("output")
    output.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    output.add_argument(
        "--progress",
        action="store_true",
        default=argparse.SUPPRESS,
        help="report progress of long work on stderr (default: only on a terminal)",
    )
    return common


def build_parser(json_output: bool = False, command: str | None = None) -> Parser:
    """The whole command line, or with ``command`` only that subcommand's (the others' modules
    are not imported); ``json_output``: --version prints JSON (it runs mid-parse)."""
    common = _common_options()
    parser = Parser(
        prog="redelay",
        description="A delay queue for Python services, on Redis.",
        parents=[common],
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=_Version, json_output=json_output, help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command in (None, "demo"):
        _add_demo(sub, common)
    if command in (None, "worker"):
        _add_worker(sub, common)
    if command is None:
        modules = list(dict.fromkeys(COMMAND_MODULES.values()))
    else:
        modules = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else []
    for module in modules:
        importlib.import_module(f"actors.cli.{module}").add_parsers(sub, common)
    return parser


def _add_demo(sub: Any, common: Parser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="an order-timeout shop on the embedded server (about 15 s)",
        description="Runs an order-timeout shop: orders time out, some handlers fail and are "
        "retried on a compressed schedule, one order ends dead.",
    )
    p.add_argument("--orders", type=int, default=12, help="how many orders (default 12)")
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    p.add_argument("--speed", type=float, default=100.0, help="schedule divisor (default 100)")
    p.set_defaults(run=_run_demo)


def _add_worker(sub: Any, common: Parser) -> None:
    p = sub.add_parser(
        "worker",
        parents=[common],
        help="run the handlers of a DelayQueue until SIGTERM or SIGINT",
        description="Imports MODULE, takes its DelayQueue QUEUE (an attribute, or a function "
        "returning one), starts it, and stops it gracefully on SIGTERM or SIGINT. The queue's own "
        "redis/namespace settings apply; --redis and --namespace are not used. QUEUE may also be "
        "a function register(queue), as simulate --app takes: it is given a queue on --redis, "
        "--namespace and --data-dir.",
    )
    p.add_argument(
        "target", metavar="MODULE:QUEUE", help="e.g. myapp.tasks:queue or myapp.tasks:register"
    )
    p.add_argument(
        "--grace", type=float, default=20.0, help="seconds running handlers get at stop (20)"
    )
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help=f"logging level: {', '.join(LOG_LEVELS)} (default INFO)",
    )
    p.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="do not freeze the started worker's objects out of Python's full garbage "
        "collections (frozen by default: their pauses are the lateness tail)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (the metrics extra; 0: any "
        "free port)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address --metrics-port binds (default 127.0.0.1)",
    )
    p.add_argument(
        "--outbox-db",
        metavar="URL",
        help="also relay the transactional outbox of this database (a SQLAlchemy URL; the "
        "outbox extra) into the queue's Redis",
    )
    p.set_defaults(run=_run_worker)


def subcommand_names() -> list[str]:
    """Every subcommand, in the order of ``--help`` (the docs test checks each is documented)."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def command_word(words: Sequence[str]) -> str | None:
    """The subcommand on the command line: the first word that is neither an option nor the
    value of one. None when a help option comes first (the full --help lists every command), or
    when no known command is found."""
    expect_value = False
    for word in words:
        if expect_value:
            expect_value = False
        elif (
            word == "--" or word.startswith("-h") or (len(word) >= 3 and "--help".startswith(word))
        ):
            return None
        elif word.startswith("-"):
            expect_value = "=" not in word and any(
                len(word) >= 3 and option.startswith(word) for option in VALUE_OPTIONS
            )
        else:
            return word if word in COMMAND_MODULES or word in INLINE_COMMANDS else None
    return None


def parse(words: Sequence[str], json_output: bool) -> argparse.Namespace:
    """Parses with the parser of the command on the line alone, so that only its module is
    imported. Whatever that parser refuses is parsed again by the whole one, so a wrong guess
    (an option's value taken for the command) costs time, never a different result: where the
    smaller parser succeeds, the whole one reads the line the same way."""
    command = command_word(words)
    if command is not None:
        try:
            return build_parser(json_output, command).parse_args(words)
        except UsageError:
            pass
    return build_parser(json_output).parse_args(words)


def _option_strings() -> list[str]:
    """Every --option of every command (the whole parser: only built on a usage error)."""
    found: set[str] = set()
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            found.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return sorted(found)


def option_hint(words: Sequence[str]) -> str:
    """What a misspelt option was meant to be: argparse says "unrecognized arguments", or takes
    the option's value for the command ("invalid choice: 'shop'" for --namespce shop)."""
    known: list[str] | None = None
    hints = []
    for word in words:
        if word == "--":
            break
        if not word.startswith("--"):
            continue
        name = word.split("=", 1)[0]
        known = _option_strings() if known is None else known
        if any(option.startswith(name) for option in known):
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hints.append(f"{name} is no option" + (f"; did you mean {close[0]}?" if close else ""))
    return f" ({'; '.join(hints)})" if hints else ""


def _run_demo(ctx: Context, args: argparse.Namespace) -> int:
    from actors.cli.demo import run_demo  # imports the actors; only the demo needs them

    return run_demo(ctx, args)


def _run_worker(ctx: Context, args: argparse.Namespace) -> int:
    from actors.cli.worker import run_worker

    return run_worker(ctx, args)


def _terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM ends a command like Ctrl-C does, so `finally` blocks and atexit stop the embedded
    # server (the worker installs its own handler).
    raise KeyboardInterrupt


# Options whose values may be relative times like "-5m", which argparse would take for options.
TIME_OPTIONS = ("--at", "--since")


def _join_relative_times(argv: Sequence[str]) -> list[str]:
    """``--at -5m`` -> ``--at=-5m`` so both spellings work."""
    out: list[str] = []
    items = list(argv)
    n = 0
    while n < len(items):
        item = items[n]
        following = items[n + 1] if n + 1 < len(items) else ""
        if item in TIME_OPTIONS and following[:1] == "-" and following[1:2].isdigit():
            out.append(f"{item}={following}")
            n += 2
            continue
        out.append(item)
        n += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    words = _join_relative_times(sys.argv[1:] if argv is None else argv)
    try:
        args = parse(words, json_requested(words))
    except UsageError as exc:
        print(exc.usage, end="", file=sys.stderr)
        hint = option_hint(words)
        return _fail(json_requested(words), UsageError(str(exc) + hint, exc.usage) if hint else exc)
    ctx = Context(
        args,
        json=getattr(args, "json", False),
        progress=getattr(args, "progress", False) or sys.stderr.isatty(),
    )
    if args.command != "worker":
        signal.signal(signal.SIGTERM, _terminate)
    # Imported once a command runs (it connects anyway): --help and usage errors skip redis-py,
    # which takes a third of a second to import.
    import redis

    try:
        code: int = args.run(ctx, args)
        return code
    except CliError as exc:
        return _fail(ctx.json, exc)
    except ValidationError as exc:
        return _fail(ctx.json, CliError(Exit.USAGE, "invalid", str(exc)))
    except ConfigError as exc:
        return _fail(ctx.json, CliError(Exit.USAGE, "config", str(exc)))
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        message = f"lost the connection to Redis: {exc}"
        return _fail(ctx.json, CliError(Exit.NO_REDIS, "no_redis", message))
    except redis.exceptions.InvalidResponse as exc:
        return _fail(ctx.json, not_redis(_where(args), exc))
    except RedisFullError as exc:
        # Over maxmemory: the add was refused before its first write, so nothing was written.
        return _fail(
            ctx.json, CliError(Exit.REDIS_REFUSED, "redis_refused", f"Redis refused: {exc}")
        )
    except redis.RedisError as exc:
        # e.g. OOM under maxmemory: nothing was written (scripts refuse before their first write).
        return _fail(
            ctx.json, CliError(Exit.REDIS_REFUSED, "redis_refused", f"Redis refused: {exc}")
        )
    except KeyboardInterrupt:
        return _fail(ctx.json, CliError(Exit.INTERRUPTED, "interrupted", "interrupted"))
    except BrokenPipeError:
        # stdout closed early (`redelay history ... | head`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    finally:
        ctx.close()


def _where(args: argparse.Namespace) -> str:
    return getattr(args, "redis", None) or os.environ.get(ENV_URL) or "the embedded server"


def _fail(json_output: bool, exc: CliError) -> int:
    """The one way a command fails: the message on stderr and, with --json, the one document
    stdout gets (commands print their result only once they know they succeeded)."""
    print(f"redelay: error: {exc}", file=sys.stderr)
    if json_output:
        document = {"error": exc.kind, "message": str(exc), "exit_code": int(exc.code)}
        print_json(document | exc.details)
    return exc.code


if __name__ == "__main__":
    sys.exit(main())
