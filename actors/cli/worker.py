"""``redelay worker MODULE:QUEUE``: run a DelayQueue's handlers until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import math
import os
import signal
import sys
import traceback
from types import FrameType
from typing import TYPE_CHECKING, Any

from actors._signals import SignalFlag
from actors.cli.context import Context, data_dir, namespace, no_redis, redis_url
from actors.cli.metrics import INSTALL_HINT
from actors.cli.outbox import INSTALL_HINT as OUTBOX_INSTALL_HINT
from actors.cli.output import Exit, print_json_line, usage_error
from actors.queue import DelayQueue

if TYPE_CHECKING:
    from actors.metrics import MetricsServer
    from actors.outbox.actor import RelayHandle

log = logging.getLogger("redelay.worker")


def load_queue(target: str, args: argparse.Namespace | None = None) -> DelayQueue:
    """``package.module:attr``: a DelayQueue, a function returning one, or a function
    ``register(queue)`` (as ``redelay simulate --app`` takes) given a queue on ``args``'s --redis,
    --namespace and --data-dir. ``attr`` may be dotted."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise usage_error(f"worker: {target!r} is not MODULE:QUEUE (e.g. myapp.tasks:queue)")
    # Like other app runners, find modules in the current directory too.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise usage_error(f"worker: no module named {module_name!r}") from None
        traceback.print_exc()  # a module the user's module imports is missing
        raise usage_error(f"worker: importing {module_name!r} failed: {exc}") from None
    except Exception as exc:
        traceback.print_exc()  # the user's module raised: its traceback is what helps
        raise usage_error(f"worker: importing {module_name!r} failed: {exc!r}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise usage_error(f"worker: module {module_name!r} has no {attr!r}") from None
    if not isinstance(obj, DelayQueue) and callable(obj):
        obj = _called(obj, target, args)
    if not isinstance(obj, DelayQueue):
        raise usage_error(f"worker: {target} is a {type(obj).__name__}, not a DelayQueue")
    # A worker without handlers would run, carry jobs to ready, and never handle one.
    if not obj.handled_topics:
        obj.close()
        raise usage_error(
            f'worker: {target} has no handlers; register one with @queue.handler("TOPIC") '
            "in the module (or in one it imports) before the worker starts"
        )
    return obj


def _called(fn: Any, target: str, args: argparse.Namespace | None) -> Any:
    """What the target function gives: its return value, or the queue it registered on."""
    try:
        required = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):  # no signature to read (a builtin): called as a factory
        required = []
    if len(required) > 1:
        raise usage_error(
            f"worker: {target} takes {len(required)} arguments; give a DelayQueue, a function "
            "returning one, or a function register(queue)"
        )
    queue = None
    if required:
        given = argparse.Namespace() if args is None else args
        queue = DelayQueue(redis_url(given), namespace(given), data_dir=data_dir(given))
    try:
        returned = fn() if queue is None else fn(queue)
    except Exception as exc:
        traceback.print_exc()  # the user's function raised: its traceback is what helps
        if queue is not None:
            queue.close()
        raise usage_error(f"worker: calling {target} failed: {exc!r}") from None
    return returned if queue is None else queue


def _first_connection(queue: DelayQueue, target: str) -> None:
    """Connects before starting, so a worker that never reached Redis says so (exit 3), rather
    than that it "lost the connection" it never had."""
    import redis

    try:
        queue.store  # noqa: B018 - the first use connects, syncs the clock, opens the store
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        queue.close()
        raise no_redis(f"worker: {target} cannot reach its Redis: {exc}") from None


