"""Celery with the Redis broker and its default prefork pool: one child process at the defaults
the bench holds it to; tuned, more children and a large prefetch multiplier (see tuning.py).

A task with an ETA (countdown) is sent to the worker at once; the worker keeps it in memory, and
Redis keeps it in the unacked hash, until it is due. There is no batch enqueue.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from celery import Celery

from ..jobs import BenchJob, DueTimes, ProduceResult, drive, now_ms
from ..recorder import Recorder
from ..spec import QUEUE_NAME, AgentSpec
from . import tuning

BATCH_API: str | None = None
_recorder: Recorder | None = None


def handle(body: dict[str, Any]) -> None:
    assert _recorder is not None
    _recorder.delivered(body)


def app_for(spec: AgentSpec) -> tuple[Celery, Any]:
    app = Celery("bench", broker=f"redis+socket://{spec.socket_path}")
    app.conf.update(
        task_ignore_result=True,
        task_default_queue=QUEUE_NAME,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # The documented advice for the Redis broker: the visibility timeout must exceed the
        # longest ETA, or a task is redelivered while it waits (the default, 1 h, does).
        broker_transport_options={"visibility_timeout": 3600},
    )
    if spec.tuned:
        app.conf.worker_prefetch_multiplier = tuning.CELERY_TUNED_PREFETCH_MULTIPLIER
    task = app.task(name=f"{QUEUE_NAME}.handle")(handle)
    return app, task


class Producer:
    batch_api = BATCH_API

    def __init__(self, app: Celery, task: Any) -> None:
        self.app = app
        self.task = task

    def add_one(self, job: BenchJob) -> None:
        if job.due_ms <= now_ms():
            self.task.apply_async(args=(job.body(),))
        else:
            eta = datetime.fromtimestamp(job.due_ms / 1000, tz=UTC)
            self.task.apply_async(args=(job.body(),), eta=eta)

    def add_batch(self, jobs: Sequence[BenchJob]) -> None:
        for job in jobs:
            self.add_one(job)

    def close(self) -> None:
        self.app.close()


def produce(spec: AgentSpec, due: DueTimes) -> ProduceResult:
    producer = Producer(*app_for(spec))
    try:
        return drive(spec.scenario, due, producer)
    finally:
        producer.close()


def work(spec: AgentSpec, recorder: Recorder) -> None:
    global _recorder
    _recorder = recorder
    app, _ = app_for(spec)
    worker = app.Worker(
        # The default pool. The solo and threads pools were tried too: with them, tasks whose
        # ETAs fall due together ran at about 20 per second in this Celery version.
        # Each child records into the worker's Recorder, whose state is shared across fork.
        pool="prefork",
        concurrency=tuning.CELERY_TUNED_CHILDREN if spec.tuned else tuning.CELERY_CHILDREN,
        loglevel="WARNING",
        quiet=True,
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )
    recorder.ready()
    worker.start()
