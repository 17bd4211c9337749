"""Prometheus metrics for a queue: what this process's pools do, and the jobs Redis holds.

Needs the ``metrics`` extra (``pip install 'redelay[metrics]'``, i.e. prometheus-client). A
queue records nothing until :func:`registry` gives it a recorder, so a process that never asks
for metrics pays a no-op call per job and nothing more.

Two kinds of numbers, told apart in docs/operations.md ("Monitoring"):

- this process's own: job events counted as its pools see them, handler lateness and duration,
  busy handlers (kept in memory, lost when the process ends, summed across processes);
- the namespace's, read from Redis at scrape time: jobs per topic and state from the counters
  the scripts keep (every process reports the same numbers: aggregate them with ``max``), and
  the restarts of this process's actors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from actors.errors import ConfigError
from actors.lifecycle import LIVE_STATES_IN_ORDER
from actors.runtime.recorder import JOB_EVENTS, OUTCOMES, TopicRecorder

try:
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        generate_latest,
        start_http_server,
    )
    from prometheus_client import make_asgi_app as _make_asgi_app
    from prometheus_client import make_wsgi_app as _make_wsgi_app
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
except ModuleNotFoundError as exc:  # pragma: no cover - the message is the point
    raise ModuleNotFoundError(
        "actors.metrics needs prometheus-client: pip install 'redelay[metrics]'", name=exc.name
    ) from exc

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from actors.queue import DelayQueue

log = logging.getLogger("actors.metrics")

# Lateness in a delay queue runs from milliseconds (a healthy worker) to hours (a backlog).
LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
DURATION_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
STATES = tuple(state.value for state in LIVE_STATES_IN_ORDER)


class _ProcessMetrics:
    """The metrics this process's pools record, registered on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # Not "redelay_jobs_total": OpenMetrics names a counter family without its _total, and
        # that family would clash with the redelay_jobs gauge in the same exposition.
        self.events = Counter(
            "redelay_job_events",
            "Job transitions this process made, by the audit event they wrote.",
            ["topic", "event"],
            registry=registry,
        )
        self.lateness = Histogram(
            "redelay_lateness_seconds",
            "How long after its due time a job's handler started.",
            ["topic"],
            buckets=LATENESS_BUCKETS_S,
            registry=registry,
        )
        self.duration = Histogram(
            "redelay_handler_duration_seconds",
            "How long handlers ran, by outcome (ok, error, timeout).",
            ["topic", "outcome"],
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.busy = Gauge(
            "redelay_handlers_busy",
            "Handlers running now in this process (timed-out threads included).",
            ["topic"],
            registry=registry,
        )


class _TopicMetrics:
    """One topic's children, bound once, so a job costs no label lookup."""

    def __init__(self, metrics: _ProcessMetrics, topic: str) -> None:
        self._events = {event: metrics.events.labels(topic, event) for event in JOB_EVENTS}
        self._lateness = metrics.lateness.labels(topic)
        self._durations = {o: metrics.duration.labels(topic, o) for o in OUTCOMES}
        self._busy = metrics.busy.labels(topic)

    def jobs(self, event: str, count: int) -> None:
        if count:
            self._events[event].inc(count)

    def started(self, lateness_ms: int) -> None:
        self._lateness.observe(max(0, lateness_ms) / 1000)

    def finished(self, outcome: str, duration_ms: int) -> None:
        self._durations[outcome].observe(max(0, duration_ms) / 1000)

    def busy(self, handlers: int) -> None:
        self._busy.set(handlers)


class PrometheusRecorder:
    """The recorder :func:`registry` installs in a queue (the runtime's ``Recorder``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._metrics = _ProcessMetrics(registry)

    def topic(self, topic: str) -> TopicRecorder:
        return _TopicMetrics(self._metrics, topic)


class RedisCollector:
    """Read at scrape time: jobs per topic and state (``Store.stats``: the counters the scripts
    keep, for every process's jobs), whether that read worked, and, given ``health``, the
    restarts of this process's supervised actors."""

    def __init__(
        self,
        stats: Callable[[], Mapping[str, Mapping[str, int]]],
        health: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self._stats = stats
        self._health = health

    def collect(self) -> Iterable[Metric]:
        jobs = GaugeMetricFamily(
            "redelay_jobs", "Jobs in the namespace by topic and state.", labels=["topic", "state"]
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
            up.add_metric([], 1)
        yield jobs
        yield up
        if self._health is not None:
            restarts = CounterMetricFamily(
                "redelay_actor_restarts",
                "Restarts of this process's supervised actors by the watchdog.",
                labels=["actor"],
            )
            for actor, report in sorted(self._health().items()):
                restarts.add_metric([actor], report.get("restarts", 0))
            yield restarts


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
    made.register(RedisCollector(queue.stats, queue.health))
    queue._recorder = PrometheusRecorder(made)
    return made


def redis_registry(stats: Callable[[], Mapping[str, Mapping[str, int]]]) -> CollectorRegistry:
    """Only the Redis-read gauges, from ``stats`` (e.g. ``store.stats``; ``redelay metrics``)."""
    made = CollectorRegistry()
    made.register(RedisCollector(stats))
    return made


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
