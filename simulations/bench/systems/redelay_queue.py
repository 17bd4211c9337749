"""redelay as users run it: the DelayQueue facade and its actors, default settings."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from actors import DelayQueue, Job
from actors.runtime.gc_freeze import freeze_heap

from ..jobs import BenchJob, DueTimes, ProduceResult, drive
from ..recorder import Recorder
from ..spec import QUEUE_NAME, AgentSpec
from . import tuning

BATCH_API: str | None = "add_many: one Lua call per batch"
NAMESPACE = "bench"
# The in-process concurrency arq, SAQ and BullMQ get here too; BENCH_REDELAY_CONCURRENCY
# overrides it for experiments (docs/benchmarks.md reports the default run).
CONCURRENCY = int(os.environ.get("BENCH_REDELAY_CONCURRENCY", str(tuning.REDELAY_CONCURRENCY)))


class Producer:
    batch_api = BATCH_API

    def __init__(self, queue: DelayQueue) -> None:
        self.queue = queue

    def add_one(self, job: BenchJob) -> None:
        self.queue.add(QUEUE_NAME, job.id, job.body(), at=job.due_ms / 1000)

    def add_batch(self, jobs: Sequence[BenchJob]) -> None:
        self.queue.add_many(
            {"topic": QUEUE_NAME, "id": j.id, "body": j.body(), "at": j.due_ms / 1000} for j in jobs
        )

    def close(self) -> None:
        self.queue.close()


def produce(spec: AgentSpec, due: DueTimes) -> ProduceResult:
    producer = Producer(DelayQueue(spec.url, NAMESPACE, producer_only=True))
    try:
        return drive(spec.scenario, due, producer)
    finally:
        producer.close()


def work(spec: AgentSpec, recorder: Recorder) -> None:
    queue = DelayQueue(spec.url, NAMESPACE)

    @queue.handler(
        QUEUE_NAME,
        concurrency=tuning.REDELAY_TUNED_CONCURRENCY if spec.tuned else CONCURRENCY,
        prefetch=tuning.REDELAY_TUNED_PREFETCH if spec.tuned else 0,
    )
    def handle(job: Job) -> None:
        recorder.delivered(job.body)

    gc_freeze = spec.tuned and tuning.REDELAY_TUNED_GC_FREEZE
    if gc_freeze:
        # The loaded heap's one full collection (50-100 ms) happens before the go, as in a
        # worker's start-up, not inside the measured drain; start's own then walks only what
        # the actors made.
        freeze_heap()
    recorder.ready()
    queue.start(gc_freeze=gc_freeze)
    threading.Event().wait()  # the actors consume until the runner stops us
