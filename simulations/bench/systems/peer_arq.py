"""arq: asyncio jobs in one sorted set scored by due time, polled by the worker.

arq has no batch enqueue, so a filling producer runs 50 enqueue_job calls concurrently.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Worker, func

from ..jobs import BenchJob, DueTimes, ProduceResult, drive_async, gather_bounded, now_ms
from ..recorder import Recorder
from ..spec import QUEUE_NAME, AgentSpec
from . import tuning

BATCH_API: str | None = None
_recorder: Recorder | None = None


def settings(spec: AgentSpec) -> RedisSettings:
    return RedisSettings(unix_socket_path=spec.socket_path)


class Producer:
    batch_api = BATCH_API

    def __init__(self, pool: ArqRedis) -> None:
        self.pool = pool

    async def add_one(self, job: BenchJob) -> None:
        if job.due_ms <= now_ms():
            await self.pool.enqueue_job(QUEUE_NAME, job.body())
        else:
            due = datetime.fromtimestamp(job.due_ms / 1000, tz=UTC)
            await self.pool.enqueue_job(QUEUE_NAME, job.body(), _defer_until=due)

    async def add_batch(self, jobs: Sequence[BenchJob]) -> None:
        await gather_bounded([functools.partial(self.add_one, job) for job in jobs])

    async def close(self) -> None:
        await self.pool.aclose()


def produce(spec: AgentSpec, due: DueTimes) -> ProduceResult:
    async def run() -> ProduceResult:
        producer = Producer(await create_pool(settings(spec)))
        try:
            return await drive_async(spec.scenario, due, producer)
        finally:
            await producer.close()

    return asyncio.run(run())


async def handle(ctx: dict[str, Any], body: dict[str, Any]) -> None:
    assert _recorder is not None
    _recorder.delivered(body)


def work(spec: AgentSpec, recorder: Recorder) -> None:
    global _recorder
    _recorder = recorder

    async def run() -> None:
        worker = Worker(
            functions=[func(handle, name=QUEUE_NAME)],
            max_jobs=tuning.ARQ_TUNED_MAX_JOBS if spec.tuned else tuning.ARQ_MAX_JOBS,
            redis_settings=settings(spec),
            handle_signals=False,
        )
        recorder.ready()
        await worker.main()

    asyncio.run(run())
