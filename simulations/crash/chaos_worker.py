"""A worker process of the chaos simulator: a DelayQueue whose handlers write every run to the
ledger and misbehave as the seed says. The simulator starts it as

    redelay worker simulations.crash.chaos_worker:make_queue

(or ``python -m simulations.crash.chaos_worker``) with its settings in environment variables:
``REDELAY_SIM_URL`` (Redis), ``REDELAY_SIM_LEDGER`` (SQLite path), ``REDELAY_SIM_SETTINGS``
(ChaosSettings as JSON), ``REDELAY_SIM_WORKER`` (a name for the ledger) and optionally
``REDELAY_SIM_APP`` (your handlers, MODULE:ATTR, see docs/simulations.md),
``REDELAY_SIM_ORACLE_URL`` (Redis reached around any proxy: each run reads Redis TIME there as it
starts) and ``REDELAY_SIM_CLOCK_FILE`` (a file holding this slot's wall clock offset in ms).

Two faults live here, in the worker's own entry point and never in redelay: a poison job's
handler (id ``poison-...``) ends the process with ``os._exit`` on every run, and with
``REDELAY_SIM_CLOCK_FILE`` set ``time.time`` and ``time.time_ns`` are replaced, before the queue
exists, by functions adding the offset the driver writes to that file (an NTP step or ``date -s``
on the worker's host; the monotonic clock is left alone, as no host steps it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry as RedisRetry

from actors import AuditRetention, DelayQueue, Job, RedisSyncedClock, Retry

from ._user_app import load_app_handlers
from .chaos_settings import LOST_MAX, ChaosSettings
from .det_settings import TopicPlan
from .ledger import Ledger

NAMESPACE_ENV = "REDELAY_SIM_NAMESPACE"
DEFAULT_NAMESPACE = "chaos"
CLOCK_FILE_ENV = "REDELAY_SIM_CLOCK_FILE"
ORACLE_URL_ENV = "REDELAY_SIM_ORACLE_URL"
# A job with an id that starts so kills the worker process that runs it, every time.
POISON_PREFIX = "poison-"
POISON_EXIT = 70


class SimulatedError(Exception):
    """What an injected handler error raises."""


def make_queue() -> DelayQueue:
    """Builds the worker's queue from the environment (``redelay worker`` calls this)."""
    if os.environ.get(CLOCK_FILE_ENV):
        _step_clock_from(Path(os.environ[CLOCK_FILE_ENV]))
    settings = ChaosSettings.from_json(os.environ["REDELAY_SIM_SETTINGS"])
    worker = os.environ.get("REDELAY_SIM_WORKER", f"pid{os.getpid()}")
    consumer = f"{worker}:{os.getpid()}"
    oracle = _oracle(os.environ.get(ORACLE_URL_ENV) or os.environ["REDELAY_SIM_URL"])
    ledger = Ledger(os.environ["REDELAY_SIM_LEDGER"])
    user: dict[str, Callable[[Job], Any]] = {}
    if os.environ.get("REDELAY_SIM_APP"):
        user, _ = load_app_handlers(os.environ["REDELAY_SIM_APP"])
    queue = DelayQueue(
        os.environ["REDELAY_SIM_URL"],
        os.environ.get(NAMESPACE_ENV, DEFAULT_NAMESPACE),
        retention=AuditRetention("NONE"),
        watchdog_interval_s=settings.watchdog_interval_s,
        sweep_interval_s=settings.sweep_interval_s,
        consumer_name=consumer,
        shards=settings.shards if settings.cluster else None,
    )
    _sample_clock(queue, ledger, consumer)
    for topic in settings.topics:
        queue.handler(
            topic.name,
            concurrency=topic.concurrency,
            prefetch=topic.prefetch,
            timeout=topic.timeout_ms / 1000,
            retry=[ms / 1000 for ms in topic.retry_ms],
            lease=topic.lease_ms / 1000,
            lost_max=LOST_MAX,
        )(_handler(queue, ledger, settings, worker, consumer, oracle, topic, user.get(topic.name)))
    return queue


# How often a stepped worker looks for a new offset in its clock file.
_CLOCK_POLL_S = 0.05
_offset_s = 0.0


