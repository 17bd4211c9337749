"""What a benchmark job is, when it is due, and how producers pace themselves.

Every system gets the same jobs: a JSON body of about 100 bytes carrying the job's sequence number
and the time it is due (epoch ms on this machine's clock). The worker's handler compares the
delivery time with ``due_ms`` from the body, so lateness is measured the same way everywhere.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .scenarios import (
    BODY_BYTES,
    ENQUEUE_DELAY_MS,
    FILL_BATCH_JOBS,
    PACED_OVERRUN,
    TICK_MS,
    Scenario,
)

_PAD = "x" * (BODY_BYTES - len(json.dumps({"seq": 100000, "due_ms": 1_700_000_000_000, "pad": ""})))


def now_ms() -> float:
    return time.time() * 1000


def cpu_ms() -> float:
    """CPU time of this whole process (every thread), user plus system."""
    return time.process_time() * 1000


def job_id(seq: int) -> str:
    """The id every system's producer gives the job numbered ``seq``."""
    return f"job-{seq}"


@dataclass(frozen=True, slots=True)
class BenchJob:
    seq: int
    due_ms: int

    @property
    def id(self) -> str:
        return job_id(self.seq)

    def body(self) -> dict[str, Any]:
        return {"seq": self.seq, "due_ms": self.due_ms, "pad": _PAD}

    def delay_s(self) -> float:
        """Seconds from now until due, for APIs that take a relative delay (never negative)."""
        return max(0.0, (self.due_ms - now_ms()) / 1000)


class DueTimes:
    """When each job is due; one seeded random source for the steady scenarios' delays."""

    def __init__(self, scenario: Scenario, burst_due_ms: int, seed: int) -> None:
        self.scenario = scenario
        self.burst_due_ms = burst_due_ms
        self.rng = random.Random(seed)

    def make(self, seq: int) -> BenchJob:
        kind = self.scenario.kind
        now = int(now_ms())
        if kind == "immediate":
            return BenchJob(seq, now)
        if kind == "burst":
            return BenchJob(seq, self.burst_due_ms)
        if kind == "steady":
            s = self.scenario
            return BenchJob(seq, now + self.rng.randint(s.delay_min_ms, s.delay_max_ms))
        return BenchJob(seq, now + ENQUEUE_DELAY_MS)


@dataclass(slots=True)
class ProduceResult:
    enqueued: int
    start_ms: float
    end_ms: float
    cpu_ms: float
    batch_api: str | None

    @property
    def jobs_per_s(self) -> float:
        return self.enqueued / max(1e-9, (self.end_ms - self.start_ms) / 1000)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "jobs_per_s": self.jobs_per_s}


class SyncProducer(Protocol):
    #: how add_batch sends many jobs; None when the system has no batch API (it loops)
    batch_api: str | None

    def add_one(self, job: BenchJob) -> None: ...

    def add_batch(self, jobs: Sequence[BenchJob]) -> None: ...

    def close(self) -> None: ...


class AsyncProducer(Protocol):
    batch_api: str | None

    async def add_one(self, job: BenchJob) -> None: ...

    async def add_batch(self, jobs: Sequence[BenchJob]) -> None: ...

    async def close(self) -> None: ...


def _chunks(scenario: Scenario) -> list[tuple[int, int]]:
    """[first, end) ranges a filling producer sends per call."""
    size = 1 if scenario.call_style == "single" else FILL_BATCH_JOBS
    return [(first, min(scenario.jobs, first + size)) for first in range(0, scenario.jobs, size)]


def _owed(scenario: Scenario, started_s: float) -> int:
    """How many jobs a paced producer should have sent by now."""
    assert scenario.rate_per_s is not None
    return min(scenario.jobs, int((time.monotonic() - started_s) * scenario.rate_per_s) + 1)


def _overran(scenario: Scenario, started_s: float) -> bool:
    """A paced producer that fell this far behind stops (see PACED_OVERRUN)."""
    assert scenario.duration_s is not None
    return time.monotonic() - started_s > scenario.duration_s * PACED_OVERRUN


def drive(scenario: Scenario, due: DueTimes, producer: SyncProducer) -> ProduceResult:
    """Adds the scenario's jobs: as fast as possible, or at its rate in ticks of TICK_MS."""
    start_ms, cpu_start_ms = now_ms(), cpu_ms()

    def send(first: int, end: int) -> None:
        if scenario.call_style == "single":
            for seq in range(first, end):
                producer.add_one(due.make(seq))
        else:
            producer.add_batch([due.make(seq) for seq in range(first, end)])

    sent = scenario.jobs
    if scenario.rate_per_s is None:
        for first, end in _chunks(scenario):
            send(first, end)
    else:
        sent, started_s = 0, time.monotonic()
        while sent < scenario.jobs and not _overran(scenario, started_s):
            owed = min(_owed(scenario, started_s), sent + FILL_BATCH_JOBS)  # a laggard rechecks
            if owed > sent:
                send(sent, owed)
                sent = owed
            else:
                time.sleep(TICK_MS / 1000)
    return ProduceResult(sent, start_ms, now_ms(), cpu_ms() - cpu_start_ms, None)


async def drive_async(scenario: Scenario, due: DueTimes, producer: AsyncProducer) -> ProduceResult:
    """drive() for asyncio clients."""
    start_ms, cpu_start_ms = now_ms(), cpu_ms()

    async def send(first: int, end: int) -> None:
        if scenario.call_style == "single":
            for seq in range(first, end):
                await producer.add_one(due.make(seq))
        else:
            await producer.add_batch([due.make(seq) for seq in range(first, end)])

    sent = scenario.jobs
    if scenario.rate_per_s is None:
        for first, end in _chunks(scenario):
            await send(first, end)
    else:
        sent, started_s = 0, time.monotonic()
        while sent < scenario.jobs and not _overran(scenario, started_s):
            owed = min(_owed(scenario, started_s), sent + FILL_BATCH_JOBS)
            if owed > sent:
                await send(sent, owed)
                sent = owed
            else:
                await asyncio.sleep(TICK_MS / 1000)
    return ProduceResult(sent, start_ms, now_ms(), cpu_ms() - cpu_start_ms, None)


async def gather_bounded(
    calls: Sequence[Callable[[], Awaitable[Any]]], concurrency: int = 50
) -> None:
    """Runs coroutine factories with at most ``concurrency`` in flight (async "batches")."""
    for first in range(0, len(calls), concurrency):
        await asyncio.gather(*(call() for call in calls[first : first + concurrency]))
