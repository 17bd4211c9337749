"""The ``redelay`` command starts light: what it imports, read from ``sys.modules``.

``import actors`` imports its public names on first use, and the command's modules import
redis-py, the store and the runtime only when a command needs them, so that ``redelay --help``
and ``redelay history`` do not pay for the Pykka runtime, redis.asyncio, tracing, metrics or the
dashboard. Each check runs in a fresh interpreter: this test process has imported them all.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pytest
import redis

from actors.cli import app
from actors.cli.app import Parser, UsageError
from actors.clock import SystemClock
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]

# Modules (and their submodules) a command that only reads needs none of.
HEAVY = (
    "actors.runtime",
    "pykka",
    "actors.queue",
    "actors.async_queue",
    "actors.storage.async_store",
    "redis.asyncio",
    "asyncio",
    "actors.dashboard",
    "starlette",
    "uvicorn",
    "actors.metrics",
    "prometheus_client",
    "actors.tracing",
    "opentelemetry",
    "cronsim",
)

# Prints, as JSON, the loaded modules in ``watch`` (or below one) once the code before it ran.
REPORT = """
import json, sys
watch = {watch!r}
loaded = [m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in watch)]
print(json.dumps(sorted(loaded)))
"""


def loaded_after(code: str, *argv: str, watch: Iterable[str] = (*HEAVY, "redis")) -> list[str]:
    """The modules of ``watch`` (default: HEAVY and redis-py), with their submodules, that a
    fresh interpreter has loaded once ``code`` ran (from the checkout)."""
    script = textwrap.dedent(code) + REPORT.format(watch=tuple(sorted(watch)))
    result = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def redis_imports_on_its_own() -> set[str]:
    """What ``import redis`` loads by itself: redis-py 8 imports redis.asyncio (and asyncio),
    and its observability module imports opentelemetry's SDK when that is installed."""
    return set(loaded_after("import redis"))


def test_importing_the_command_and_building_its_parser_imports_nothing_heavy() -> None:
    code = """
    from actors.cli import app
    parser = app.build_parser()
    parser.format_help()
    args = parser.parse_args(["history", "orders", "o-1", "--redis", "redis://localhost:1"])
    assert args.run.__name__ == "run_history", args.run
    """
    assert loaded_after(code) == []  # not even redis: the parser needs no connection


@pytest.mark.parametrize("argv", [["--help"], ["history", "--help"], ["history"]])
def test_help_and_usage_errors_import_nothing_heavy(argv: list[str]) -> None:
    code = """
    import contextlib, io, sys
    from actors.cli.app import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(sys.argv[1:])
        except SystemExit as exc:
            code = exc.code
    assert code in (0, 2), code
    """
    assert loaded_after(code, *argv) == []


def test_history_imports_only_what_redis_itself_does(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    store = Store(redis_client, "cliimports", SystemClock())
    store.add(store.new_job("orders", "o-1", {"total": 3}))
    code = """
    import contextlib, io, sys
    from actors.cli.app import main
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["history", "orders", "o-1", "--redis", sys.argv[1], "--namespace",
                     "cliimports", "--json"])
    assert code == 0, code
    assert '"added"' in out.getvalue(), out.getvalue()
    """
    loaded = set(loaded_after(code, redis_server.url))
    assert "redis" in loaded  # it did connect
    assert loaded - redis_imports_on_its_own() == set()
    others = {f"actors.cli.{m}" for m in app.COMMAND_MODULES.values()} - {"actors.cli.audit"}
    assert set(loaded_after(code, redis_server.url, watch=others)) == set()


def test_import_actors_imports_its_names_when_first_used() -> None:
    code = """
    import actors
    lazy = ("actors.queue", "actors.async_queue", "actors.runtime", "actors.storage.store")
    assert not any(m in sys.modules for m in lazy), [m for m in lazy if m in sys.modules]
    assert set(actors.__all__) <= set(dir(actors))
    from actors import AsyncDelayQueue, DelayQueue
    from actors.async_queue import AsyncDelayQueue as defined_async
    from actors.queue import DelayQueue as defined
    assert DelayQueue is defined and AsyncDelayQueue is defined_async
    assert actors.DelayQueue is defined
    """
    loaded = loaded_after("import sys\n" + textwrap.dedent(code))
    assert "actors.queue" in loaded and "actors.async_queue" in loaded


def test_every_public_name_and_the_version_resolve() -> None:
    import importlib.metadata

    import actors

    for name in actors.__all__:
        value = getattr(actors, name)
        assert getattr(value, "__name__", name) == name
    assert actors.__version__ == importlib.metadata.version("redelay")
    with pytest.raises(AttributeError, match="DelayQeue"):
        actors.DelayQeue  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        from actors import DelayQeue  # type: ignore[attr-defined]  # noqa: F401


def test_each_command_is_defined_by_the_module_the_table_names() -> None:
    for module in set(app.COMMAND_MODULES.values()):
        sub = Parser().add_subparsers()
        importlib.import_module(f"actors.cli.{module}").add_parsers(sub, Parser(add_help=False))
        named = [c for c, m in app.COMMAND_MODULES.items() if m == module]
        assert list(sub.choices) == named, module
    assert app.subcommand_names() == [*app.INLINE_COMMANDS, *app.COMMAND_MODULES]


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "orders", "o-1", "--since=-1h", "--json"],
        ["--json", "--redis", "redis://h:1", "get", "orders", "o-1"],
        ["--redis=redis://h:1", "stats"],
        ["--namespace", "history", "stats"],  # a namespace called like a command
        ["--nam", "history", "history", "orders", "o-1"],  # an option's prefix, then the command
        ["--data-dir", "d", "dead", "requeue", "--all"],
        ["worker", "app:queue", "--grace", "3"],
        ["demo", "--orders", "3"],
        ["schedules", "add", "nightly", "reports", "--cron", "0 3 * * *"],
    ],
)
def test_parsing_one_command_reads_the_line_as_the_whole_parser_does(argv: list[str]) -> None:
    assert vars(app.parse(argv, json_output=False)) == vars(app.build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["history"],
        ["history", "orders", "o-1", "--version"],
        ["--namespace", "history", "nonsense"],
        ["nonsense"],
        ["stats", "--limit", "3"],
    ],
)
def test_a_refused_line_gets_the_whole_parsers_message(argv: list[str]) -> None:
    with pytest.raises(UsageError) as whole:
        app.build_parser().parse_args(argv)
    with pytest.raises(UsageError) as parsed:
        app.parse(argv, json_output=False)
    assert (str(parsed.value), parsed.value.usage) == (str(whole.value), whole.value.usage)


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["history", "t", "1"], "history"),
        (["--redis", "redis://h:1", "--namespace=n", "--json", "get", "t", "1"], "get"),
        (["--namespace", "stats", "history", "t", "1"], "history"),
        (["--help", "history"], None),  # the top-level help, which lists every command
        (["-h"], None),
        (["--he"], None),
        (["nonsense", "history"], None),
        ([], None),
    ],
)
def test_the_command_word_is_found_past_options_and_their_values(
    argv: list[str], command: str | None
) -> None:
    assert app.command_word(argv) == command
