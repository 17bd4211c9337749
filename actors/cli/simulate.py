"""``redelay simulate``: the crash simulators, run against the user's own handlers.

The simulators live in ``simulations/crash/`` in the repository. The wheel carries that folder as
``actors.simulate`` (pyproject.toml, force-include), so an installed redelay gains no top-level
package; in a checkout (an editable install) they are the repository's ``simulations.crash``. This
module only translates the command line and hands over: the checks, the exit codes and the
artefacts are the simulators' own (docs/simulations.md).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from actors.cli.context import Context
from actors.cli.output import usage_error

DEFAULT_OUT = "redelay-simulations"
# The options each simulator takes (dest -> flag), so one given to the other is refused by name.
DETERMINISTIC_ONLY = {"ci": "--ci", "soak": "--soak", "hours": "--hours", "verbose": "-v"}
CHAOS_ONLY = {
    "duration": "--duration",
    "appendfsync": "--appendfsync",
    "max_calm_p99_ms": "--max-calm-p99-ms",
    "cluster": "--cluster",
    "shards": "--shards",
    "backlog": "--backlog",
    "production_faults": "--production-faults",
}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "simulate",
        parents=[common],
        help="run your handlers under crashes: the deterministic simulator, or --chaos",
        description="Runs your handlers (--app) in redelay's crash simulators and checks that "
        "no job was delivered early, lost, or run after its cancel, that every duplicate is "
        "explained, and (--check) your own invariants. Deterministic by default (a fake clock, "
        "hours per minute); --chaos runs real worker processes for --duration seconds. The exit "
        "code names the first failed check; a failure prints the command that reproduces it. "
        "It starts its own redis-server (--redis is not used).",
    )
    p.add_argument("--app", metavar="MODULE:ATTR", help="your register(queue) function or queue")
    p.add_argument("--bodies", metavar="MODULE:FUNC", help="FUNC(topic, job_id) -> job body")
    p.add_argument(
        "--check",
        metavar="MODULE:FUNC",
        help="FUNC() reads what your handlers recorded in $REDELAY_SIM_DIR and raises when an "
        "invariant broke (exit 18)",
    )
    p.add_argument("--seed", type=int, help="the run's seed (default: a random one, printed)")
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"where the summary, ledger, audit stream and chart go (default {DEFAULT_OUT})",
    )
    det = p.add_argument_group("deterministic simulator (the default)")
    size = det.add_mutually_exclusive_group()
    size.add_argument("--ci", action="store_true", help="CI-sized: 2 simulated hours")
    size.add_argument("--soak", action="store_true", help="48 simulated hours")
    det.add_argument(
        "--hours", type=float, help="this many simulated hours (with --ci/--soak: their faults)"
    )
    det.add_argument("-v", "--verbose", action="store_true", help="actor logs on stderr too")
    chaos = p.add_argument_group("process chaos (--chaos)")
    chaos.add_argument("--chaos", action="store_true", help="real worker processes, real time")
    chaos.add_argument("--duration", type=float, help="seconds of chaos before the drain (40)")
    chaos.add_argument("--appendfsync", choices=["always", "everysec", "no"])
    chaos.add_argument("--max-calm-p99-ms", type=int, help="fail (exit 17) above this p99")
    chaos.add_argument("--cluster", action="store_true", help="on a local Redis Cluster")
    chaos.add_argument("--shards", type=int, help="with --cluster: the namespace's shards")
    chaos.add_argument(
        "--backlog",
        action="store_true",
        help="more jobs than the handlers keep up with, to large pools: the pipelined acks",
    )
    chaos.add_argument(
        "--production-faults",
        action="store_true",
        help="also blackhole and forget workers' connections, step their clocks, and add "
        "poison jobs that kill their worker (one server only)",
    )
    p.set_defaults(run=run_simulate)


def simulators() -> ModuleType:
    """The simulators' package: ``actors.simulate`` from the wheel, else the checkout's
    ``simulations.crash`` (next to ``actors/``; never another package that happens to be called
    so)."""
    if importlib.util.find_spec("actors.simulate") is not None:
        return importlib.import_module("actors.simulate")
    root = Path(__file__).resolve().parents[2]
    if not (root / "simulations" / "crash" / "deterministic.py").is_file():
        raise usage_error("simulate: this installation has no simulators (actors.simulate)")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("simulations.crash")


def simulator_argv(args: argparse.Namespace) -> list[str]:
    """The simulator's own command line for these options (refusing the other one's)."""
    wrong = CHAOS_ONLY if not args.chaos else DETERMINISTIC_ONLY
    for dest, flag in wrong.items():
        if getattr(args, dest) not in (None, False):
            where = "needs --chaos" if not args.chaos else "is not for --chaos"
            raise usage_error(f"simulate: {flag} {where}")
    argv = ["--out", args.out]
    for dest in ("seed", "app", "bodies", "check", "hours", "duration", "appendfsync"):
        if getattr(args, dest) is not None:
            argv += [f"--{dest}", str(getattr(args, dest))]
    if args.max_calm_p99_ms is not None:
        argv += ["--max-calm-p99-ms", str(args.max_calm_p99_ms)]
    if args.shards is not None:
        argv += ["--shards", str(args.shards)]
    for dest in ("ci", "soak", "cluster", "backlog", "production_faults", "json"):
        if getattr(args, dest, False):
            argv.append(f"--{dest.replace('_', '-')}")
    if args.verbose:
        argv.append("-v")
    return argv


def run_simulate(ctx: Context, args: argparse.Namespace) -> int:
    argv = simulator_argv(args)
    package = simulators().__name__
    if args.chaos:
        module = importlib.import_module(f"{package}.chaos")
        code: int = module.main(argv, prog="redelay simulate --chaos")
    else:
        module = importlib.import_module(f"{package}.deterministic")
        code = module.main(argv, prog="redelay simulate")
    return code
