"""The systems under test: one module per system, listed here with how each is configured.

A Python system module defines ``BATCH_API`` (how it sends many jobs in one call, or None),
``produce(spec, due) -> ProduceResult`` and ``work(spec, recorder)`` (blocks while consuming).
BullMQ runs in Node.js (``node/bullmq.mjs``) and speaks the same spec and result files.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import shutil
from dataclasses import dataclass, replace
from types import ModuleType

from ..spec import TUNED_SUFFIX
from . import tuning as t


@dataclass(frozen=True, slots=True)
class SystemInfo:
    name: str
    module: str | None  # Python module under simulations.bench.systems, None for Node.js
    packages: tuple[str, ...]  # distributions whose versions the report lists
    config: str  # how it is configured, for docs/benchmarks.md
    batch_api: str | None

    @property
    def is_node(self) -> bool:
        return self.module is None

    def load(self) -> ModuleType:
        assert self.module is not None
        return importlib.import_module(f"simulations.bench.systems.{self.module}")

    def missing(self) -> str | None:
        """Why this system cannot run here, or None."""
        if self.is_node:
            return None if shutil.which("node") else "node is not on PATH"
        for package in self.packages:
            try:
                importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                return f"{package} is not installed (pip install -e '.[bench]')"
        return None

    def versions(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for package in self.packages:
            try:
                found[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                continue
        return found


_AT_DEFAULTS: tuple[SystemInfo, ...] = (
    SystemInfo(
        "redelay",
        "redelay_queue",
        ("redelay", "redis", "pykka"),
        f"DelayQueue with one handler (concurrency {t.REDELAY_CONCURRENCY}), default settings: "
        "audit stream on "
        "(MAXLEN ~1,000,000), RedisSyncedClock, default lease and retry schedule.",
        "add_many: one Lua call per batch",
    ),
    SystemInfo(
        "redelay-store",
        "redelay_store",
        ("redelay", "redis"),
        "No actors: one thread looping carry(1000) / lease(100) / ack_many on the Store, waking "
        "on the wake channel or the next due time. The ceiling for the actor system above.",
        "add_many: one Lua call per batch",
    ),
    SystemInfo(
        "arq",
        "peer_arq",
        ("arq", "redis", "hiredis"),
        f"Worker defaults (max_jobs {t.ARQ_MAX_JOBS}, poll_delay 0.5 s, keep_result 3600 s); "
        "async handler; "
        "delays with _defer_until. The worker reads at most queue_read_limit job ids (default "
        "max(5 x max_jobs, 100) = 100) per poll, one poll per poll_delay: 100 / 0.5 s = 200 jobs/s "
        "is its ceiling with these defaults (arq-tuned raises max_jobs).",
        None,
    ),
    SystemInfo(
        "rq",
        "peer_rq",
        ("rq", "redis"),
        "SimpleWorker (no fork per job) with the built-in scheduler (with_scheduler=True, "
        "polls every 1 s); delays with enqueue_at; result_ttl default (500 s). RQ scores "
        "scheduled jobs in whole seconds (the datetime is truncated), so a job can be moved to "
        "the queue up to a second before it is due: that is where its early deliveries come from.",
        "enqueue_many / schedule_job on one pipeline",
    ),
    SystemInfo(
        "dramatiq",
        "peer_dramatiq",
        ("dramatiq", "redis"),
        f"RedisBroker, Worker with the default {t.DRAMATIQ_THREADS} threads and default "
        "middleware; max_retries=0; "
        "delays with send_with_options(delay=ms) (the worker holds due-later messages in memory).",
        None,
    ),
    SystemInfo(
        "saq",
        "peer_saq",
        ("saq", "redis"),
        f"Worker defaults (concurrency {t.SAQ_CONCURRENCY}, schedule poll every 1 s); delays with "
        "scheduled= "
        "(whole epoch seconds, rounded up so no job is due early).",
        None,
    ),
    SystemInfo(
        "celery",
        "peer_celery",
        ("celery", "kombu", "redis"),
        f"Redis broker, default prefork pool with one child (concurrency {t.CELERY_CHILDREN}), "
        "task_ignore_result, "
        "no heartbeat/mingle/gossip; delays with eta (countdown): the worker holds ETA tasks in "
        "its memory until due (and Redis in its unacked hash).",
        None,
    ),
    SystemInfo(
        "bullmq",
        None,
        (),
        f"Node.js; Worker concurrency {t.BULLMQ_CONCURRENCY}, removeOnComplete; delays with the "
        "delay option; "
        "ioredis with maxRetriesPerRequest null as the docs require for workers.",
        "addBulk: one MULTI of Lua calls",
    ),
)


# The systems again, set for throughput as their own documentation advises. The agent module is
# the same; it reads AgentSpec.tuned. RQ and Celery scale by worker processes (rq worker-pool,
# Celery's prefork children): their handlers record into the Recorder's shared memory.
def _tuned(name: str, config: str) -> SystemInfo:
    """The twin of the default entry ``name``: same agent, packages and batch API."""
    base = next(s for s in _AT_DEFAULTS if s.name == name)
    return replace(base, name=name + TUNED_SUFFIX, config=config)


_TUNED: tuple[SystemInfo, ...] = (
    _tuned(
        "redelay",
        f"As redelay, with handler concurrency {t.REDELAY_TUNED_CONCURRENCY} and prefetch "
        f"{t.REDELAY_TUNED_PREFETCH} (docs/scaling.md, tuning a "
        "handler for throughput: concurrency for I/O-bound handlers, prefetch for short ones)"
        + (
            ", started with gc_freeze=True as `redelay worker` starts it (docs/scaling.md, "
            "lateness and Python's garbage collector)."
            if t.REDELAY_TUNED_GC_FREEZE
            else "."
        ),
    ),
    _tuned(
        "arq",
        f"max_jobs {t.ARQ_TUNED_MAX_JOBS} (arq's docs: the number of jobs run concurrently), so "
        f"queue_read_limit follows at {max(5 * t.ARQ_TUNED_MAX_JOBS, 100)}; other settings "
        "default.",
    ),
    _tuned(
        "dramatiq",
        f"Worker with {t.DRAMATIQ_TUNED_THREADS} threads (Dramatiq's docs: raise worker_threads "
        "for I/O-bound actors).",
    ),
    _tuned(
        "rq",
        f"WorkerPool of {t.RQ_TUNED_WORKERS} SimpleWorkers, each its own process (RQ's docs: "
        "`rq worker-pool -n N` to run several workers on one machine); the rest as rq.",
    ),
    _tuned(
        "saq",
        f"Worker concurrency {t.SAQ_TUNED_CONCURRENCY} (SAQ's docs: the number of jobs run at "
        "once).",
    ),
    _tuned(
        "celery",
        f"Prefork pool with {t.CELERY_TUNED_CHILDREN} children and worker_prefetch_multiplier "
        f"{t.CELERY_TUNED_PREFETCH_MULTIPLIER} (Celery's docs: more "
        "pool processes for throughput, and a prefetch multiplier of 64 or 128 for many short "
        "tasks); the rest as celery.",
    ),
    _tuned(
        "bullmq",
        f"Worker concurrency {t.BULLMQ_TUNED_CONCURRENCY} (BullMQ's docs: raise concurrency for "
        "I/O-bound processors).",
    ),
)

SYSTEMS: tuple[SystemInfo, ...] = _AT_DEFAULTS + _TUNED
BY_NAME = {system.name: system for system in SYSTEMS}
