"""Prometheus metrics for a queue: what this process's pools do, and the jobs Redis holds.

Needs prometheus-client: the ``metrics`` extra (``pip install '.[metrics]'`` in a checkout).
A queue records nothing until :func:`registry` gives it a recorder, so a process that never asks
for metrics pays a no-op call per job and nothing more.

Two kinds of numbers, told apart in docs/operations.md ("Monitoring"):

- this process's own: job events counted as its pools see them, how long after its due time a
  handler started (the start delay) and how long it ran, busy handlers (kept in memory, lost
  when the process ends, summed across processes);
- the namespace's, read from Redis at scrape time: jobs per topic and state from the counters
  the scripts keep (every process reports the same numbers: aggregate them with ``max``), how
  long the earliest due job has waited to be made ready (redelay's own delivery lateness), and
  the restarts of this process's actors.

The two delays are apart on purpose: a paused or rate-limited topic, or one whose handlers are
all busy, has jobs that start late although redelay delivered them on time.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import redis

from actors.errors import ConfigError
from actors.lifecycle import LIVE_STATES_IN_ORDER
from actors.runtime.recorder import JOB_EVENTS, OUTCOMES, TopicRecorder

try:
    from prometheus_client import CollectorRegistry, generate_latest, start_http_server
    from prometheus_client import make_asgi_app as _make_asgi_app
    from prometheus_client import make_wsgi_app as _make_wsgi_app
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
except ModuleNotFoundError as exc:  # pragma: no cover - the message is the point
    raise ModuleNotFoundError(
        "actors.metrics needs prometheus-client (the metrics extra): pip install prometheus-client",
        name=exc.name,
    ) from exc

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from actors.queue import DelayQueue
    from actors.storage.store import Store
    from actors.values import TopicLimits

log = logging.getLogger("actors.metrics")

# Lateness in a delay queue runs from milliseconds (a healthy worker) to hours (a backlog).
LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
DURATION_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
STATES = tuple(state.value for state in LIVE_STATES_IN_ORDER)


class _Histogram:
    """Bucket counts in plain ints: prometheus-client's Histogram takes two locks per
    observation, which the pool's hot path cannot afford; this costs one bisect and two adds.
    Only its pool's thread writes it; a scrape reads a copy."""

    __slots__ = ("bounds_ms", "counts", "les", "sum_ms")

    def __init__(self, bounds_s: tuple[float, ...]) -> None:
        self.bounds_ms = [bound * 1000 for bound in bounds_s]
        self.les = [repr(float(bound)) for bound in bounds_s] + ["+Inf"]  # as Prometheus writes
        self.counts = [0] * (len(bounds_s) + 1)  # the last one: above every bound (+Inf)
        self.sum_ms = 0

    def observe(self, ms: int) -> None:
        ms = max(0, ms)
        self.counts[bisect_left(self.bounds_ms, ms)] += 1  # bucket "le" bound: ms <= bound
        self.sum_ms += ms

    def add_to(self, family: HistogramMetricFamily, labels: list[str]) -> None:
        counts, sum_ms = list(self.counts), self.sum_ms
        cumulative = list(accumulate(counts))
        family.add_metric(labels, list(zip(self.les, cumulative, strict=True)), sum_ms / 1000)


class _TopicMetrics:
    """One topic's numbers in this process. Called on its pool's thread only (the hot path): no
    locks and no label lookups; the scrape turns them into metric families."""

    def __init__(self) -> None:
        self.events = dict.fromkeys(JOB_EVENTS, 0)
        self.lateness = _Histogram(LATENESS_BUCKETS_S)
        self.durations = {outcome: _Histogram(DURATION_BUCKETS_S) for outcome in OUTCOMES}
        self.handlers_busy = 0

    def jobs(self, event: str, count: int) -> None:
        self.events[event] += count

    def started(self, lateness_ms: int) -> None:
        self.lateness.observe(lateness_ms)

    def finished(self, outcome: str, duration_ms: int) -> None:
        self.durations[outcome].observe(duration_ms)

    def busy(self, handlers: int) -> None:
        self.handlers_busy = handlers