def _step_clock_from(path: Path) -> None:
    """Replaces the wall clock with one offset by what ``path`` holds (ms), read now and then
    whenever the file changes (the driver replaces it whole)."""
    global _offset_s
    real_time, real_time_ns = time.time, time.time_ns

    def stepped_time() -> float:
        return real_time() + _offset_s

    def stepped_time_ns() -> int:
        return real_time_ns() + round(_offset_s * 1e9)

    def read() -> None:
        global _offset_s
        with contextlib.suppress(OSError, ValueError):
            _offset_s = int(path.read_text()) / 1000

    read()
    time.time, time.time_ns = stepped_time, stepped_time_ns

    def follow() -> None:
        seen = None
        while True:
            with contextlib.suppress(OSError):
                stamp = path.stat().st_mtime_ns
                if stamp != seen:
                    seen = stamp
                    read()
            time.sleep(_CLOCK_POLL_S)  # a polling period, not a wait for a condition

    threading.Thread(target=follow, name="sim-clock-steps", daemon=True).start()


Oracle = Callable[[], int | None]


def _oracle(url: str) -> Oracle:
    """Reads Redis's TIME (ms) straight from the server, around any proxy, failing fast (None)
    while Redis is away: how the checkers time a run's start whatever this worker's clock says.
    A cluster URL gets none: its runs are timed by the worker's clock, as before."""
    if not url.startswith(("redis://", "unix://")):
        return lambda: None
    client = redis.Redis.from_url(
        url, socket_timeout=0.5, socket_connect_timeout=0.5, retry=RedisRetry(NoBackoff(), 0)
    )

    def server_ms() -> int | None:
        try:
            seconds, micros = client.time()
        except redis.RedisError:
            return None
        return int(seconds) * 1000 + int(micros) // 1000

    return server_ms


# How often a worker writes down its clock's offset to Redis and the round trip it measured.
_CLOCK_SAMPLE_S = 5.0


def _sample_clock(queue: DelayQueue, ledger: Ledger, worker: str) -> None:
    """Records the clock's sync (offset, round trip) now and every few seconds, on a daemon
    thread: the checkers allow for this much disagreement between processes."""
    clock = queue.clock
    if not isinstance(clock, RedisSyncedClock):
        return

    def sample() -> None:
        while True:
            ledger.clock(worker, clock.now_ms(), clock.offset_ms, clock.last_rtt_ms)
            time.sleep(_CLOCK_SAMPLE_S)  # a sampling period, not a wait for a condition

    threading.Thread(target=sample, name="sim-clock-sample", daemon=True).start()


def _handler(
    queue: DelayQueue,
    ledger: Ledger,
    settings: ChaosSettings,
    worker: str,
    consumer: str,
    oracle: Oracle,
    topic: TopicPlan,
    user: Callable[[Job], Any] | None,
) -> Callable[[Job], str | None]:
    def handle(job: Job) -> str | None:
        """Runs on a pool's handler thread."""
        server_ms = oracle()
        started = queue.clock.now_ms()
        seq = ledger.run_started(
            job.topic, job.id, job.token, job.attempt, job.due_ms, started, worker, server_ms
        )
        # Faults are logged by true time, which a stepped clock is not.
        at_ms = started if server_ms is None else server_ms
        if job.id.startswith(POISON_PREFIX):
            detail = f"{consumer} {job.topic}/{job.id} #{job.attempt}"
            ledger.fault(at_ms, "handler_crash", detail)
            os._exit(POISON_EXIT)  # the whole process, leases and neighbours with it
        decision = settings.handler.decide(settings.seed, job.topic, job.id, job.attempt)
        try:
            if decision.kind == "hang":
                ledger.fault(at_ms, "handler_hang", f"{job.topic}/{job.id} #{job.attempt}")
            if decision.kind != "retry" and decision.ms > 0:
                time.sleep(decision.ms / 1000)  # the handler's work (or its hang)
            if decision.kind == "error":
                raise SimulatedError(f"injected failure of attempt {job.attempt}")
            if decision.kind == "retry":
                raise Retry(after=decision.ms / 1000, reason="injected retry")
            result = user(job) if user is not None else None
        except Exception:
            ledger.run_ended(seq, "error", queue.clock.now_ms())
            raise
        ledger.run_ended(seq, "ok", queue.clock.now_ms())
        return result if isinstance(result, str) else None

    return handle


def main() -> int:
    """``python -m simulations.crash.chaos_worker``: the same as ``redelay worker``, for when the
    CLI is not installed: runs until SIGTERM or SIGINT, then stops gracefully."""
    grace = float(os.environ.get("REDELAY_SIM_GRACE", "20"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    queue = make_queue().start()
    stop.wait()
    report = queue.stop(grace=grace)
    return 0 if not report.get("still_running") else 6


if __name__ == "__main__":
    sys.exit(main())
