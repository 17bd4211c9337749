"""RQ: a SimpleWorker (no fork per job) with RQ's scheduler for delayed jobs; tuned, a
WorkerPool of ``tuning.RQ_TUNED_WORKERS`` such workers, each its own forked process.

Due-now jobs go straight to the queue (enqueue / enqueue_many); later ones to the scheduled job
registry (enqueue_at), which the scheduler process moves to the queue once a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.worker_pool import WorkerPool

from ..jobs import BenchJob, DueTimes, ProduceResult, drive, now_ms
from ..recorder import Recorder
from ..spec import QUEUE_NAME, AgentSpec
from . import tuning

BATCH_API: str | None = "enqueue_many / enqueue_at on one pipeline"
# RQ's docs scale a queue by worker processes: `rq worker-pool -n N` (WorkerPool). Each forked
# worker records into the Recorder, whose state is shared across fork.
_recorder: Recorder | None = None


def handle(body: dict[str, Any]) -> None:
    assert _recorder is not None
    _recorder.delivered(body)


def _when(job: BenchJob) -> datetime:
    return datetime.fromtimestamp(job.due_ms / 1000, tz=UTC)


class Producer:
    batch_api = BATCH_API

    def __init__(self, connection: redis.Redis) -> None:
        self.connection = connection
        self.queue = Queue(QUEUE_NAME, connection=connection)

    def add_one(self, job: BenchJob) -> None:
        if job.due_ms <= now_ms():
            self.queue.enqueue(handle, job.body())
        else:
            self.queue.enqueue_at(_when(job), handle, job.body())

    def add_batch(self, jobs: Sequence[BenchJob]) -> None:
        now = now_ms()
        due_now = [j for j in jobs if j.due_ms <= now]
        later = [j for j in jobs if j.due_ms > now]
        with self.connection.pipeline() as pipe:
            if due_now:
                datas = [Queue.prepare_data(handle, (j.body(),)) for j in due_now]
                self.queue.enqueue_many(datas, pipeline=pipe)
            for job in later:
                self.queue.enqueue_at(_when(job), handle, job.body(), pipeline=pipe)
            pipe.execute()

    def close(self) -> None:
        self.connection.close()


def produce(spec: AgentSpec, due: DueTimes) -> ProduceResult:
    producer = Producer(redis.Redis(unix_socket_path=spec.socket_path))
    try:
        return drive(spec.scenario, due, producer)
    finally:
        producer.close()


def work(spec: AgentSpec, recorder: Recorder) -> None:
    global _recorder
    _recorder = recorder
    connection = redis.Redis(unix_socket_path=spec.socket_path)
    queue = Queue(QUEUE_NAME, connection=connection)
    if spec.tuned:
        pool = WorkerPool(
            [queue],
            connection=connection,
            num_workers=tuning.RQ_TUNED_WORKERS,
            worker_class=SimpleWorker,
        )
        recorder.ready()
        pool.start(logging_level="WARNING")  # every worker runs the scheduler's lock loop
        return
    worker = SimpleWorker([queue], connection=connection)
    recorder.ready()
    worker.work(with_scheduler=True, logging_level="WARNING")
