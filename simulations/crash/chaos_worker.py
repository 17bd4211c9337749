"""A worker process of the chaos simulator: a DelayQueue whose handlers write every run to the
ledger and misbehave as the seed says. The simulator starts it as

    redelay worker simulations.crash.chaos_worker:make_queue

(or ``python -m simulations.crash.chaos_worker``) with its settings in environment variables:
``REDELAY_SIM_URL`` (Redis), ``REDELAY_SIM_LEDGER`` (SQLite path), ``REDELAY_SIM_SETTINGS``
(ChaosSettings as JSON), ``REDELAY_SIM_WORKER`` (a name for the ledger) and optionally
``REDELAY_SIM_APP`` (your handlers, MODULE:ATTR, see docs/simulations.md).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from actors import AuditRetention, DelayQueue, Job, RedisSyncedClock, Retry

from ._user_app import load_app_handlers
from .chaos_settings import ChaosSettings
from .det_settings import TopicPlan
from .ledger import Ledger

NAMESPACE_ENV = "REDELAY_SIM_NAMESPACE"
DEFAULT_NAMESPACE = "chaos"


class SimulatedError(Exception):
    """What an injected handler error raises."""


def make_queue() -> DelayQueue:
    """Builds the worker's queue from the environment (``redelay worker`` calls this)."""
    settings = ChaosSettings.from_json(os.environ["REDELAY_SIM_SETTINGS"])
    worker = os.environ.get("REDELAY_SIM_WORKER", f"pid{os.getpid()}")
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
        consumer_name=f"{worker}:{os.getpid()}",
        shards=settings.shards if settings.cluster else None,
    )
    _sample_clock(queue, ledger, f"{worker}:{os.getpid()}")
    for topic in settings.topics:
        queue.handler(
            topic.name,
            concurrency=topic.concurrency,
            prefetch=topic.prefetch,
            timeout=topic.timeout_ms / 1000,
            retry=[ms / 1000 for ms in topic.retry_ms],
            lease=topic.lease_ms / 1000,
        )(_handler(queue, ledger, settings, worker, topic, user.get(topic.name)))
    return queue


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
    topic: TopicPlan,
    user: Callable[[Job], Any] | None,
) -> Callable[[Job], str | None]:
    def handle(job: Job) -> str | None:
        """Runs on a pool's handler thread."""
        started = queue.clock.now_ms()
        seq = ledger.run_started(
            job.topic, job.id, job.token, job.attempt, job.due_ms, started, worker
        )
        decision = settings.handler.decide(settings.seed, job.topic, job.id, job.attempt)
        try:
            if decision.kind == "hang":
                ledger.fault(started, "handler_hang", f"{job.topic}/{job.id} #{job.attempt}")
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
