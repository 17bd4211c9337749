"""Prometheus metrics (actors/metrics.py): a worker's /metrics over HTTP, `redelay metrics`, and
the registry a service mounts, each parsed with prometheus-client's own parsers and held to what
the test made happen and to ``stats``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
import redis
from _wait import wait_until
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from actors import DelayQueue
from actors.clock import FakeClock, SystemClock
from actors.errors import ConfigError
from actors.metrics import (
    PrometheusRecorder,
    exposition,
    make_asgi_app,
    make_wsgi_app,
    overdue_s,
    redis_registry,
    registry,
    serve,
)
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

NS = "metricstest"
ROOT = Path(__file__).resolve().parents[2]
REDELAY = (sys.executable, "-m", "actors.cli")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a text exposition, by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(url: str, accept: str | None = None) -> str:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        text: str = response.read().decode()
    return text


def jobs_gauges(samples: Samples) -> dict[str, dict[str, int]]:
    """The redelay_jobs and redelay_topic_paused gauges, shaped like ``DelayQueue.stats()``."""
    found: dict[str, dict[str, int]] = {}
    for (name, labels), number in samples.items():
        if name == "redelay_jobs":
            label = dict(labels)
            found.setdefault(label["topic"], {})[label["state"]] = int(number)
        elif name == "redelay_topic_paused":
            found.setdefault(dict(labels)["topic"], {})["paused"] = int(number)
    return found


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    if "REDELAY_REDIS_SERVER" in os.environ:
        env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
    return env


def redelay(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*REDELAY, *args],
        capture_output=True,
        text=True,
        env=base_env(),
        cwd=cwd,
        timeout=60,
    )


@pytest.fixture
def store(redis_client: redis.Redis) -> Store:
    return Store(redis_client, NS, SystemClock())


# -- a worker's /metrics ----------------------------------------------------------------------

WORKER_MODULE = """
from actors import DelayQueue

queue = DelayQueue({url!r}, {ns!r})

@queue.handler("mail.send", concurrency=4)
def send(job):
    return "sent"

@queue.handler("mail.bounce", concurrency=4, retry=[0.05, 0.05])
def bounce(job):
    raise RuntimeError("mailbox full")