class PrometheusRecorder:
    """The recorder :func:`registry` installs in a queue (the runtime's ``Recorder``), and the
    collector that exposes what it recorded."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # One per topic for the process's life: a pool the watchdog rebuilds keeps counting on.
        self._topics: dict[str, _TopicMetrics] = {}

    def topic(self, topic: str) -> TopicRecorder:
        return self._topics.setdefault(topic, _TopicMetrics())

    def collect(self) -> Iterable[Metric]:
        events = CounterMetricFamily(
            "redelay_job_events",
            "Job transitions this process made, by the audit event they wrote.",
            labels=["topic", "event"],
        )
        lateness = HistogramMetricFamily(
            "redelay_start_delay_seconds",
            "How long after its due time a job's handler started: delivery lateness plus the "
            "time it waited ready (a pause, a rate limit, busy handlers).",
            labels=["topic"],
        )
        durations = HistogramMetricFamily(
            "redelay_handler_duration_seconds",
            "How long handlers ran, by outcome (ok, error, timeout).",
            labels=["topic", "outcome"],
        )
        busy = GaugeMetricFamily(
            "redelay_handlers_busy",
            "Handlers running now in this process (timed-out threads included).",
            labels=["topic"],
        )
        for topic, metrics in sorted(self._topics.items()):
            for event, count in metrics.events.items():
                events.add_metric([topic, event], count)
            metrics.lateness.add_to(lateness, [topic])
            for outcome, histogram in metrics.durations.items():
                histogram.add_to(durations, [topic, outcome])
            busy.add_metric([topic], metrics.handlers_busy)
        yield from (events, lateness, durations, busy)


def _limit_gauges(read: Callable[[], Mapping[str, TopicLimits]]) -> Iterable[Metric]:
    limit = GaugeMetricFamily(
        "redelay_topic_limit",
        "A limited topic's limits (redelay limit): rate_per_second (jobs leased per second "
        "at most) and max_in_flight; absent for a limit that is not set.",
        labels=["topic", "limit"],
    )
    try:
        limits = read()
    except redis.RedisError as exc:
        log.warning("metrics: reading the topics' limits failed: %s", exc)
        limits = {}
    for topic, each in sorted(limits.items()):
        if each.rate is not None:
            limit.add_metric([topic, "rate_per_second"], each.rate[0] / each.rate[1])
        if each.max_in_flight is not None:
            limit.add_metric([topic, "max_in_flight"], each.max_in_flight)
    yield limit


class RedisCollector:
    """Read at scrape time: jobs per topic and state (``Store.stats``: the counters the scripts
    keep, for every process's jobs), whether that read worked, and, given ``health``, the
    restarts of this process's supervised actors."""

    def __init__(
        self,
        stats: Callable[[], Mapping[str, Mapping[str, int]]],
        health: Callable[[], Mapping[str, Any]] | None = None,
        memory: Callable[[], Mapping[str, Any]] | None = None,
        overdue: Callable[[], float] | None = None,
        limits: Callable[[], Mapping[str, TopicLimits]] | None = None,
    ) -> None:
        self._stats = stats
        self._health = health
        self._memory = memory
        self._overdue = overdue
        self._limits = limits

    def collect(self) -> Iterable[Metric]:
        jobs = GaugeMetricFamily(
            "redelay_jobs", "Jobs in the namespace by topic and state.", labels=["topic", "state"]
        )
        paused = GaugeMetricFamily(
            "redelay_topic_paused", "1 while the topic is paused, else 0.", labels=["topic"]
        )
        up = GaugeMetricFamily(
            "redelay_redis_up", "1 when this scrape read the job counts from Redis, else 0."
        )
        try:
            counts = self._stats()
        except redis.RedisError as exc:
            # A failed read must not fail the scrape: this process's own numbers still count.
            log.warning("metrics: reading the job counts failed: %s", exc)
            up.add_metric([], 0)
        else:
            for topic, states in sorted(counts.items()):
                for state in STATES:
                    jobs.add_metric([topic, state], states.get(state, 0))
                paused.add_metric([topic], states.get("paused", 0))
            up.add_metric([], 1)
        yield jobs
        yield paused
        yield up
        if self._memory is not None:
            full = GaugeMetricFamily(
                "redelay_redis_full",
                "1 when Redis is at its maxmemory, within 1% or over (adds are refused, delivery "
                "goes on), else 0.",
            )
            try:
                full.add_metric([], 1 if self._memory()["full"] else 0)
            except redis.RedisError as exc:
                log.warning("metrics: reading Redis's memory failed: %s", exc)
            yield full
        if self._overdue is not None:
            overdue = GaugeMetricFamily(
                "redelay_overdue_seconds",
                "How long the earliest due job has waited to be made ready (0 when none is "
                "overdue): redelay's own delivery lateness, whatever pauses and rate limits do.",
            )
            try:
                overdue.add_metric([], self._overdue())
            except redis.RedisError as exc:
                log.warning("metrics: reading the earliest due time failed: %s", exc)
            yield overdue
        if self._limits is not None:
            yield from _limit_gauges(self._limits)
        if self._health is not None:
            restarts = CounterMetricFamily(
                "redelay_actor_restarts",
                "Restarts of this process's supervised actors by the watchdog.",
                labels=["actor"],
            )
            for actor, report in sorted(self._health().items()):
                restarts.add_metric([actor], report.get("restarts", 0))
            yield restarts


class OutboxCollector:
    """The transactional outbox (actors/outbox): read at scrape time from the database, rows
    waiting and the oldest one's age (the lag the next relay pass will have); given ``relay``
    (a running relay's ``stats``), what this process's relay did."""

    def __init__(
        self,
        status: Callable[[], tuple[int, int | None]],
        relay: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self._status, self._relay = status, relay

    def collect(self) -> Iterable[Metric]:
        rows = GaugeMetricFamily("redelay_outbox_rows", "Outbox rows the relay has yet to move.")
        oldest = GaugeMetricFamily(
            "redelay_outbox_oldest_seconds",
            "How long the oldest outbox row has waited (0 when none): its job is that late.",
        )
        up = GaugeMetricFamily(
            "redelay_outbox_up", "1 when this scrape read the outbox from the database, else 0."
        )
        try:
            depth, oldest_ms = self._status()
        except Exception as exc:  # the database is the application's: any driver's error
            log.warning("metrics: reading the outbox failed: %s", exc)
            up.add_metric([], 0)
        else:
            rows.add_metric([], depth)
            oldest.add_metric([], (oldest_ms or 0) / 1000)
            up.add_metric([], 1)
        yield rows
        yield oldest
        yield up
        if self._relay is not None:
            stats = self._relay()
            relayed = CounterMetricFamily(
                "redelay_outbox_relayed",
                "Outbox writes this process's relay applied to Redis.",
            )
            relayed.add_metric([], stats.get("applied", 0))
            yield relayed
            lag = GaugeMetricFamily(
                "redelay_outbox_relay_lag_seconds",
                "How long the oldest row of this relay's last pass had waited when applied.",
            )
            lag.add_metric([], stats.get("lag_ms", 0) / 1000)
            yield lag


def registry(queue: DelayQueue) -> CollectorRegistry:
    """The queue's metrics registry, made on the first call (the same one after that).

    Call it before ``queue.start()``: the pools take their recorder when they are built. A
    producer-only queue gets the Redis-read gauges only.
    """
    recorder = queue._recorder  # actors.metrics is the one module that sets it
    if isinstance(recorder, PrometheusRecorder):
        return recorder.registry
    if queue.running:
        raise ConfigError("call actors.metrics.registry(queue) before queue.start()")
    made = CollectorRegistry()
    recorder = PrometheusRecorder(made)
    made.register(recorder)
    made.register(
        RedisCollector(
            queue.stats,
            queue.health,
            queue.store.memory,
            lambda: overdue_s(queue.store),
            lambda: queue.store.all_limits(),
        )
    )
    queue._recorder = recorder
    return made


def redis_registry(
    stats: Callable[[], Mapping[str, Mapping[str, int]]],
    memory: Callable[[], Mapping[str, Any]] | None = None,
    overdue: Callable[[], float] | None = None,
    limits: Callable[[], Mapping[str, TopicLimits]] | None = None,
) -> CollectorRegistry:
    """Only the Redis-read gauges, from ``stats`` (e.g. ``store.stats``; ``redelay metrics``),
    ``memory`` (``store.memory``), ``overdue`` (:func:`overdue_s`) and ``limits``
    (``store.all_limits``)."""
    made = CollectorRegistry()
    made.register(RedisCollector(stats, memory=memory, overdue=overdue, limits=limits))
    return made


def overdue_s(store: Store) -> float:
    """How long the earliest job still delayed has been due, in seconds (0 when none is): jobs
    become ready when due, whether their topic is paused or limited, so only a carrier that is
    behind (or no worker at all) makes this grow."""
    due_ms = store.earliest_due_ms()
    return 0.0 if due_ms is None else max(0, store.clock.now_ms() - due_ms) / 1000


def exposition(source: CollectorRegistry) -> str:
    """The registry's metrics in Prometheus's text format (version 0.0.4)."""
    return generate_latest(source).decode()


def samples(source: CollectorRegistry) -> list[dict[str, Any]]:
    """Every sample of the registry as {name, labels, value} (``redelay metrics --json``)."""
    return [
        {"name": s.name, "labels": dict(s.labels), "value": s.value}
        for family in source.collect()
        for s in family.samples
    ]


def make_wsgi_app(queue: DelayQueue) -> Callable[..., Any]:
    """A WSGI app serving the queue's metrics, to mount in a service (e.g. at /metrics)."""
    return _make_wsgi_app(registry(queue))


def make_asgi_app(queue: DelayQueue) -> Callable[..., Any]:
    """An ASGI app serving the queue's metrics, to mount in a service (e.g. at /metrics)."""
    return _make_asgi_app(registry(queue))


@dataclass
class MetricsServer:
    """A running metrics endpoint (see :func:`serve`)."""

    host: str
    port: int
    _server: WSGIServer

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve(queue: DelayQueue, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serves the queue's metrics over HTTP on a daemon thread; port 0 picks a free one.

    Binds 127.0.0.1 unless told otherwise: the numbers name topics, which are not for everyone.
    """
    server, _thread = start_http_server(port, addr=host, registry=registry(queue))
    return MetricsServer(host, server.server_address[1], server)
