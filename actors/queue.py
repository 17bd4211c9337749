"""DelayQueue: the facade users embed.

A process that only adds jobs (a web app) uses add/cancel/get and never starts an actor.
A worker registers handlers and calls start(); stop() (or SIGTERM/SIGINT once
install_signal_handlers() was called) shuts down gracefully.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import pykka
import redis
from redis.cluster import RedisCluster

from actors import _rearm, producing
from actors import _validation as validation
from actors import schedules as _schedules
from actors._constants import (
    BATCH_MAX_JOBS,
    DEFAULT_LEASE_MS,
    DEFAULT_RETRY_SCHEDULE_MS,
    DEFAULT_STREAM_BATCH,
    LOST_MAX_MAX,
    PREFETCH_MAX,
    SHARDS_MAX,
)
from actors._signals import SignalFlag, wait_for_event
from actors._validation import IfExists
from actors.clock import Clock, RedisSyncedClock
from actors.errors import ConfigError, RedisFullError, ValidationError
from actors.job import Job
from actors.producing import AuditEvent
from actors.runtime._hooks import FailureHooks
from actors.runtime.gc_freeze import freeze_heap
from actors.runtime.messages import Stats
from actors.runtime.recorder import NO_RECORDER, Recorder
from actors.runtime.system import ActorSystem, HandlerSpec, SystemSettings
from actors.schedules import Misfire, ScheduleInfo
from actors.storage.store import Store, open_store
from actors.storage.topology import RedisClient, check_source, connect
from actors.tracing import StreamSpans, Tracing
from actors.values import (
    AuditRetention,
    Durability,
    JobInfo,
    JobPage,
    NewJob,
    TopicConfig,
    TopicLimits,
    WorkerInfo,
)

log = logging.getLogger("actors.queue")

# A handler takes the Job (sync or async; what it returns is kept with the ack when it is a
# str). Bound this way, mypy flags a decorated function that cannot take a Job.
HandlerFn = TypeVar("HandlerFn", bound=Callable[[Job], object])
# A failure hook takes the Job and the exception that failed its attempt.
HookFn = TypeVar("HookFn", bound=Callable[[Job, BaseException], object])


def checked_handler(
    topic: str,
    *,
    concurrency: int,
    timeout: float | timedelta,
    retry: Sequence[float | timedelta] | None,
    lease: float | timedelta | None,
    prefetch: int = 0,
    lost_max: int | None = None,
) -> Callable[[Any], HandlerSpec]:
    """Checks :meth:`DelayQueue.handler`'s options (errors name the field, in seconds) and
    returns what makes a handler function its HandlerSpec. Shared with actors.testing, so a
    test double registers handlers exactly as the queue does."""
    validation.topic(topic)
    validation.count(concurrency, "concurrency", 10_000)
    validation.count(prefetch, "prefetch", PREFETCH_MAX, minimum=0)
    timeout_ms = producing.lease_ms(timeout, "timeout")
    retry_ms = producing.schedule_ms(retry, "retry")
    lease_ms = None if lease is None else producing.lease_ms(lease, "lease")
    if lost_max is not None:
        validation.count(lost_max, "lost_max", LOST_MAX_MAX)

    def spec_for(fn: Any) -> HandlerSpec:
        if prefetch and inspect.iscoroutinefunction(fn):
            raise ValidationError(
                "prefetch",
                "is for sync handlers: an async handler starts every job it is given at once, "
                "so its concurrency already leases as much as it can run",
            )
        return HandlerSpec(
            topic, fn, concurrency, timeout_ms, retry_ms, lease_ms, prefetch, lost_max
        )

    return spec_for


class DelayQueue:
    def __init__(
        self,
        redis_source: str | redis.Redis | RedisCluster | None = None,
        namespace: str = "default",
        *,
        clock: Clock | None = None,
        data_dir: str | os.PathLike[str] = ".redelay",
        retention: AuditRetention | None = None,
        watchdog_interval_s: float = 60.0,
        sweep_interval_s: float = 1.0,
        consumer_name: str | None = None,
        default_retry: Sequence[float | timedelta] | None = None,
        default_lease: float | timedelta = DEFAULT_LEASE_MS / 1000,
        producer_only: bool = False,
        shards: int | None = None,
        durability: Durability | None = None,
        tracer_provider: Any = None,
    ) -> None:
        # First: a tracer_provider without opentelemetry installed is refused before any I/O,
        # as are bad names (the consumer's reaches audit fields, logs and a heartbeat key).
        self._tracing = Tracing(tracer_provider)
        self._namespace = validation.namespace(namespace)
        if consumer_name is not None:
            validation.consumer_name(consumer_name)
        self._embedded: Any = None
        if redis_source is None:
            from actors.server.embedded_default import start_embedded  # only needed without a URL

            # A local server this process starts (or finds running): not a remote one that may
            # be down, so it is started here and the clock and store are still made lazily.
            self._embedded = start_embedded(Path(data_dir))
        else:
            check_source(redis_source)  # a decoding client, a cluster on an old redis-py
        self._source = redis_source
        self._owns_clock = clock is None
        self._clock = clock
        retry_ms = producing.schedule_ms(default_retry, "default_retry")
        lease_ms = producing.lease_ms(default_lease, "default_lease")
        # Checked now, so bad settings fail at construction even though nothing connects yet.
        if shards is not None:
            validation.count(shards, "shards", SHARDS_MAX)
        self._store_options: dict[str, Any] = {
            "shards": shards,
            "durability": durability,
            "retention": retention,
            "default_topic_config": TopicConfig(retry_ms or DEFAULT_RETRY_SCHEDULE_MS, lease_ms),
        }
        self._client: RedisClient | None = None
        self._store: Store | None = None
        self._connect_lock = threading.Lock()
        self.producer_only = producer_only
        self.consumer = consumer_name or (
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self.settings = SystemSettings(
            consumer=self.consumer,
            watchdog_interval_ms=round(watchdog_interval_s * 1000),
            sweep_interval_ms=round(sweep_interval_s * 1000),
        )
        self._handlers: dict[str, HandlerSpec] = {}
        self._recorder: Recorder = NO_RECORDER  # actors.metrics.registry(queue) sets its own
        self._hooks = FailureHooks()
        self._system: ActorSystem | None = None
        self._stopped = threading.Event()
        self._stopped.set()
        self._stop_lock = threading.Lock()
        # Objects frozen by start(gc_freeze=True) (gc.get_freeze_count), else None.
        self.gc_frozen: int | None = None
        self._closed = False

    # -- connecting, on first use -----------------------------------------------------------
    # Nothing talks to Redis until a method needs it, so a web app can import the module that
    # makes its queue while Redis is down; the first call then raises redis-py's ConnectionError.

    @property
    def client(self) -> RedisClient:
        """The redis-py client (connects on first use: a URL is resolved to its deployment)."""
        if self._client is None:
            with self._connect_lock:
                if self._client is None:
                    if self._embedded is not None:
                        self._client = self._embedded.client()
                    else:  # a URL (one server, a cluster, Sentinel) or a client: see topology
                        self._client = connect(self._source)  # type: ignore[arg-type]
        return self._client

    @property
    def clock(self) -> Clock:
        """The clock (a RedisSyncedClock unless one was given, synced on first use)."""
        if self._clock is None:
            client = self.client
            with self._connect_lock:
                if self._clock is None:
                    # RedisSyncedClock only sends TIME, which a cluster client serves too.
                    self._clock = RedisSyncedClock(client)  # type: ignore[arg-type]
        return self._clock

    def _unconnected_now_ms(self) -> int:
        """The time to check jobs at before the first connection: the given clock's, or this
        machine's (the server's clock is not known yet). The jobs are built again, at the
        store's clock, once connected, so a due time is never taken from this reading."""
        if self._clock is not None:
            return self._clock.now_ms()
        return round(time.time() * 1000)

    @property
    def store(self) -> Store:
        """The namespace's Store (on first use checks or records its shard count)."""
        if self._store is None:
            client, clock = self.client, self.clock
            with self._connect_lock:
                if self._store is None:
                    self._store = open_store(client, self._namespace, clock, **self._store_options)
        return self._store

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def handled_topics(self) -> list[str]:
        """The topics this queue has a handler for, in registration order."""
        return list(self._handlers)

    # -- producing ------------------------------------------------------------------------

    def add(
        self,
        topic: str,
        job_id: str,
        body: Any = None,
        *,
        delay: float | timedelta | None = None,
        at: datetime | float | None = None,
        retry: Sequence[float | timedelta] | None = None,
        lease: float | timedelta | None = None,
        callback: str | None = None,
        replace: bool = False,
        if_exists: IfExists | None = None,
    ) -> str:
        """Adds one job, due after ``delay`` (seconds or timedelta) or ``at`` (datetime or
        epoch seconds; a past time means now), or now. An existing (topic, id): ``if_exists=
        "error"`` (the default) raises JobExistsError naming it, ``"replace"`` reschedules it
        (``replace=True`` is the same), ``"keep"`` leaves it as it is (deduplication). Returns
        "new" when the job did not exist, else the state it had (replace) or has (keep)."""
        mode = validation.if_exists(if_exists, replace)
        arguments: dict[str, Any] = {
            "delay": delay,
            "at": at,
            "retry": retry,
            "lease": lease,
            "callback": callback,
        }
        if self._store is None:  # a bad job raises before the first connection is tried
            producing.new_job(self._unconnected_now_ms(), topic, job_id, body, **arguments)
        job = producing.new_job(self.clock.now_ms(), topic, job_id, body, **arguments)
        if self._tracing.tracer is None:
            before = self.store.add(job, if_exists=mode)
        else:
            with self._tracing.sending([job]) as traced:
                before = self.store.add_many(traced, if_exists=mode)[0]
        self._note_rearms([job], [before], mode)
        return before

    def add_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        replace: bool = False,
        if_exists: IfExists | None = None,
    ) -> list[str]:
        """Adds many jobs in one round trip, all or nothing (per shard; with ``if_exists="keep"``
        the existing ones are left and the others added). Each mapping takes add()'s arguments
        by name: topic, id, body, delay, at, retry, lease, callback."""
        mode = validation.if_exists(if_exists, replace)
        if self._store is None:  # a bad job raises before the first connection is tried
            jobs = list(jobs) if isinstance(jobs, Iterable) else jobs  # an iterator reads once
            producing.new_jobs(self._unconnected_now_ms(), jobs)
        built = producing.new_jobs(self.clock.now_ms(), jobs)
        # Traced: one producer span per job (see actors.tracing).
        with self._tracing.sending(built) as traced:
            states = self.store.add_many(traced, if_exists=mode)
        self._note_rearms(built, states, mode)
        return states

    def add_stream(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        batch_size: int = DEFAULT_STREAM_BATCH,
        if_exists: IfExists | None = None,
    ) -> list[str]:
        """Adds any number of jobs (mappings as add_many takes them; a generator is read as it
        goes) in batches of ``batch_size``, sending each batch before the reply to the one
        before is read, so building a batch here overlaps Redis adding the last: on 2 cores
        1.6 to 1.9 times add_many's rate in a loop. Each batch is all or nothing; the
        stream stops at the first batch that fails (a bad job, an existing one under the
        default ``if_exists="error"``, a full Redis) and raises AddStreamError, whose
        ``results`` say what happened to each job taken so far. Returns per job what add_many
        returns. ``if_exists="keep"`` runs one batch at a time."""
        size = validation.count(batch_size, "batch_size", BATCH_MAX_JOBS)
        mode = validation.if_exists(if_exists, False)
        noted: list[NewJob] = []  # replace: the jobs, to note those that were re-armed

        # Traced: each job's producer span ends once Redis has answered for its batch.
        spans = StreamSpans(self._tracing) if self._tracing.tracer is not None else None

        def batches() -> Iterator[Sequence[NewJob]]:
            for built in producing.new_job_batches(jobs, size, self.clock.now_ms):
                if mode == "replace":
                    noted.extend(built)
                yield built if spans is None else spans.traced(built)

        if spans is None:
            states = self.store.add_stream(batches(), if_exists=mode)
        else:
            with spans.ending():
                states = self.store.add_stream(batches(), if_exists=mode, on_added=spans.added)
        self._note_rearms(noted, states, mode)
        return states

    @staticmethod
    def _note_rearms(jobs: Sequence[NewJob], states: Sequence[str], mode: str) -> None:
        """A job replaced while leased was re-armed (typically by its own handler): that run's
        result will be refused, quietly (actors._rearm)."""
        if mode != "replace":
            return
        for job, before in zip(jobs, states, strict=True):
            if before == "leased":
                _rearm.note(job.topic, job.id)

    # -- recurring schedules (docs/schedules.md) ---------------------------------------------

    def schedule(
        self,
        name: str,
        topic: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        body: Any = None,
        start_at: datetime | float | None = None,
        misfire: Misfire = "run_once",
    ) -> str:
        """Creates or updates (same ``name``) a recurring schedule of jobs on ``topic``: a cron
        expression evaluated in ``tz``, or ``every`` seconds (or a timedelta) from ``start_at``
        (epoch seconds or an aware datetime; default: one interval from now). One occurrence is
        pending at any time, whatever the number of processes. After downtime ``misfire``
        "run_once" runs one late occurrence, "skip" none. Returns "created", "updated" or
        "unchanged" (the same schedule was already stored: safe to call at every start)."""
        start_ms = None
        if start_at is not None:
            start_ms = round(producing.epoch_s(start_at, "start_at") * 1000)
        spec = _schedules.spec(
            name,
            topic,
            cron=cron,
            every=every,
            tz=tz,
            body=body,
            start_at_ms=start_ms,
            misfire_policy=misfire,
        )
        return self.store.schedule(spec)[0]

    def unschedule(self, name: str) -> bool:
        """Deletes a schedule; its pending occurrence goes too unless it already started.
        True when the schedule existed."""
        return self.store.unschedule(name)

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule of the namespace, by name, with its next occurrence."""
        return self.store.schedules()

    def cancel(self, topic: str, job_id: str) -> bool:
        """True when the job existed. A leased job is marked: its current run ends it."""
        validation.topic(topic)  # before the first connection
        validation.job_id(job_id)
        return self.store.cancel(topic, job_id) != "missing"

    def get(self, topic: str, job_id: str) -> JobInfo | None:
        validation.topic(topic)  # before the first connection
        validation.job_id(job_id)
        return self.store.get(topic, job_id)

    def history(self, topic: str, job_id: str) -> list[AuditEvent]:
        """The job's audit events, oldest first, through the per-job index: O(its own events),
        whatever the length of the stream. Events retention trimmed are gone."""
        producing.check_job_name(topic, job_id)
        return producing.audit_events(self.store.job_entries(topic, job_id), topic, job_id)

    def stats(self) -> dict[str, dict[str, int]]:
        """Jobs per topic and state, and ``paused`` (1 when the topic is paused, else 0)."""
        return self.store.stats(with_paused=True)

    # -- topic gates ----------------------------------------------------------------------

    def pause(self, topic: str) -> bool:
        """Pauses ``topic`` for every process of the namespace: no listener leases its jobs
        until ``resume`` (jobs already leased run to their end; due jobs still become ready and
        wait). Audited as a ``paused`` event. False when it was paused already."""
        return self.store.pause(topic, True)

    def resume(self, topic: str) -> bool:
        """Resumes a paused ``topic``; its listeners are woken at once. Audited as a
        ``resumed`` event. False when it was not paused."""
        return self.store.pause(topic, False)

    def limit(
        self,
        topic: str,
        *,
        rate: tuple[int, float] | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        """Limits ``topic`` for every process of the namespace, enforced by the lease script
        with the Redis server's clock: at most ``rate[0]`` jobs leased per ``rate[1]`` seconds,
        at most ``max_in_flight`` leased at once. A job held back stays ready and counts no
        attempt. Replaces the topic's limits; ``limit(topic)`` lifts them."""
        self.store.set_limits(topic, TopicLimits(rate, max_in_flight))

    def limits(self, topic: str) -> TopicLimits:
        """``topic``'s limits as ``limit`` stored them."""
        return self.store.limits(topic)

    def dead(self, topic: str | None = None, limit: int = 100) -> list[JobInfo]:
        return self.store.dead(topic, limit)

    def jobs(
        self, topic: str, state: str, *, after: str | None = None, limit: int = 100
    ) -> JobPage:
        """One page of ``topic``'s jobs in ``state`` ("delayed", "ready", "leased" or "dead"):
        delayed by due time, ready in list order, leased by deadline, dead by time of death.
        Pass the page's ``next_after`` as ``after`` for the next one; None means it was the last."""
        return self.store.jobs(topic, state, after=after, limit=limit)

    def workers(self) -> list[WorkerInfo]:
        """The namespace's live workers, by name, from their heartbeats (written every
        5 s by each started queue; one that stops beating drops out within 15 s)."""
        return self.store.workers()

    def requeue_dead(self, topic: str | None = None, job_id: str | None = None) -> int:
        """Gives dead jobs a fresh start (attempts reset, due now): one job, every dead job of a
        topic, or every dead job. Returns how many were requeued."""
        return self._each_dead_batch(self.store.requeue_dead, topic, job_id)

    def purge_dead(
        self, topic: str | None = None, job_id: str | None = None, *, all: bool = False
    ) -> int:
        """Deletes dead jobs, chosen like requeue_dead; every dead job of the namespace only
        with ``all=True`` (as ``redelay dead purge --all``), never for a call that forgot its
        topic. Returns how many were deleted."""
        if topic is None and job_id is None and not all:
            raise ValidationError(
                "topic",
                "purge_dead() without a topic would delete every dead job of the namespace",
                "a topic (and an id), or all=True",
            )
        if all and (topic is not None or job_id is not None):
            raise ValidationError("all", "all=True takes no topic or id", "all=True alone")
        return self._each_dead_batch(self.store.purge_dead, topic, job_id)

    def _each_dead_batch(
        self,
        change: Callable[[list[tuple[str, str]]], int],
        topic: str | None,
        job_id: str | None,
    ) -> int:
        if job_id is not None:
            if topic is None:
                raise ValidationError("topic", "is needed with an id")
            return change([(topic, job_id)])
        if topic is not None:
            validation.topic(topic)
        # The dead set is read in pages and changed in batches of at most BATCH_MAX_JOBS, so any
        # number of dead jobs is handled without one huge script call.
        keys = list(self.store.dead_keys(topic, BATCH_MAX_JOBS))
        return sum(
            change(keys[n : n + BATCH_MAX_JOBS]) for n in range(0, len(keys), BATCH_MAX_JOBS)
        )

    # -- consuming ------------------------------------------------------------------------

    def handler(
        self,
        topic: str,
        *,
        concurrency: int = 8,
        timeout: float | timedelta = 30.0,
        retry: Sequence[float | timedelta] | None = None,
        lease: float | timedelta | None = None,
        prefetch: int = 0,
        lost_max: int | None = None,
    ) -> Callable[[HandlerFn], HandlerFn]:
        """Registers ``fn(job)`` (a function or coroutine function taking a :class:`Job`) for a
        topic; a topic has one handler, so registering a second raises ConfigError. Return =
        ack (a returned str is kept in the acked event); an exception = failed attempt;
        ``raise Retry(after=...)`` picks the next delay. ``retry`` and ``lease`` become the
        topic's stored defaults when the queue starts. ``prefetch`` (sync handlers): jobs leased
        beyond ``concurrency`` that wait in this process for a free thread, so each lease round
        trip carries more jobs; they keep their leases extended while they wait and are released
        at shutdown. ``lost_max`` (default 3): how many times a job's worker may be lost while
        it runs alone before the job is quarantined (dead); see docs/lifecycle.md, lost leases."""
        validation.topic(topic)
        self._refuse_second_handler(topic)
        spec_for = checked_handler(
            topic,
            concurrency=concurrency,
            timeout=timeout,
            retry=retry,
            lease=lease,
            prefetch=prefetch,
            lost_max=lost_max,
        )

        def register(fn: HandlerFn) -> HandlerFn:
            if self._system is not None:
                raise ConfigError("register handlers before start()")
            self._refuse_second_handler(topic)  # two decorators made before either was applied
            self._handlers[topic] = spec_for(fn)
            return fn

        return register

    def on_failure(self, fn: HookFn) -> HookFn:
        """Registers ``fn(job, exc)``, called after every failed attempt of this process's
        handlers once the failure is stored (``exc``: what the handler raised, a ``Retry``, or a
        ``TimeoutError`` for a timeout). Usable as a decorator, before or after start(). Hooks run
        on a thread of their own per topic; one that raises is logged and ignored."""
        self._hooks.add_on_failure(fn)
        return fn

    def on_dead(self, fn: HookFn) -> HookFn:
        """Registers ``fn(job, exc)``, called when a failed attempt made its job dead (after the
        on_failure hooks). As :meth:`on_failure` otherwise."""
        self._hooks.add_on_dead(fn)
        return fn

    def _refuse_second_handler(self, topic: str) -> None:
        existing = self._handlers.get(topic)
        if existing is not None:
            name = getattr(existing.handler, "__qualname__", repr(existing.handler))
            raise ConfigError(
                f"topic {topic!r} already has a handler ({name}); a topic has one handler"
            )

    def start(self, *, gc_freeze: bool = False) -> DelayQueue:
        """Starts this process's actors (carrier, watchdog, sweeper, a listener and a pool per
        handler). Returns self.

        ``gc_freeze``: once they run, collect and then freeze every object the process holds
        (``gc.freeze``), so Python's full collections skip them from then on. For a process
        that is mostly a worker: it cuts the collector's pauses, which are the steady lateness
        tail, and the objects alive now are never checked for cycles again (see
        docs/scaling.md#lateness-and-pythons-garbage-collector)."""
        if self.producer_only:
            raise ConfigError("this DelayQueue is producer_only: it never starts actors")
        if self._system is not None:
            raise ConfigError("already started")
        for spec in self._handlers.values():
            try:
                self.store.configure_topic(
                    spec.topic, spec.topic_config(self.store.default_topic_config)
                )
            except RedisFullError as exc:
                # A full Redis is drained by workers: start, with the defaults stored before
                # (or the built-in ones) for this topic's leases and retries, until memory frees.
                log.warning("%s; starting anyway", exc)
        self._system = ActorSystem(
            self.store,
            self.clock,
            list(self._handlers.values()),
            self.settings,
            self._recorder,
            hooks=self._hooks,
            tracing=self._tracing if self._tracing.tracer is not None else None,
        )
        self._stopped.clear()
        try:
            self._system.start()
        except BaseException:
            self._system = None
            self._stopped.set()
            raise
        if gc_freeze:
            self.gc_frozen = freeze_heap()
        return self

    def stop(self, grace: float = 20.0) -> dict[str, Any]:
        """Stops gracefully within ``grace`` + one second, whatever Redis and the network do, and
        loses no job: fetching stops at once, jobs fetched but not started go back to ready,
        running handlers get ``grace`` seconds, and jobs still running after that keep their
        lease (a sweeper recovers them). An actor still waiting on Redis at the end (a partition)
        is cut off from it: nothing of the worker acts after stop() returns. Then connections are
        closed. Returns a report: ``seconds`` taken, ``stopped``, ``not_stopped`` (cut off),
        ``abandoned`` (cut off, its thread still alive), ``still_running`` (pools with handlers
        still running); docs/operations.md#network-faults. A second call, e.g. from a second
        signal, waits for the first."""
        with self._stop_lock:
            started = time.monotonic()
            report: dict[str, Any] = {}
            if self._system is not None:
                report = self._system.stop(grace)
                self._system = None
            self.close()
            if report:
                report["seconds"] = round(time.monotonic() - started, 3)  # the close included
            self._stopped.set()
            return report

    def close(self) -> None:
        """Closes connections, the clock and the embedded server (stop() calls this). A started
        queue is stopped first, with stop()'s default grace."""
        if self._system is not None:
            # Closing under running actors would leave them half alive: the clock's timers
            # gone, the notifier subscribing again on a closed client, jobs held by handlers.
            self.stop()
            return
        if self._closed:
            return
        self._closed = True
        # What was never made (nothing was called) is not made now just to be closed.
        if self._owns_clock and self._clock is not None:
            self._clock.close()
        if self._client is not None:
            self._client.close()
        elif isinstance(self._source, redis.Redis | RedisCluster):
            self._source.close()  # a client given to the queue is closed by it, as documented
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until stop() has finished (e.g. from a signal). True when stopped."""
        return wait_for_event(self._stopped, timeout)

    def install_signal_handlers(self, grace: float = 20.0) -> None:
        """SIGTERM and SIGINT stop the queue gracefully (call from the main thread); wait()
        returns once stopped. The handler only records the signal (a handler that takes a lock
        can deadlock the main thread it interrupts: actors._signals); a daemon thread,
        ``redelay-stop``, waits for it and runs the stop."""
        signals = SignalFlag()

        def stop_on_signal() -> None:
            signals.wait()
            log.info("signal %d: stopping (grace %.1fs)", signals.received[0], grace)
            self.stop(grace)

        threading.Thread(target=stop_on_signal, name="redelay-stop", daemon=True).start()
        signal.signal(signal.SIGTERM, signals.handler)
        signal.signal(signal.SIGINT, signals.handler)

    def health(self) -> dict[str, Any]:
        """Per supervised unit ("watchdog", "carrier", "sweeper", "topic:<name>"): alive,
        restarts, last error, when it was last restarted; a topic also ``timed_out_slots``
        (slots held by handlers that ran over their timeout) and ``timed_out_since_ms`` (when the
        oldest of them did, or None); the carrier also "redis": ``full`` (over ``maxmemory``:
        adds are refused, delivery goes on), ``used_memory``, ``maxmemory``. Empty when not
        started."""
        if self._system is None:
            return {}
        report = self._system.health()
        if "carrier" in report:  # the carrier is what watches Redis's memory
            try:
                report["carrier"]["redis"] = self.store.memory()
            except redis.RedisError as exc:
                report["carrier"]["redis"] = {"full": None, "error": repr(exc)}
        for name, ref in self._system.refs().items():
            if not name.startswith("pool:"):
                continue
            unit = report.get(f"topic:{name.removeprefix('pool:')}")
            if unit is None:
                continue
            stats: dict[str, Any] = {}
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):  # alive tells
                stats = ref.ask(Stats(), block=True, timeout=5)
            unit["timed_out_slots"] = stats.get("timed_out_running")
            unit["timed_out_since_ms"] = stats.get("timed_out_since_ms")
        return report

    def actor_stats(self) -> dict[str, Any]:
        return {} if self._system is None else self._system.stats()

    @property
    def running(self) -> bool:
        return self._system is not None

    def __enter__(self) -> DelayQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
