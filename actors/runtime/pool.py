"""ConsumerPool: runs one topic's handler with a concurrency limit and a timeout.

Handlers run on worker threads, or on the pool's own event loop when they are coroutines.
Results come back through a queue the pool drains on one Flush message per burst (not one
message per job: see ``_report``); the pool acks and fails them in batches (one round trip each
for everything that finished meanwhile), extends the leases of long handlers so no other consumer
is handed their job, and tells the listener how many slots it freed.

A sync handler that overruns its timeout is failed (the job is retried on its schedule) and
counted in ``timeouts``. Python cannot kill a thread, so that thread keeps running and keeps its
slot until the handler returns; its late result is ignored. An async handler is cancelled. Both
are logged when they overrun, and while timed-out handlers hold slots the pool says so every
``stuck_report_ms``.

Every failed attempt is logged once its fail is stored (WARNING, or ERROR when the job is dead,
with the traceback) and handed to the queue's failure hooks on the pool's hook thread.

With tracing (actors/tracing.py) each attempt gets a consumer span, started here when the handler
is handed its thread, current while the handler runs, and ended here once the attempt's outcome
is stored, so the span says whether the job was acked, retried or dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import traceback
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pykka
import redis

from actors import _rearm
from actors._constants import (
    BATCH_MAX_JOBS,
    DEFAULT_LEASE_MS,
    DELAY_MAX_MS,
    LEASE_MS_MIN,
)
from actors.clock import Clock
from actors.errors import ErrorCode
from actors.runtime import _refusals
from actors.runtime._actor import RedelayActor
from actors.runtime._backoff import Backoff, outage_of
from actors.runtime._handlers import Handler, Outcome, call_async, call_sync
from actors.runtime._hooks import FailureHooks, call_hooks
from actors.runtime._pipelines import AckLeasePipelines
from actors.runtime._refusals import Op
from actors.runtime._workers import EventLoopThread, Task, WorkerThreads
from actors.runtime.messages import (
    CheckRunning,
    Drain,
    Flush,
    Refill,
    Run,
    SetListener,
    SlotsFreed,
    Stats,
)
from actors.runtime.recorder import NO_RECORDER, Recorder
from actors.storage.store import Store
from actors.tracing import Span, Tracing, finish
from actors.values import Lease

log = logging.getLogger("actors.pool")


@dataclass(slots=True)
class _Running:
    lease: Lease
    # When its handler began; None while a prefetched job waits for a thread (no timeout runs).
    started_ms: int | None
    lease_ms: int  # how far each extension pushes the deadline
    # When to extend, on this process's clock: once half the lease is gone, counted from a local
    # reading taken when it was leased or last extended. Not its deadline less this clock's
    # now: the deadline is on Redis's clock, and a clock off it let leases expire under running
    # handlers (behind) or extended them at every check (ahead).
    extend_at_ms: int = 0
    task: Task | None = None
    future: Future[Any] | None = None
    timed_out_ms: int | None = None  # when it overran its timeout
    span: Span | None = None  # its consumer span, when traced; None once ended

    @property
    def timed_out(self) -> bool:
        return self.timed_out_ms is not None


@dataclass(frozen=True, slots=True)
class _Failure:
    lease: Lease
    reason: str
    retry_after_ms: int | None
    error: BaseException | None
    traceback: str
    span: Span | None = None
    timed_out: bool = False

    @property
    def row(self) -> tuple[str, str, str, str, int | None]:
        """What Store.fail_many takes."""
        lease = self.lease
        return (lease.topic, lease.id, lease.token, self.reason, self.retry_after_ms)


class ConsumerPool(RedelayActor):
    def __init__(
        self,
        store: Store,
        clock: Clock,
        topic: str,
        handler: Handler,
        *,
        concurrency: int,
        prefetch: int = 0,
        timeout_ms: int,
        lease_ms: int = DEFAULT_LEASE_MS,
        supervisor: pykka.ActorRef[Any] | None = None,
        check_interval_ms: int = 100,
        recorder: Recorder = NO_RECORDER,
        hooks: FailureHooks | None = None,
        stuck_report_ms: int = 60_000,
        tracing: Tracing | None = None,
    ) -> None:
        super().__init__(f"pool:{topic}", clock, supervisor)
        self.store = store
        self.topic = topic
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.concurrency = concurrency
        # Jobs leased beyond the threads wait in WorkerThreads' queue: their timeout starts when
        # a thread takes them (_call_sync), their leases are extended meanwhile (_check_running)
        # and they are released at a drain or stop like any job not started (_release_not_started).
        self.prefetch = prefetch
        self.timeout_ms = timeout_ms
        self.lease_ms = lease_ms  # the topic's lease, for jobs that set none of their own
        self.check_interval_ms = check_interval_ms
        self.hooks = hooks
        self.stuck_report_ms = stuck_report_ms
        self.stuck_reported_ms: int | None = None
        self.listener: pykka.ActorRef[Any] | None = None
        self.running: dict[tuple[str, str], _Running] = {}
        self.acks: list[tuple[str, str, str, str]] = []
        self.ack_spans: list[Span | None] = []  # beside acks: each ack's consumer span
        self.fails: list[_Failure] = []
        self.slots_to_free = 0
        self.flush_pending = False
        # What handlers returned, appended by their threads (deque.append is atomic) and taken by
        # the pool's own thread on a Flush; results_told: a Flush for them is in the mailbox.
        self.results: deque[tuple[Lease, Outcome]] = deque()
        self.results_told = False
        self.refill: Refill | None = None  # lease freed slots with the acks (see Run, _flush)
        # Acks and leases sent while refilling, replies not read yet (actors/runtime/_pipelines).
        self.in_flight = AckLeasePipelines(store, topic, concurrency + prefetch)
        self.check_pending = False
        self.drain_future: pykka.Future[int] | None = None
        self.drained = False
        self.outage = outage_of(store.client)
        self.backoff = Backoff(outage=self.outage, name=f"pool {topic}")
        self.counts = {
            "started": 0,
            "acked": 0,
            "failed": 0,
            "timeouts": 0,
            "lost_leases": 0,
            "rearmed": 0,  # refused because the handler re-armed its own job (actors/_rearm.py)
            "applied_before": 0,  # refused when sent again: the first send ran, its reply was lost
            "gone": 0,  # refused: Redis no longer has the job
            "released": 0,
            "extended": 0,
            "flushes": 0,
            "refills": 0,  # acks that leased the next jobs in their round trip
            "refilled": 0,  # jobs those leased
        }
        self.threads: WorkerThreads | None = None
        self.loop: EventLoopThread | None = None
        self.metrics = recorder.topic(topic)
        self.hook_thread: WorkerThreads | None = None
        self.tracing = tracing

    def started(self) -> None:
        if self.hooks is not None:
            self.hook_thread = WorkerThreads(1, f"redelay-{self.topic}-hooks")
        if self.is_async:
            self.loop = EventLoopThread(f"redelay-{self.topic}-loop")
        else:
            self.threads = WorkerThreads(self.concurrency, f"redelay-{self.topic}")

    def on_stop(self) -> None:
        super().on_stop()
        self.refill = None  # the last acks lease nothing: no thread would run it
        self._release_in_flight()
        self._release_not_started()
        self._take_results()  # handlers that returned before the stop are acked, not expired
        self._flush()
        self._close_workers()

    def on_failure(self, *args: Any) -> None:
        with contextlib.suppress(Exception):
            self._release_in_flight()
        with contextlib.suppress(Exception):
            self._release_not_started()
        self._close_workers()
        super().on_failure(*args)

    def _close_workers(self) -> None:
        self.metrics.busy(0)
        for running in self.running.values():  # still running at stop: their leases expire
            finish(running.span, "stopped")
            running.span = None
        if self.threads is not None:
            self.threads.shutdown()
        if self.loop is not None:
            self.loop.shutdown()
        if self.hook_thread is not None:
            self.hook_thread.shutdown()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Run):
            self.refill = message.refill
            self._run(message.leases)
        elif isinstance(message, Flush):
            self.flush_pending = False
            self._take_results()
            self._flush()
        elif isinstance(message, CheckRunning):
            self.check_pending = False
            self._check_running()
        elif isinstance(message, SetListener):
            self.listener = message.listener
            self._free_slots()  # jobs may have finished before the listener was known
        elif isinstance(message, Drain):
            self._drain(message.idle)
        elif isinstance(message, Stats):
            stuck = [r.timed_out_ms for r in self.running.values() if r.timed_out_ms is not None]
            waiting = sum(1 for r in self.running.values() if r.started_ms is None)
            return {
                **self.counts,
                "running": len(self.running) - waiting,
                "prefetched": waiting,
                "timed_out_running": len(stuck),
                "timed_out_since_ms": min(stuck, default=None),
                "most_in_flight": self.in_flight.most,
            }
        return None

    # -- starting handlers ------------------------------------------------------------------

    def _run(self, leases: tuple[Lease, ...]) -> None:
        now = self.clock.now_ms()
        spans = None if self.tracing is None else self.tracing.process_batch(leases)
        running_jobs, metrics, default_lease_ms = self.running, self.metrics, self.lease_ms
        # Without prefetch a job's thread is free when it is leased: its timeout starts now, as
        # it always has. With prefetch it may wait, and its thread starts the timeout.
        started_ms = None if self.prefetch else now
        for n, lease in enumerate(leases):
            lease_ms = max(LEASE_MS_MIN, lease.lease_ms or default_lease_ms)
            span = None if spans is None else spans[n]
            running = _Running(lease, started_ms, lease_ms, now + _half_left(lease_ms), span=span)
            running_jobs[lease.key] = running
            if self.loop is not None:
                running.started_ms = now
                running.future = self.loop.submit(self._call_async(lease, span))
            else:
                assert self.threads is not None
                running.task = self.threads.submit(partial(self._call_sync, running, span))
            metrics.started(now - lease.due_ms)
        self.counts["started"] += len(leases)
        metrics.jobs("leased", len(leases))
        self.metrics.busy(self._handlers_busy())
        if self.drain_future is not None:
            self._release_not_started()
        self._ensure_check()

    def _handlers_busy(self) -> int:
        # Prefetched jobs wait only while every thread is taken, so the handlers running are
        # the jobs held, up to the threads (the gauge must not count jobs waiting for one).
        return min(len(self.running), self.concurrency)

    def _call_sync(self, running: _Running, span: Span | None) -> None:
        """Runs on a worker thread."""
        lease = running.lease
        if running.started_ms is None:  # prefetched: its timeout starts now (one int, atomic)
            running.started_ms = self.clock.now_ms()
        self._report(lease, call_sync(self.handler, lease, span))

    async def _call_async(self, lease: Lease, span: Span | None) -> None:
        """Runs on the pool's event loop."""
        try:
            outcome = await call_async(self.handler, lease, span)
        except asyncio.CancelledError:
            # Cancelled because it timed out: the report only frees its slot.
            self._report(lease, Outcome(False, "cancelled"))
            raise
        self._report(lease, outcome)

    def _report(self, lease: Lease, outcome: Outcome) -> None:
        """Runs on the handler's thread or the event loop. One Flush message per burst, not a
        message per job: a handler that returns while a Flush is still in the mailbox only
        appends. No result is left behind: the flag is cleared before the queue is drained
        (``_take_results``) and read here after the append, so either that drain sees this
        result or this call tells a new Flush. If the pool was stopped or restarted meanwhile,
        the job keeps its lease until it expires and a sweeper recovers it."""
        self.results.append((lease, outcome))
        if not self.results_told:
            self.results_told = True  # two threads may both tell: the second Flush finds nothing
            with contextlib.suppress(pykka.ActorDeadError):
                self.actor_ref.tell(Flush())

    # -- results ----------------------------------------------------------------------------

    def _take_results(self) -> None:
        self.results_told = False  # before draining: see _report
        results = self.results
        if not results:
            return
        now = self.clock.now_ms()  # one reading for the burst: they were taken together
        while results:
            lease, outcome = results.popleft()
            self._finished(lease.key, lease.token, outcome, now)
        self.metrics.busy(self._handlers_busy())

    def _finished(self, key: tuple[str, str], token: str, o: Outcome, now: int) -> None:
        running = self.running.get(key)
        if running is None or running.lease.token != token:
            return
        del self.running[key]
        self.slots_to_free += 1
        if running.timed_out_ms is not None:
            log.info(
                "pool %s: job %s attempt %d: the handler that timed out returned %s late; "
                "its slot is free again",
                self.topic,
                running.lease.id,
                running.lease.attempt,
                _seconds(now - running.timed_out_ms),
            )
        else:
            started_ms = now if running.started_ms is None else running.started_ms
            self.metrics.finished("ok" if o.ok else "error", now - started_ms)
            if o.ok:
                self.acks.append((key[0], key[1], token, o.detail))
                self.ack_spans.append(running.span)
            else:
                after_ms = o.retry_after_ms
                if after_ms is not None:  # Retry checks its delay; this keeps a batch sendable
                    after_ms = min(max(0, after_ms), DELAY_MAX_MS)
                self.fails.append(
                    _Failure(running.lease, o.detail, after_ms, o.error, o.traceback, running.span)
                )

    def _request_flush(self) -> None:
        # Flush after the messages already queued: what they report shares one round trip.
        if not self.flush_pending:
            self.flush_pending = True
            self.actor_ref.tell(Flush())

    def _flush(self) -> None:
        leases: list[Lease] = []
        try:
            sent = self._send_results()
            if self.in_flight and (self.in_flight.full or not sent):
                # The oldest replies: Redis runs the calls sent after them meanwhile, and this
                # pool starts their jobs while it does (see _send_ack_and_refill). Otherwise
                # they are read at the next Flush, after the results that come meanwhile are
                # sent with the next lease, or at once when none came. (Reading them as soon as
                # they began to arrive cost a tenth of the throughput and no lateness gain.)
                leases, error = self._read_in_flight()
                if self.refill is None:
                    self._free_slots()  # refilling stopped: what the lease did not fill is free
            else:
                error = None
            if self.in_flight or self.acks:
                self._request_flush()  # the replies on their way, acks that wait for a lease
            if error is not None:
                raise error
        except redis.RedisError as exc:
            wait_ms = self.backoff.redis_failed(exc, "flush")
            self.flush_pending = True
            self.tell_later(wait_ms, Flush())
            return
        finally:
            if leases:
                self._run(tuple(leases))
        self.backoff.redis_ok()
        self._maybe_idle()

    def _send_results(self) -> bool:
        """Acks (with the lease of the slots they free, while refilling) and fails what the
        handlers returned; True when an ack-and-lease went out without its replies."""
        sent = False
        refill = self._refill_limit()
        if not refill:
            # The slots are free as soon as the handlers returned: tell the listener first, so
            # its next lease and these acks are on the wire at the same time.
            self._free_slots()
        chunk = self.in_flight.chunk
        while self.acks:
            batch = self.acks[:BATCH_MAX_JOBS]
            spans = self.ack_spans[: len(batch)]
            if refill:
                if self.in_flight.full or (self.in_flight and len(self.acks) < chunk):
                    # They go with a later lease, once a reply is read: pipelines of a few acks
                    # each cost Redis and this process more per job than they overlap (with two
                    # worker processes on one core, 36k jobs/s against 48k).
                    break
                batch = batch[:chunk]
                spans = spans[: len(batch)]
                # The round's last pipeline leases every freed slot, the others one job per ack.
                last = len(batch) == len(self.acks)
                limit = min(self.slots_to_free, refill if last else len(batch))
                if limit > 0:
                    self._send_ack_and_refill(batch, spans, limit)
                    sent = True
                else:  # every freed slot is set aside for leases on their way
                    self._count_acks(batch, spans, self.store.ack_many(batch))
                if last:
                    refill = 0
            else:
                self._count_acks(batch, spans, self.store.ack_many(batch))
            del self.acks[: len(batch)]
            del self.ack_spans[: len(batch)]
        while self.fails:
            fails = self.fails[:BATCH_MAX_JOBS]
            results = self.store.fail_many([f.row for f in fails], [f.traceback for f in fails])
            self.counts["flushes"] += 1
            self.counts["failed"] += len(fails)
            rows = [(f.lease.topic, f.lease.id, f.lease.token) for f in fails]
            results, refused = self._settle(results, rows, "fail")
            self._count_failed(results, refused)
            del self.fails[: len(fails)]
            for failure, result in zip(fails, results, strict=True):
                self._failed(failure, result)
        return sent

    def _count_acks(
        self, batch: list[tuple[str, str, str, str]], spans: list[Span | None], codes: list[Any]
    ) -> None:
        self.counts["flushes"] += 1
        if codes.count(ErrorCode.OK) != len(codes):
            codes, _ = self._settle(codes, [(a[0], a[1], a[2]) for a in batch], "ack")
        acked = codes.count(ErrorCode.OK)
        self.counts["acked"] += acked
        self.metrics.jobs("acked", acked)
        if self.tracing is not None:
            for span, code in zip(spans, codes, strict=True):
                finish(span, "ack" if code == ErrorCode.OK else "lost")

    def _refill_limit(self) -> int:
        """How many jobs to lease with the acks: the freed slots, while the listener's last Run
        asked for refills (it never does for a namespace of several shards, whose lease takes two
        round trips anyway); 0 when there are no acks to carry the lease, or when draining."""
        refill = self.refill
        if refill is None or not self.acks or self.drain_future is not None:
            return 0
        return min(self.slots_to_free, refill.batch_max)

    def _send_ack_and_refill(
        self, batch: list[tuple[str, str, str, str]], spans: list[Span | None], limit: int
    ) -> None:
        """Sends ``batch``'s acks and a lease of up to ``limit`` jobs for the slots they freed,
        in one pipeline, without waiting for the replies (actors/runtime/_pipelines.py): the
        pool reads the oldest pipeline's replies (``_read_in_flight``) and starts its jobs while
        Redis runs the newer ones. The slots are set aside until the replies say how many the
        lease filled."""
        assert self.refill is not None
        self.in_flight.send(batch, spans, limit, self.refill.consumer)
        self.slots_to_free -= limit

    def _read_in_flight(self) -> tuple[list[Lease], redis.RedisError | None]:
        """The jobs leased by the oldest pipeline on its way, not started yet, and the error its
        acks or its connection met. The leases come back even when the acks failed, so no leased
        job waits for its lease to expire; acks that did not run are kept to be sent again.
        Refilling stops when the lease failed, came back short or was held back by the topic's
        gate: the slots it did not fill go to the listener, whose next lease meets the gate (or
        the empty list, and waits for a notice) as usual."""
        if not self.in_flight:
            return [], None
        flight = self.in_flight.oldest()
        try:
            codes, leased = flight.sent.result()
        except redis.RedisError as exc:
            codes, leased = exc, exc
        leases: list[Lease] = []
        if isinstance(leased, Exception):
            log.debug("pool %s: the lease with the acks failed (%s)", self.topic, leased)
            self.refill = None
        else:
            leases = leased.leases
            if len(leases) < flight.limit or leased.wait_ms != 0:
                self.refill = None
        self.slots_to_free += flight.limit - len(leases)
        if leases:
            self.counts["refills"] += 1
            self.counts["refilled"] += len(leases)
        if isinstance(codes, Exception):
            self.acks[:0] = flight.acks
            self.ack_spans[:0] = flight.spans
            if isinstance(codes, redis.RedisError):
                return leases, codes
            return leases, redis.RedisError(str(codes))
        self._count_acks(flight.acks, flight.spans, codes)
        return leases, None

    def _release_in_flight(self) -> None:
        """At a stop: reads the replies on their way and gives the jobs they leased back to the
        ready list, as jobs not started (no attempt counted)."""
        leases: list[Lease] = []
        while self.in_flight:
            leased, error = self._read_in_flight()
            leases += leased
            if error is not None:  # the acks are kept: the stop's flush sends them again
                log.warning("pool %s: acks failed at stop (%s)", self.topic, error)
        self._give_back(leases)

    def _give_back(self, leases: list[Lease]) -> None:
        """Releases jobs not started to the front of their ready list, no attempt counted. Each
        release goes to the front, so the last one given ends up first: they are given back
        newest first to keep the order they were leased in."""
        if not leases:
            return
        releases = [(x.topic, x.id, x.token) for x in reversed(leases)]
        try:
            self.store.release_many(releases)
            self.counts["released"] += len(releases)
            self.metrics.jobs("released", len(releases))
        except redis.RedisError as exc:
            # The release may have run and only its reply been lost: say what holds either way.
            log.warning(
                "pool %s: releasing %d jobs failed (%s); any not released run again when their"
                " leases expire",
                self.topic,
                len(releases),
                exc,
            )

    def _failed(self, failure: _Failure, result: str | ErrorCode) -> None:
        """Logs a stored failed attempt and hands it to the hooks. A refused one (its lease was
        lost) is not this worker's failure to report: _settle logged it."""
        finish(failure.span, _span_outcome(failure, result), failure.error)
        if isinstance(result, ErrorCode):
            return
        lease, dead = failure.lease, result == "dead"
        if dead:
            then = "the job is dead"
        elif result == "cancelled":
            then = "its cancel had been requested, so it is removed"
        else:
            then = f"retried ({result})"
        error = failure.error
        raised = error is not None and error.__traceback__ is not None and failure.traceback
        # A timeout raised nothing: its traceback is the hung handler's stack, logged as text.
        stack = "" if raised or not failure.traceback else "\n" + failure.traceback.rstrip()
        log.log(
            logging.ERROR if dead else logging.WARNING,
            "pool %s: job %s attempt %d failed (%s); %s%s",
            self.topic,
            lease.id,
            lease.attempt,
            failure.reason,
            then,
            stack,
            exc_info=error if raised else None,
        )
        if self.hook_thread is not None and self.hooks is not None:
            hooks = self.hooks.chosen(dead)
            error = failure.error or RuntimeError(failure.reason)
            if hooks:
                self.hook_thread.submit(partial(call_hooks, hooks, lease, error))

    def _free_slots(self) -> None:
        if self.slots_to_free and self.listener is not None and self.drain_future is None:
            with contextlib.suppress(pykka.ActorDeadError):  # stopping with its unit
                self.listener.tell(SlotsFreed(self.slots_to_free))
            self.slots_to_free = 0

    def _settle(
        self, results: list[Any], rows: list[tuple[str, str, str]], op: Op
    ) -> tuple[list[Any], int]:
        """Sorts out and reports the results Redis refused (rows: topic, id, token). Returns
        ``results`` with each refusal that this lease's own earlier send caused replaced by
        what that send got, and how many stay refused.

        Refused on purpose: a job its own handler re-armed (replaced while leased). Already
        applied: the first send ran but its reply was lost with the connection, so the pool
        sent it again. Gone: Redis no longer has the job. Only the rest lost their leases (the
        job will run again or already runs elsewhere) and are warned of. The refused jobs'
        histories tell (actors/runtime/_refusals.py): one round trip, only when some were
        refused and not re-armed. A STALE_TOKEN can be an applied result too: the job acked by
        the first send, then added again under its id and leased elsewhere."""
        refused = [
            j for j, r in enumerate(results) if r in (ErrorCode.STALE_TOKEN, ErrorCode.NOT_LEASED)
        ]
        if not refused:
            return results, 0
        rearmed = {j for j in refused if _rearm.take(rows[j][0], rows[j][1])}
        unsure = [j for j in refused if j not in rearmed]
        settled, applied, gone = list(results), 0, 0
        try:
            histories = self.store.jobs_entries([(rows[j][0], rows[j][1]) for j in unsure])
        except redis.RedisError as exc:  # cannot tell: warned of as lost, as they may be
            log.debug("pool %s: refused jobs' histories not read (%s)", self.topic, exc)
            unsure, histories = [], []
        for j, entries in zip(unsure, histories, strict=True):
            if _refusals.gone(entries):
                # The history can also be gone while the job stays (the stream trimmed hard,
                # as while Redis is full): only a job that is not there either is gone.
                if self._job_absent(rows[j][0], rows[j][1]):
                    gone += 1
            elif (reply := _refusals.applied_reply(entries, rows[j][2], op)) is not None:
                settled[j] = reply
                applied += 1
        lost = len(refused) - len(rearmed) - applied - gone
        self.counts["rearmed"] += len(rearmed)
        self.counts["applied_before"] += applied
        self.counts["gone"] += gone
        if applied:
            log.debug(
                "pool %s: %d results were already applied: sent again after their replies were "
                "lost with the connection",
                self.topic,
                applied,
            )
        if gone:
            log.info(
                "pool %s: %d results refused for jobs Redis no longer has (removed meanwhile, or "
                "lost with Redis's data); nothing of them is left to run",
                self.topic,
                gone,
            )
        if lost:
            self.counts["lost_leases"] += lost
            self.metrics.jobs("rejected", lost)
            log.warning("pool %s: %d results refused, their leases were lost", self.topic, lost)
        return settled, len(refused) - applied

    def _job_absent(self, topic: str, job_id: str) -> bool:
        try:
            return self.store.get(topic, job_id) is None
        except redis.RedisError:  # cannot tell: warned of as lost, as it may be
            return False

    def _count_failed(self, results: list[str | ErrorCode], refused: int) -> None:
        # Each accepted failure is one of: retried ("failed"), dead, or ended by its cancel.
        dead = results.count("dead")
        cancelled = results.count("cancelled")
        self.metrics.jobs("dead", dead)
        self.metrics.jobs("cancelled", cancelled)
        self.metrics.jobs("failed", len(results) - dead - cancelled - refused)

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
            started_ms = running.started_ms
            if started_ms is not None and now - started_ms >= self.timeout_ms:
                running.timed_out_ms = now
                self.counts["timeouts"] += 1
                self.metrics.finished("timeout", now - started_ms)
                reason = f"timeout after {self.timeout_ms / 1000:g}s"
                stack = self._stack_of(running)
                error = TimeoutError(
                    f"the handler ran over its timeout of {_seconds(self.timeout_ms)}"
                )
                self.fails.append(
                    _Failure(running.lease, reason, None, error, stack, running.span, True)
                )
                running.span = None  # the timeout's fail ends it
                log.warning(
                    "pool %s: job %s attempt %d: the handler ran over its timeout of %s; %s",
                    self.topic,
                    key[1],
                    running.lease.attempt,
                    _seconds(self.timeout_ms),
                    "it is cancelled"
                    if running.future is not None
                    else "its thread keeps its slot until it returns",
                )
                if running.future is not None:
                    running.future.cancel()
            elif now >= running.extend_at_ms:
                extend.append((key[0], key[1], running.lease.token, running.lease_ms))
        if extend:
            self._extend(extend)
        if self.fails:
            self._request_flush()
        self._report_stuck(now)
        self._ensure_check()

    def _stack_of(self, running: _Running) -> str:
        """Where a sync handler is when it times out, as a traceback to keep with the attempt:
        a hung handler's stack names what it waits for."""
        thread_id = None if running.task is None else running.task.thread_id
        frame = None if thread_id is None else sys._current_frames().get(thread_id)
        if frame is None:
            return ""
        stack = "".join(traceback.format_stack(frame))
        overran = f"the handler ran over its timeout of {_seconds(self.timeout_ms)}"
        return (
            "Stack of the handler when it timed out (most recent call last):\n"
            f"{stack}TimeoutError: {overran}\n"
        )

    def _report_stuck(self, now: int) -> None:
        """While handlers that timed out still hold slots, says so every stuck_report_ms: the
        topic runs on fewer slots (none, when all are held) and nothing else would show it."""
        stuck = [r.timed_out_ms for r in self.running.values() if r.timed_out_ms is not None]
        if not stuck:
            self.stuck_reported_ms = None
            return
        last = self.stuck_reported_ms
        if last is not None and now - last < self.stuck_report_ms:
            return
        self.stuck_reported_ms = now
        log.warning(
            "%d of %d slots of topic %s held by timed-out handlers since %s",
            len(stuck),
            self.concurrency,
            self.topic,
            datetime.fromtimestamp(min(stuck) / 1000, tz=UTC).isoformat(timespec="seconds"),
        )

    def _extend(self, extend: list[tuple[str, str, str, int]]) -> None:
        for start in range(0, len(extend), BATCH_MAX_JOBS):
            batch = extend[start : start + BATCH_MAX_JOBS]
            before = self.clock.now_ms()  # the new deadline counts from later than this
            try:
                deadlines = self.store.extend_many(batch)
            except redis.RedisError as exc:
                self.outage.failed(f"pool {self.topic} extend", exc, self.check_interval_ms)
                return
            for (topic, job_id, _, _), deadline in zip(batch, deadlines, strict=True):
                running = self.running.get((topic, job_id))
                if running is None:
                    continue
                if deadline > 0:
                    running.lease = replace(running.lease, deadline_ms=deadline)
                    running.extend_at_ms = before + _half_left(running.lease_ms)
                    self.counts["extended"] += 1
                    self.metrics.jobs("extended", 1)
                else:
                    self.counts["lost_leases"] += 1
                    self.metrics.jobs("rejected", 1)

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
            finish(running.span, "released")
            running.span = None
        self.metrics.busy(self._handlers_busy())
        self._give_back([r.lease for r in withdrawn])

    def _maybe_idle(self) -> None:
        busy = any(not r.timed_out for r in self.running.values())
        if self.drain_future is None or self.drained or busy or self.acks or self.fails:
            return
        if self.in_flight:  # the Flush that reads them looks again
            return
        self.drained = True
        self.drain_future.set(len(self.running))


def _span_outcome(failure: _Failure, result: str | ErrorCode) -> str:
    """A failed attempt's outcome on its span: how its stored fail ended it."""
    if isinstance(result, ErrorCode):
        return "lost"
    if result in ("dead", "cancelled"):
        return result
    return "timeout" if failure.timed_out else "retry"


def _half_left(lease_ms: int) -> int:
    """How long after a lease (or an extension) starts only half of it is left."""
    return lease_ms - lease_ms // 2


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g}s"
