"""ConsumerPool: runs one topic's handler with a concurrency limit and a timeout.

Handlers run on worker threads (or on the pool's event loop when they are coroutines). Results
come back as Finished messages; the pool acks and fails them in batches (one round trip each),
extends the leases of long handlers, and tells the listener how many slots it freed.

A sync handler that overruns its timeout is failed (the job is retried on its schedule) and
counted in ``timeouts``. Python cannot kill a thread, so that thread keeps running and keeps its
slot until the handler returns; its late result is ignored. An async handler is cancelled.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pykka
import redis

from ._actor import RedelayActor
from ._backoff import Backoff
from ._messages import CheckRunning, Drain, Finished, Flush, Run, SetListener, SlotsFreed, Stats
from ._workers import EventLoopThread, Task, WorkerThreads
from .clock import Clock
from .errors import ErrorCode
from .job import Job, Retry
from .store import Lease, Store

log = logging.getLogger("actors.pool")

Handler = Callable[[Job], Any]


@dataclass(slots=True)
class _Running:
    lease: Lease
    started_ms: int
    lease_ms: int
    task: Task | None = None
    future: Future[Any] | None = None
    timed_out: bool = False


class ConsumerPool(RedelayActor):
    def __init__(
        self,
        store: Store,
        clock: Clock,
        topic: str,
        handler: Handler,
        *,
        concurrency: int,
        timeout_ms: int,
        supervisor: pykka.ActorRef[Any] | None = None,
        check_interval_ms: int = 100,
    ) -> None:
        super().__init__(f"pool:{topic}", clock, supervisor)
        self.store = store
        self.topic = topic
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.concurrency = concurrency
        self.timeout_ms = timeout_ms
        self.check_interval_ms = check_interval_ms
        self.listener: pykka.ActorRef[Any] | None = None
        self.running: dict[tuple[str, str], _Running] = {}
        self.acks: list[tuple[str, str, str, str]] = []
        self.fails: list[tuple[str, str, str, str, int | None]] = []
        self.slots_to_free = 0
        self.flush_pending = False
        self.check_pending = False
        self.drain_future: pykka.Future[int] | None = None
        self.drained = False
        self.backoff = Backoff()
        self.counts = {"started": 0, "acked": 0, "failed": 0, "timeouts": 0, "lost_leases": 0}
        self.threads: WorkerThreads | None = None
        self.loop: EventLoopThread | None = None

    def on_start(self) -> None:
        if self.is_async:
            self.loop = EventLoopThread(f"redelay-{self.topic}-loop")
        else:
            self.threads = WorkerThreads(self.concurrency, f"redelay-{self.topic}")

    def on_stop(self) -> None:
        super().on_stop()
        self._flush()
        if self.threads is not None:
            self.threads.shutdown()
        if self.loop is not None:
            self.loop.shutdown()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Run):
            self._run(message.leases)
        elif isinstance(message, Finished):
            self._finished(message)
        elif isinstance(message, Flush):
            self.flush_pending = False
            self._flush()
        elif isinstance(message, CheckRunning):
            self.check_pending = False
            self._check_running()
        elif isinstance(message, SetListener):
            self.listener = message.listener
        elif isinstance(message, Drain):
            self._drain(message.idle)
        elif isinstance(message, Stats):
            return {**self.counts, "running": len(self.running)}
        return None

    # -- starting handlers ------------------------------------------------------------------

    def _run(self, leases: tuple[Lease, ...]) -> None:
        now = self.clock.now_ms()
        for lease in leases:
            running = _Running(lease, now, max(1, lease.deadline_ms - now))
            self.running[lease.key] = running
            job = Job.from_lease(lease)
            if self.loop is not None:
                running.future = self.loop.submit(self._call_async(job))
            else:
                assert self.threads is not None
                running.task = self.threads.submit(partial(self._call_sync, job))
            self.counts["started"] += 1
        if self.drain_future is not None:
            self._release_not_started()
        self._ensure_check()

    def _call_sync(self, job: Job) -> None:
        """Runs on a worker thread."""
        self._report(job, *_outcome(self.handler, job))

    async def _call_async(self, job: Job) -> None:
        """Runs on the pool's event loop."""
        outcome: tuple[bool, str, int | None]
        try:
            result = await self.handler(job)
            outcome = (True, result if isinstance(result, str) else "", None)
        except Retry as retry:
            outcome = (False, retry.reason, retry.after_ms)
        except Exception as exc:
            outcome = (False, _describe(exc), None)
        self._report(job, *outcome)

    def _report(self, job: Job, ok: bool, detail: str, retry_after_ms: int | None) -> None:
        # If the pool was restarted meanwhile, the job's lease expires and a sweeper recovers it.
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(
                Finished((job.topic, job.id), job.token, ok, detail, retry_after_ms)
            )

    # -- results ----------------------------------------------------------------------------

    def _finished(self, message: Finished) -> None:
        running = self.running.get(message.key)
        if running is None or running.lease.token != message.token:
            return
        del self.running[message.key]
        self.slots_to_free += 1
        if not running.timed_out:
            topic, job_id = message.key
            if message.ok:
                self.acks.append((topic, job_id, message.token, message.detail))
            else:
                self.fails.append(
                    (topic, job_id, message.token, message.detail, message.retry_after_ms)
                )
        self._request_flush()

    def _request_flush(self) -> None:
        # Flush after the Finished messages already queued: they share one round trip.
        if not self.flush_pending:
            self.flush_pending = True
            self.actor_ref.tell(Flush())

    def _flush(self) -> None:
        try:
            if self.acks:
                codes = self.store.ack_many(self.acks)
                self.counts["acked"] += codes.count(ErrorCode.OK)
                self._count_lost(codes)
                self.acks = []
            if self.fails:
                results = self.store.fail_many(self.fails)
                self.counts["failed"] += len(self.fails)
                self._count_lost(results)
                self.fails = []
        except redis.RedisError as exc:
            wait_ms = self.backoff.next_ms()
            log.warning("pool %s: flush failed (%s); retrying in %d ms", self.topic, exc, wait_ms)
            self.flush_pending = True
            self.tell_later(wait_ms, Flush())
            return
        self.backoff.reset()
        if self.slots_to_free and self.listener is not None and self.drain_future is None:
            self.listener.tell(SlotsFreed(self.slots_to_free))
        self.slots_to_free = 0
        self._maybe_idle()

    def _count_lost(self, results: list[Any]) -> None:
        lost = sum(1 for r in results if r in (ErrorCode.STALE_TOKEN, ErrorCode.NOT_LEASED))
        if lost:
            self.counts["lost_leases"] += lost
            log.warning("pool %s: %d results refused, their leases were lost", self.topic, lost)

    # -- timeouts and lease extension -------------------------------------------------------

    def _ensure_check(self) -> None:
        if self.running and not self.check_pending:
            self.check_pending = True
            self.tell_later(self.check_interval_ms, CheckRunning())

    def _check_running(self) -> None:
        now = self.clock.now_ms()
        extend: list[tuple[str, str, str, int]] = []
        for key, running in self.running.items():
            if running.timed_out:
                continue
            if now - running.started_ms >= self.timeout_ms:
                running.timed_out = True
                self.counts["timeouts"] += 1
                reason = f"timeout after {self.timeout_ms / 1000:g}s"
                self.fails.append((key[0], key[1], running.lease.token, reason, None))
                if running.future is not None:
                    running.future.cancel()
            elif running.lease.deadline_ms - now <= running.lease_ms // 2:
                extend.append((key[0], key[1], running.lease.token, running.lease_ms))
        if extend:
            self._extend(extend, now)
        if self.fails:
            self._request_flush()
        self._ensure_check()

    def _extend(self, extend: list[tuple[str, str, str, int]], now: int) -> None:
        try:
            deadlines = self.store.extend_many(extend)
        except redis.RedisError as exc:
            log.warning("pool %s: extend failed (%s); next check retries", self.topic, exc)
            return
        for (topic, job_id, _, _), deadline in zip(extend, deadlines, strict=True):
            running = self.running.get((topic, job_id))
            if running is None:
                continue
            if deadline > 0:
                running.lease = _with_deadline(running.lease, deadline)
            else:
                self.counts["lost_leases"] += 1

    # -- shutdown ---------------------------------------------------------------------------

    def _drain(self, idle: pykka.Future[int]) -> None:
        self.drain_future = idle
        self._release_not_started()
        self._maybe_idle()

    def _release_not_started(self) -> None:
        withdrawn = [r for r in self.running.values() if r.task is not None and r.task.withdraw()]
        if not withdrawn:
            return
        for running in withdrawn:
            del self.running[running.lease.key]
        releases = [(r.lease.topic, r.lease.id, r.lease.token) for r in withdrawn]
        try:
            self.store.release_many(releases)
        except redis.RedisError as exc:
            log.warning("pool %s: release failed (%s); leases will expire", self.topic, exc)

    def _maybe_idle(self) -> None:
        busy = any(not r.timed_out for r in self.running.values())
        if self.drain_future is None or self.drained or busy or self.acks or self.fails:
            return
        self.drained = True
        self.drain_future.set(len(self.running))


def _outcome(handler: Handler, job: Job) -> tuple[bool, str, int | None]:
    try:
        result = handler(job)
    except Retry as retry:
        return False, retry.reason, retry.after_ms
    except Exception as exc:
        return False, _describe(exc), None
    return True, result if isinstance(result, str) else "", None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _with_deadline(lease: Lease, deadline_ms: int) -> Lease:
    return replace(lease, deadline_ms=deadline_ms)
