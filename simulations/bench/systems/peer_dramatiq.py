"""Dramatiq with its Redis broker.

Delayed messages go to the queue's delay queue; the worker's consumer fetches them and holds them
in memory until due, then enqueues them on the main queue. There is no batch enqueue.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from ..jobs import BenchJob, DueTimes, ProduceResult, drive, now_ms
from ..recorder import Recorder
from ..spec import QUEUE_NAME, AgentSpec
from . import tuning

BATCH_API: str | None = None
_recorder: Recorder | None = None


def handle(body: dict[str, Any]) -> None:
    assert _recorder is not None
    _recorder.delivered(body)


def setup(spec: AgentSpec) -> tuple[RedisBroker, Any]:
    broker = RedisBroker(url=spec.url)
    dramatiq.set_broker(broker)
    actor = dramatiq.actor(handle, queue_name=QUEUE_NAME, max_retries=0, broker=broker)
    return broker, actor


class Producer:
    batch_api = BATCH_API

    def __init__(self, broker: RedisBroker, actor: Any) -> None:
        self.broker = broker
        self.actor = actor

    def add_one(self, job: BenchJob) -> None:
        # Rounded up: Dramatiq adds the delay to its own whole-ms clock, and rounding down would
        # make the harness, not Dramatiq, deliver a job up to 1 ms early.
        delay_ms = math.ceil(job.due_ms - now_ms())
        if delay_ms > 0:
            self.actor.send_with_options(args=(job.body(),), delay=delay_ms)
        else:
            self.actor.send(job.body())

    def add_batch(self, jobs: Sequence[BenchJob]) -> None:
        for job in jobs:
            self.add_one(job)

    def close(self) -> None:
        self.broker.close()


def produce(spec: AgentSpec, due: DueTimes) -> ProduceResult:
    producer = Producer(*setup(spec))
    try:
        return drive(spec.scenario, due, producer)
    finally:
        producer.close()


def work(spec: AgentSpec, recorder: Recorder) -> None:
    global _recorder
    _recorder = recorder
    broker, _ = setup(spec)
    threads = tuning.DRAMATIQ_TUNED_THREADS if spec.tuned else tuning.DRAMATIQ_THREADS
    worker = dramatiq.Worker(broker, worker_threads=threads)
    recorder.ready()
    worker.start()
    threading.Event().wait()  # the worker's threads consume until the runner stops us