"""


@pytest.fixture
def worker(redis_server: RedisProcess, redis_client: redis.Redis, tmp_path: Path) -> Iterator[Any]:
    (tmp_path / "metricsworker.py").write_text(WORKER_MODULE.format(url=redis_server.url, ns=NS))
    process = subprocess.Popen(
        [*REDELAY, "worker", "metricsworker:queue", "--metrics-port", "0", "--json"],
        cwd=tmp_path,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_a_worker_serves_its_metrics_over_http(worker: Any, store: Store) -> None:
    assert worker.stdout is not None
    started = json.loads(worker.stdout.readline())
    assert started["event"] == "started"
    url = started["metrics"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    acked, dead = 7, 3
    store.add_many([store.new_job("mail.send", f"ok-{n}", {}) for n in range(acked)])
    store.add_many([store.new_job("mail.bounce", f"bad-{n}", {}) for n in range(dead)])

    def events(topic: str, event: str) -> float:
        return value(parse(scrape(url)), "redelay_job_events_total", topic=topic, event=event)

    wait_until(
        lambda: events("mail.send", "acked") == acked and events("mail.bounce", "dead") == dead,
        "the acked and dead counters to reach the jobs' count",
    )
    samples = parse(scrape(url))

    def send(event: str) -> float:
        return value(samples, "redelay_job_events_total", topic="mail.send", event=event)

    def bounce(event: str) -> float:
        return value(samples, "redelay_job_events_total", topic="mail.bounce", event=event)

    assert (send("leased"), send("acked"), send("failed"), send("dead")) == (acked, acked, 0, 0)
    # Two retries each: two failed attempts, then the third makes the job dead.
    assert (bounce("leased"), bounce("acked"), bounce("failed"), bounce("dead")) == (
        3 * dead,
        0,
        2 * dead,
        dead,
    )
    assert value(samples, "redelay_start_delay_seconds_count", topic="mail.send") == acked
    assert value(samples, "redelay_start_delay_seconds_count", topic="mail.bounce") == 3 * dead
    duration = "redelay_handler_duration_seconds_count"
    assert value(samples, duration, topic="mail.send", outcome="ok") == acked
    assert value(samples, duration, topic="mail.bounce", outcome="error") == 3 * dead
    assert value(samples, duration, topic="mail.bounce", outcome="ok") == 0
    assert value(samples, "redelay_handlers_busy", topic="mail.send") == 0
    # Read from Redis at scrape time: the same numbers stats gives.
    assert value(samples, "redelay_redis_up") == 1
    assert jobs_gauges(samples) == store.stats(with_paused=True)
    assert jobs_gauges(samples)["mail.bounce"]["dead"] == dead
    for actor in ("watchdog", "carrier", "sweeper", "topic:mail.send", "topic:mail.bounce"):
        assert ("redelay_actor_restarts_total", frozenset({("actor", actor)})) in samples
    # What Prometheus asks for first: OpenMetrics, where a counter's family is named without
    # _total. It parses, so no family name is used twice.
    openmetrics = scrape(url, "application/openmetrics-text")
    families = list(openmetrics_families(openmetrics))  # type: ignore[no-untyped-call]
    names = [f.name for f in families]
    assert len(names) == len(set(names)) and "redelay_jobs" in names
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    with pytest.raises(OSError):
        scrape(url)  # the endpoint stopped with the worker


def test_the_metrics_port_is_checked_before_the_worker_starts(
    redis_server: RedisProcess, redis_client: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "metricsworker.py").write_text(WORKER_MODULE.format(url=redis_server.url, ns=NS))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = redelay("worker", "metricsworker:queue", "--metrics-port", port, cwd=tmp_path)
    assert busy.returncode == 2, busy.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in busy.stderr
    out_of_range = redelay("worker", "metricsworker:queue", "--metrics-port", "70000", cwd=tmp_path)
    assert out_of_range.returncode == 2
    assert "--metrics-port must be 0 to 65535" in out_of_range.stderr


# -- redelay metrics --------------------------------------------------------------------------


def test_redelay_metrics_prints_the_gauges_stats_gives(
    redis_server: RedisProcess, store: Store
) -> None:
    store.add_many([store.new_job("a", f"d{n}", {}, delay_ms=3_600_000) for n in range(4)])
    store.add_many([store.new_job("a", f"r{n}", {}) for n in range(2)])
    store.add_many([store.new_job("b", f"r{n}", {}) for n in range(3)])
    store.carry(100)
    leased = store.lease("b", 2)
    assert len(leased) == 2
    store.fail(leased[0].topic, leased[0].id, leased[0].token, "boom")  # retried: delayed
    store.pause("b")
    where = ("--redis", redis_server.url, "--namespace", NS)
    result = redelay("metrics", *where)
    assert result.returncode == 0, result.stderr
    samples = parse(result.stdout)
    expected = store.stats(with_paused=True)
    assert expected["a"] == {"delayed": 4, "ready": 2, "leased": 0, "dead": 0, "paused": 0}
    assert expected["b"] == {"delayed": 1, "ready": 1, "leased": 1, "dead": 0, "paused": 1}
    assert jobs_gauges(samples) == expected
    assert value(samples, "redelay_redis_up") == 1
    # The process's own numbers belong to a worker: the command has none.
    assert not any(name.startswith("redelay_job_events") for name, _ in samples)
    as_json = redelay("metrics", "--json", *where)
    assert as_json.returncode == 0, as_json.stderr
    documents = json.loads(as_json.stdout)
    gauges = [d for d in documents if d["name"] == "redelay_jobs"]
    assert {(d["labels"]["topic"], d["labels"]["state"]): d["value"] for d in gauges} == {
        (topic, state): float(n)
        for topic, states in expected.items()
        for state, n in states.items()
        if state != "paused"
    }
    paused = [d for d in documents if d["name"] == "redelay_topic_paused"]
    assert {d["labels"]["topic"]: d["value"] for d in paused} == {"a": 0.0, "b": 1.0}


def test_overdue_is_delivery_lateness_which_a_pause_does_not_add_to(
    redis_server: RedisProcess, store: Store
) -> None:
    """A paused topic's due jobs still become ready: its backlog makes handlers start late
    (redelay_start_delay_seconds) but redelay delivered on time (redelay_overdue_seconds 0)."""
    where = ("--redis", redis_server.url, "--namespace", NS)

    def overdue() -> float:
        result = redelay("metrics", *where)
        assert result.returncode == 0, result.stderr
        return value(parse(result.stdout), "redelay_overdue_seconds")

    assert overdue() == 0  # nothing delayed
    store.add(store.new_job("a", "later", {}, delay_ms=3_600_000))
    assert overdue() == 0  # delayed, not due
    # Added by a process 8 s behind with a 1 s delay: due 7 s ago, and nobody carried it.
    behind = Store(store.client, NS, FakeClock(store.clock.now_ms() - 8_000))
    behind.add(behind.new_job("a", "late", {}, delay_ms=1_000))
    assert 7 <= overdue() < 7 + 30
    samples = parse(exposition(redis_registry(store.stats, overdue=lambda: overdue_s(store))))
    assert 7 <= value(samples, "redelay_overdue_seconds") < 7 + 30
    store.pause("a")
    assert store.carry(100)[0] == 1  # made ready although its topic is paused
    assert overdue() == 0
    assert store.stats(with_paused=True)["a"]["ready"] == 1


def test_redelay_metrics_without_redis_exits_3(tmp_path: Path) -> None:
    result = redelay("metrics", "--redis", f"unix://{tmp_path}/nothing.sock")
    assert result.returncode == 3, result.stderr


# -- the registry a service mounts ------------------------------------------------------------


def test_a_service_registry_counts_timeouts_and_reads_redis(
    redis_server: RedisProcess, redis_client: redis.Redis, store: Store
) -> None:
    queue = DelayQueue(redis_server.url, NS)

    @queue.handler("slow", concurrency=2, timeout=1.0, retry=[3600])
    def slow(job: Any) -> None:
        time.sleep(1.5)

    made = registry(queue)
    assert registry(queue) is made  # one registry per queue
    server = serve(queue, 0)
    queue.start()
    try:
        queue.add("slow", "s1", {})

        def timeouts() -> float:
            samples = parse(scrape(server.url))
            return value(
                samples, "redelay_handler_duration_seconds_count", topic="slow", outcome="timeout"
            )

        wait_until(lambda: timeouts() == 1, "one handler timeout on /metrics")
        samples = parse(scrape(server.url))
        assert value(samples, "redelay_job_events_total", topic="slow", event="failed") == 1
        # The timed-out thread keeps its slot until the handler returns.
        assert value(samples, "redelay_handlers_busy", topic="slow") == 1
        assert jobs_gauges(samples) == queue.stats()
        assert jobs_gauges(samples)["slow"]["delayed"] == 1
        restarts = {
            dict(labels)["actor"]: number
            for (name, labels), number in samples.items()
            if name == "redelay_actor_restarts_total"
        }
        health = queue.health()
        assert restarts == {unit: report["restarts"] for unit, report in health.items()}
        full = next(n for (name, _), n in samples.items() if name == "redelay_redis_full")
        assert full == (1 if health["carrier"]["redis"]["full"] else 0) == 0
    finally:
        queue.stop(grace=3)
        server.close()


def test_a_registry_asked_for_after_start_is_refused(redis_server: RedisProcess) -> None:
    queue = DelayQueue(redis_server.url, NS)

    @queue.handler("t")
    def handle(job: Any) -> None:
        pass

    queue.start()
    try:
        with pytest.raises(ConfigError, match=r"before queue\.start"):
            registry(queue)
    finally:
        queue.stop(grace=1)


def test_a_failed_redis_read_leaves_the_scrape_standing(
    redis_factory: Callable[..., RedisProcess],
) -> None:
    server = redis_factory()
    client = server.client()
    store = Store(client, NS, SystemClock())
    store.add(store.new_job("a", "1", {}))
    assert value(parse(exposition(redis_registry(store.stats))), "redelay_redis_up") == 1
    server.kill()
    samples = parse(exposition(redis_registry(store.stats)))
    assert value(samples, "redelay_redis_up") == 0
    assert jobs_gauges(samples) == {}
    client.close()


def test_a_queue_without_metrics_never_imports_prometheus_client() -> None:
    code = (
        "import sys, actors, actors.queue, actors.cli.app, actors.runtime.system\n"
        "print('prometheus_client' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_the_recorder_buckets_as_prometheus_does_and_outlives_a_pool() -> None:
    made = CollectorRegistry()
    recorder = PrometheusRecorder(made)
    made.register(recorder)
    pool = recorder.topic("t")
    for lateness_ms in (5, 6, -3, 10_000_000):  # on a bound, above it, early (as 0), past 1 h
        pool.started(lateness_ms)
    pool.jobs("acked", 2)
    recorder.topic("t").jobs("acked", 1)  # a rebuilt pool counts on
    pool.finished("timeout", 1_500)
    samples = parse(exposition(made))
    bucket = "redelay_start_delay_seconds_bucket"
    assert value(samples, bucket, topic="t", le="0.005") == 2
    assert value(samples, bucket, topic="t", le="0.01") == 3
    assert value(samples, bucket, topic="t", le="3600.0") == 3
    assert value(samples, bucket, topic="t", le="+Inf") == 4
    assert value(samples, "redelay_start_delay_seconds_count", topic="t") == 4
    assert value(samples, "redelay_start_delay_seconds_sum", topic="t") == pytest.approx(10_000.011)
    assert value(samples, "redelay_job_events_total", topic="t", event="acked") == 3
    duration = "redelay_handler_duration_seconds_bucket"
    assert value(samples, duration, topic="t", outcome="timeout", le="1.0") == 0
    assert value(samples, duration, topic="t", outcome="timeout", le="2.5") == 1


def test_the_wsgi_and_asgi_apps_serve_the_queue_registry(redis_server: RedisProcess) -> None:
    queue = DelayQueue(redis_server.url, NS, producer_only=True)
    try:
        queue.add("mounted", "1", delay=60)
        environ: dict[str, Any] = {}
        setup_testing_defaults(environ)
        statuses: list[str] = []
        body = b"".join(make_wsgi_app(queue)(environ, lambda status, _: statuses.append(status)))
        assert statuses == ["200 OK"]
        assert value(parse(body.decode()), "redelay_jobs", topic="mounted", state="delayed") == 1

        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/metrics"}
        scope |= {"headers": [], "query_string": b""}
        asyncio.run(make_asgi_app(queue)(scope, receive, send))
        assert sent[0]["status"] == 200
        text = b"".join(m.get("body", b"") for m in sent[1:]).decode()
        assert value(parse(text), "redelay_jobs", topic="mounted", state="delayed") == 1
    finally:
        queue.close()
