"""OpenTelemetry traces (actors/tracing.py): spans a real worker makes against a real Redis, read
back with the SDK's in-memory exporter, and a process without OpenTelemetry that still works and
never imports it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from _wait import wait_until
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from actors import AsyncDelayQueue, DelayQueue, Job, Retry
from actors.errors import AddStreamError, JobExistsError
from actors.server.embedded import RedisProcess
from actors.storage import codec
from actors.storage.keys import member

NS = "tracingtest"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    # A provider of the test's own, given to the queue: the global one is never set, so no other
    # test of the session records spans.
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(exporter))
    yield made
    made.shutdown()


@pytest.fixture
def queue(
    redis_server: RedisProcess, redis_client: redis.Redis, provider: TracerProvider
) -> Iterator[DelayQueue]:
    made = DelayQueue(redis_server.url, NS, tracer_provider=provider)
    yield made
    made.stop(grace=3)


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def wait_for_spans(exporter: InMemorySpanExporter, name: str, count: int) -> list[ReadableSpan]:
    def enough() -> list[ReadableSpan]:
        found = spans(exporter, name)
        return found if len(found) >= count else []

    return wait_until(enough, what=f"{count} finished {name!r} spans")


def attr(span: ReadableSpan, name: str) -> Any:
    return (span.attributes or {}).get(name)


def stored_traceparent(client: redis.Redis, topic: str, job_id: str) -> str | None:
    blob = client.hget(f"redelay:{{{NS}.0}}:jobs", member(topic, job_id))
    assert isinstance(blob, bytes), "the job has no record"
    traceparent: str | None = codec.unpack(blob).get("p")
    return traceparent


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_add_stores_its_producer_context_and_the_handler_runs_in_a_linked_consumer_span(
    queue: DelayQueue,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    redis_client: redis.Redis,
) -> None:
    seen: list[Any] = []

    @queue.handler("mail", concurrency=2)
    def handle(job: Job) -> None:
        seen.append(trace.get_current_span().get_span_context())
        with provider.get_tracer("app").start_as_current_span("render"):
            pass

    with provider.get_tracer("app").start_as_current_span("request") as request:
        assert queue.add("mail", "m1", {"to": "a"}, delay=3600) == "new"
    (send,) = spans(exporter, "send mail")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "redelay",
        "messaging.destination.name": "mail",
        "messaging.message.id": "m1",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    assert stored_traceparent(redis_client, "mail", "m1") == traceparent_of(send)

    # replace keeps the record's shape: a new add, a new producer context.
    queue.add("mail", "m1", {"to": "a"}, replace=True)
    send = spans(exporter, "send mail")[-1]
    assert stored_traceparent(redis_client, "mail", "m1") == traceparent_of(send)

    queue.start()
    (process,) = wait_for_spans(exporter, "process mail", 1)
    assert process.kind is SpanKind.CONSUMER
    assert process.context is not None and send.context is not None
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert dict(process.attributes or {}) == {
        "messaging.system": "redelay",
        "messaging.destination.name": "mail",
        "messaging.message.id": "m1",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.redelay.attempt": 1,
        "messaging.redelay.outcome": "ack",
    }
    assert process.status.status_code is StatusCode.UNSET
    # The handler ran with the consumer span current: its own spans are the consumer's children.
    assert [c.span_id for c in seen] == [process.context.span_id]
    (render,) = spans(exporter, "render")
    assert render.parent is not None and render.parent.span_id == process.context.span_id


def test_every_attempt_has_its_span_with_its_outcome_and_what_it_raised(
    queue: DelayQueue, exporter: InMemorySpanExporter, redis_client: redis.Redis
) -> None:
    @queue.handler("pay", concurrency=1, retry=[0, 0])
    async def handle(job: Job) -> None:
        if job.attempt == 1:
            raise KeyError("card")
        if job.attempt == 2:
            raise Retry(0, "bank busy")
        raise ValueError("declined")

    queue.add("pay", "p1")
    (send,) = spans(exporter, "send pay")
    queue.start()
    attempts = sorted(
        wait_for_spans(exporter, "process pay", 3),
        key=lambda s: attr(s, "messaging.redelay.attempt"),
    )
    assert send.context is not None
    # Each attempt continues the producer context the fail and lease scripts kept in the record.
    for span in attempts:
        assert span.parent is not None and span.parent.span_id == send.context.span_id
    outcomes = [attr(s, "messaging.redelay.outcome") for s in attempts]
    assert outcomes == ["retry", "retry", "dead"]
    assert [s.status.status_code for s in attempts] == [
        StatusCode.ERROR,  # raised: a failure
        StatusCode.UNSET,  # Retry: the handler's choice
        StatusCode.ERROR,
    ]
    raised = [[e.attributes or {} for e in s.events if e.name == "exception"] for s in attempts]
    assert [[e["exception.type"] for e in r] for r in raised] == [["KeyError"], [], ["ValueError"]]
    assert "declined" in str(raised[2][0]["exception.stacktrace"])
    assert stored_traceparent(redis_client, "pay", "p1") == traceparent_of(send)  # dead keeps it

    # A requeued dead job still belongs to the trace of the add that made it.
    assert queue.requeue_dead("pay", "p1") == 1
    fourth = wait_for_spans(exporter, "process pay", 4)[-1]
    assert fourth.parent is not None and fourth.parent.span_id == send.context.span_id


def test_a_timeout_ends_the_span_as_a_timeout(
    queue: DelayQueue, exporter: InMemorySpanExporter
) -> None:
    release = threading.Event()

    @queue.handler("hang", concurrency=1, timeout=0.2, retry=[3600])
    def handle(job: Job) -> None:
        release.wait(30)

    queue.add("hang", "h1")
    queue.start()
    try:
        (span,) = wait_for_spans(exporter, "process hang", 1)
    finally:
        release.set()
    assert attr(span, "messaging.redelay.outcome") == "timeout"
    assert span.status.status_code is StatusCode.ERROR
    (event,) = [e for e in span.events if e.name == "exception"]
    assert (event.attributes or {})["exception.type"] == "TimeoutError"


def test_add_many_makes_one_producer_span_per_job_each_linked_by_its_own_consumer(
    queue: DelayQueue, exporter: InMemorySpanExporter
) -> None:
    @queue.handler("batch", concurrency=4)
    def handle(job: Job) -> None:
        pass

    queue.add_many([{"topic": "batch", "id": f"b{n}"} for n in range(3)])
    sent = {attr(s, "messaging.message.id"): s for s in spans(exporter, "send batch")}
    assert sorted(sent) == ["b0", "b1", "b2"]
    queue.start()
    processed = wait_for_spans(exporter, "process batch", 3)
    for span in processed:
        producer = sent[attr(span, "messaging.message.id")]
        assert producer.context is not None
        assert [link.context.span_id for link in span.links] == [producer.context.span_id]


def test_add_stream_makes_one_producer_span_per_job_and_stores_each_context(
    queue: DelayQueue, exporter: InMemorySpanExporter
) -> None:
    queue.add_stream(
        ({"topic": "bulk", "id": f"s{n}", "delay": 60} for n in range(5)), batch_size=2
    )
    sent = {attr(s, "messaging.message.id"): s for s in spans(exporter, "send bulk")}
    assert sorted(sent) == [f"s{n}" for n in range(5)]
    for job_id, span in sent.items():
        assert stored_traceparent(queue.store.client, "bulk", job_id) == traceparent_of(span)


def _stream_with_an_existing_job(add_stream: Any) -> AddStreamError:
    """Six jobs in batches of two, s3 already stored: the first batch is added, the second
    refused whole (s3 exists), and the stream stops there."""
    with pytest.raises(AddStreamError) as stopped:
        add_stream(({"topic": "bulk", "id": f"s{n}", "delay": 60} for n in range(6)), batch_size=2)
    return stopped.value


def _assert_spans_end_with_their_batches(
    exporter: InMemorySpanExporter, stopped: AddStreamError
) -> None:
    """Each span ends as Redis answered for its job: an added job's without error, a job of
    the refused batch with the JobExistsError that stopped the stream, which a span ended when
    its batch was sent could not know. (The third batch, sent before the second's reply was
    read, was added: its jobs are "new" in the results.)"""
    sent = {attr(s, "messaging.message.id"): s for s in spans(exporter, "send bulk")}
    assert stopped.results == ["new", "new", None, None, "new", "new"]
    assert sorted(sent) == [f"s{n}" for n in range(6)]
    for n, result in enumerate(stopped.results):
        span = sent[f"s{n}"]
        if result is not None:
            assert span.status.status_code is StatusCode.UNSET
            assert span.events == ()
        else:
            assert span.status.status_code is StatusCode.ERROR
            assert span.status.description is not None
            assert span.status.description.startswith("JobExistsError")
            assert [e.name for e in span.events] == ["exception"]


def test_add_stream_ends_each_span_when_redis_answered_for_its_batch(
    queue: DelayQueue, exporter: InMemorySpanExporter
) -> None:
    queue.add("bulk", "s3", delay=60)
    exporter.clear()
    stopped = _stream_with_an_existing_job(queue.add_stream)
    _assert_spans_end_with_their_batches(exporter, stopped)


def test_a_refused_add_is_an_error_on_its_producer_span(
    queue: DelayQueue, exporter: InMemorySpanExporter
) -> None:
    queue.add("mail", "dup", delay=60)
    with pytest.raises(JobExistsError):
        queue.add("mail", "dup", delay=60)
    first, second = spans(exporter, "send mail")
    assert first.status.status_code is StatusCode.UNSET
    assert second.status.status_code is StatusCode.ERROR
    assert [e.name for e in second.events] == ["exception"]


def test_without_an_sdk_nothing_is_stored(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    """The global provider makes no-op spans until an application installs an SDK (this test
    suite never does): a job then carries no traceparent."""
    queue = DelayQueue(redis_server.url, NS, producer_only=True)
    try:
        queue.add("mail", "plain", delay=60)
    finally:
        queue.close()
    assert stored_traceparent(redis_client, "mail", "plain") is None


# -- the async producer: the same spans and stored context, by the same code -----------------


def async_add(url: str, provider: TracerProvider | None, *adds: dict[str, Any]) -> list[Any]:
    """Runs each add (add's arguments by name; ``many`` for add_many) on one AsyncDelayQueue
    on a loop of its own, inside an app span ``request`` when a provider is given; the results,
    or the exception an add raised."""

    async def scenario() -> list[Any]:
        results: list[Any] = []
        async with AsyncDelayQueue(url, NS, tracer_provider=provider) as queue:
            for add in adds:
                try:
                    if "many" in add:
                        results.append(await queue.add_many(add["many"]))
                    else:
                        results.append(await queue.add(**add))
                except Exception as exc:  # the test looks at which one
                    results.append(exc)
        return results

    if provider is None:
        return asyncio.run(scenario())

    async def traced() -> list[Any]:
        with provider.get_tracer("app").start_as_current_span("request"):
            return await scenario()

    return asyncio.run(traced())


def test_an_async_add_stores_its_producer_context_and_its_consumer_span_links_to_it(
    queue: DelayQueue,
    redis_server: RedisProcess,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    redis_client: redis.Redis,
) -> None:
    @queue.handler("mail", concurrency=2)
    def handle(job: Job) -> None:
        pass

    assert async_add(redis_server.url, provider, {"topic": "mail", "job_id": "a1"}) == ["new"]
    (request,) = spans(exporter, "request")
    (send,) = spans(exporter, "send mail")
    assert send.kind is SpanKind.PRODUCER
    # The caller's current span on the event loop (its task's context) is the parent.
    assert send.parent is not None and request.context is not None
    assert send.parent.span_id == request.context.span_id
    assert attr(send, "messaging.message.id") == "a1"
    assert attr(send, "messaging.operation.type") == "send"
    assert send.status.status_code is StatusCode.UNSET
    assert stored_traceparent(redis_client, "mail", "a1") == traceparent_of(send)

    queue.start()
    (process,) = wait_for_spans(exporter, "process mail", 1)
    assert process.context is not None and send.context is not None
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]


def test_an_async_add_many_makes_one_producer_span_per_job_each_linked_by_its_own_consumer(
    queue: DelayQueue,
    redis_server: RedisProcess,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    redis_client: redis.Redis,
) -> None:
    @queue.handler("batch", concurrency=4)
    def handle(job: Job) -> None:
        pass

    batch = [{"topic": "batch", "id": f"b{n}"} for n in range(3)]
    assert async_add(redis_server.url, provider, {"many": batch}) == [["new"] * 3]
    sent = {attr(s, "messaging.message.id"): s for s in spans(exporter, "send batch")}
    assert sorted(sent) == ["b0", "b1", "b2"]
    for job_id, span in sent.items():
        assert stored_traceparent(redis_client, "batch", job_id) == traceparent_of(span)
    queue.start()
    processed = wait_for_spans(exporter, "process batch", 3)
    assert sorted(attr(s, "messaging.message.id") for s in processed) == ["b0", "b1", "b2"]
    for span in processed:
        producer = sent[attr(span, "messaging.message.id")]
        assert producer.context is not None
        assert [link.context.span_id for link in span.links] == [producer.context.span_id]


def test_a_refused_async_add_is_an_error_on_its_producer_span(
    redis_server: RedisProcess, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    add = {"topic": "mail", "job_id": "dup", "delay": 60}
    first, refused = async_add(redis_server.url, provider, add, add)
    assert first == "new"
    assert isinstance(refused, JobExistsError)
    ok, error = spans(exporter, "send mail")
    assert ok.status.status_code is StatusCode.UNSET
    assert error.status.status_code is StatusCode.ERROR
    (event,) = error.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "actors.errors.JobExistsError"


def test_without_an_sdk_an_async_add_stores_nothing(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    """As the sync test above: the global provider's spans are no-ops, so no traceparent."""
    batch = [{"topic": "mail", "id": "many"}]
    plain = {"topic": "mail", "job_id": "plain", "delay": 60}
    assert async_add(redis_server.url, None, plain, {"many": batch}) == ["new", ["new"]]
    assert stored_traceparent(redis_client, "mail", "plain") is None
    assert stored_traceparent(redis_client, "mail", "many") is None


BLOCKED = """
import sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())

import asyncio
import threading
from actors import AsyncDelayQueue, DelayQueue
from actors.errors import ConfigError

done = threading.Event()
queue = DelayQueue(sys.argv[1], "tracingblocked")

@queue.handler("t", concurrency=1)
def handle(job):
    done.set()

queue.start()
queue.add("t", "j1")
queue.add_many([{"topic": "t", "id": "j2"}])
assert done.wait(30), "the handler never ran"
queue.stop(grace=3)


async def produce():
    async with AsyncDelayQueue(sys.argv[1], "tracingblocked") as producer:
        assert await producer.add("t", "a1", delay=60) == "new"
        assert await producer.add_many([{"topic": "t", "id": "a2", "delay": 60}]) == ["new"]


asyncio.run(produce())
for make in (DelayQueue, AsyncDelayQueue):
    try:
        make(sys.argv[1], "tracingblocked", tracer_provider=object())
    except ConfigError as exc:
        print("refused:", make.__name__, exc)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print("loaded:", loaded)
"""


def test_without_opentelemetry_a_worker_works_and_never_imports_it(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(BLOCKED), redis_server.url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout
    for made in ("DelayQueue", "AsyncDelayQueue"):
        assert f"refused: {made} tracer_provider needs opentelemetry-api" in result.stdout


def test_async_add_stream_ends_each_span_when_redis_answered_for_its_batch(
    redis_server: RedisProcess, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async def scenario() -> AddStreamError:
        async with AsyncDelayQueue(redis_server.url, NS, tracer_provider=provider) as queue:
            await queue.add("bulk", "s3", delay=60)
            exporter.clear()
            with pytest.raises(AddStreamError) as stopped:
                await queue.add_stream(
                    ({"topic": "bulk", "id": f"s{n}", "delay": 60} for n in range(6)),
                    batch_size=2,
                )
            return stopped.value

    _assert_spans_end_with_their_batches(exporter, asyncio.run(scenario()))