def run_worker(ctx: Context, args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level,  # one of app.LOG_LEVELS, checked by the parser
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not 0 <= args.grace < math.inf:  # also refuses nan
        raise usage_error(f"worker: --grace must be a number of seconds >= 0, not {args.grace}")
    signals = SignalFlag()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # No lock may be taken here (actors._signals): record the signal, the main thread polls.
        signals.handler(signum, frame)
        if len(signals.received) > 1:
            # A second signal means "now": leased jobs come back when their leases expire.
            os.write(2, b"redelay: second signal: exiting without waiting for running handlers\n")
            os._exit(Exit.INTERRUPTED)

    # Installed before the import, so a signal during a slow start still stops gracefully.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    queue = load_queue(args.target, args)
    metrics = None if args.metrics_port is None else serve_metrics(queue, args)
    _first_connection(queue, args.target)
    queue.start(gc_freeze=args.gc_freeze)
    relay = None if args.outbox_db is None else start_outbox_relay(queue, args.outbox_db)
    if relay is not None and metrics is not None:
        from actors.metrics import registry
        from actors.outbox.actor import outbox_collector

        registry(queue).register(outbox_collector(relay))
    log.info("worker started (pid %d, %s); stop with SIGTERM or Ctrl-C", os.getpid(), args.target)
    # With --json the worker prints a stream of events, one compact document per line; the last
    # one says how it ended (with the error fields when it failed), so nothing follows it.
    if ctx.json:
        started: dict[str, Any] = {
            "event": "started",
            "pid": os.getpid(),
            "target": args.target,
            "gc_frozen": queue.gc_frozen,
        }
        if metrics is not None:
            started["metrics"] = metrics.url
        print_json_line(started)
    signals.wait()  # polls: see actors._signals
    name = signal.Signals(signals.received[0]).name
    log.info("%s: stopping, running handlers get %.1fs", name, args.grace)
    if relay is not None:
        relay.stop()  # before the queue: a pass under way finishes its writes to Redis
    report = queue.stop(grace=args.grace)
    if metrics is not None:
        metrics.close()
    log.info("stopped: %s", report)
    stopped: dict[str, Any] = {"event": "stopped", "signal": name, "report": _jsonable(report)}
    code = Exit.OK
    if report.get("still_running"):
        code = Exit.WORKER_FAILED
        message = (
            f"handlers were still running after {args.grace}s; their jobs will be retried "
            "when their leases expire"
        )
        print(f"redelay: error: {message}", file=sys.stderr)
        stopped |= {"error": "grace_exceeded", "message": message, "exit_code": int(code)}
    if ctx.json:
        print_json_line(stopped)
    return code


def start_outbox_relay(queue: DelayQueue, url: str) -> RelayHandle:
    """The outbox relay actor (actors/outbox/actor.py), once the queue runs."""
    try:
        import sqlalchemy as sa

        from actors.outbox.actor import start_relay
    except ModuleNotFoundError:
        queue.stop()
        raise usage_error(f"worker: --outbox-db {OUTBOX_INSTALL_HINT}") from None
    try:
        engine = sa.create_engine(url)
    except Exception as exc:  # an unknown dialect or driver: the URL is the user's to fix
        queue.stop()
        raise usage_error(f"worker: --outbox-db: {exc}") from None
    handle = start_relay(queue.store, engine)
    log.info("relaying the outbox of %s", engine.url.render_as_string(hide_password=True))
    return handle


def serve_metrics(queue: DelayQueue, args: argparse.Namespace) -> MetricsServer:
    """Starts the --metrics-port endpoint before the queue, so a bad port starts no actor."""
    if not 0 <= args.metrics_port <= 65535:
        queue.close()
        raise usage_error(f"worker: --metrics-port must be 0 to 65535, not {args.metrics_port}")
    try:
        from actors.metrics import serve
    except ModuleNotFoundError:
        queue.close()
        raise usage_error(f"worker: --metrics-port {INSTALL_HINT}") from None
    try:
        server = serve(queue, args.metrics_port, args.metrics_host)
    except OSError as exc:  # the port is taken, the host is not this machine's, ...
        queue.close()
        where = f"{args.metrics_host}:{args.metrics_port}"
        raise usage_error(f"worker: cannot serve metrics on {where}: {exc}") from None
    log.info("metrics at %s", server.url)
    return server


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)
