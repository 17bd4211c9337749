"""The settings each system runs with, at its defaults and tuned, in one place.

The system modules read them to configure their workers, and ``systems/__init__.py`` reads them
to describe each entry on the page, so the two cannot disagree. This module imports nothing: the
list of systems must load where the peers' packages are not installed (the main environment).
BullMQ's worker is Node.js: ``node/bullmq.mjs`` writes its two concurrencies again, and
tests/bench/test_bench_systems.py checks that they match the ones here.
"""

from __future__ import annotations

# redelay: handler concurrency, and prefetch (jobs leased beyond the handler threads).
REDELAY_CONCURRENCY = 10
REDELAY_TUNED_CONCURRENCY = 100  # docs/scaling.md: concurrency for I/O-bound handlers
REDELAY_TUNED_PREFETCH = 400  # docs/scaling.md: prefetch for short handlers
REDELAY_TUNED_GC_FREEZE = True  # docs/scaling.md: start(gc_freeze=True), as `redelay worker` does

ARQ_MAX_JOBS = 10  # arq's default
ARQ_TUNED_MAX_JOBS = 100

DRAMATIQ_THREADS = 8  # Dramatiq's default worker_threads
DRAMATIQ_TUNED_THREADS = 64

SAQ_CONCURRENCY = 10  # SAQ's default
SAQ_TUNED_CONCURRENCY = 100

RQ_TUNED_WORKERS = 4  # `rq worker-pool -n 4`

CELERY_CHILDREN = 1
CELERY_TUNED_CHILDREN = 4
CELERY_TUNED_PREFETCH_MULTIPLIER = 64  # Celery's docs: 64 or 128 for many short tasks

BULLMQ_CONCURRENCY = 10
BULLMQ_TUNED_CONCURRENCY = 100
