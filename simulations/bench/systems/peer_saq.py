"""SAQ: asyncio jobs; scheduled jobs sit in a sorted set the worker polls once a second.

``scheduled`` takes whole epoch seconds, so due times are rounded up (never early).
SAQ has no batch enqueue, so a filling producer runs 50 enqueue calls concurrently.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Sequence
from typing import Any

from redis import asyncio as aioredis
from saq import Worker
from saq.queue.redis import RedisQueue

from ..jobs import BenchJob, DueTimes, ProduceResult, drive_async, gather_bounded, now_ms
from ..recorder import Recorder
from ..spec import QUEUE_NAME, AgentSpec
from . import tuning

BATCH_API: str | None = None
_recorder: Recorder | None = None


async def handle(ctx: dict[str, Any], *, body: dict[str, Any]) -> None:
    assert _recorder is not None
    _recorder.delivered(body)


def queue_for(spec: AgentSpec) -> Any:
    # Queue.from_url accepts redis:// URLs only; RedisQueue takes any asyncio client.
    return RedisQueue(aioredis.Redis(unix_socket_path=spec.socket_path), name=QUEUE_NAME)


class Producer:
    batch_api = BATCH_API

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    async def add_one(self, job: BenchJob) -> None:
        scheduled = 0 if job.due_ms <= now_ms() else math.ceil(job.due_ms / 1000)
        await self.queue.enqueue("handle", body=job.body(), scheduled=scheduled)

    async def add_batch(self, jobs: Sequence[BenchJob]) -> None:
        await gather_bounded([functools.partial(self.add_one, job) for job in jobs])

    async def close(self) -> None:
        await self.queue.disconnect()


def produce(spec: AgentSpec, due: DueTimes) -> ProduceResult:
    async def run() -> ProduceResult:
        queue = queue_for(spec)
        await queue.connect()
        producer = Producer(queue)
        try:
            return await drive_async(spec.scenario, due, producer)
        finally:
            await producer.close()

    return asyncio.run(run())


def work(spec: AgentSpec, recorder: Recorder) -> None:
    global _recorder
    _recorder = recorder

    async def run() -> None:
        queue = queue_for(spec)
        await queue.connect()
        concurrency = tuning.SAQ_TUNED_CONCURRENCY if spec.tuned else tuning.SAQ_CONCURRENCY
        worker = Worker(queue, functions=[handle], concurrency=concurrency)
        recorder.ready()
        await worker.start()

    asyncio.run(run())
