"""OpenTelemetry traces: a PRODUCER span per added job, a CONSUMER span per handler run.

Needs opentelemetry-api (the ``otel`` extra); the application brings the SDK and its exporters,
as OpenTelemetry expects of a library. The import is tried once, here: without the API a
queue's :class:`Tracing` has no tracer and every call site takes a ``None`` branch, so nothing is
imported and nothing is paid but that test.

``add`` and ``add_many`` (of ``DelayQueue`` and ``AsyncDelayQueue`` alike, through
:meth:`Tracing.sending`) start one ``send {topic}`` span per job (a batch gets one span per job,
not one for the batch, so every job's consumer span links to its own producer span) and store
that span's W3C ``traceparent`` in the job's record. ``add_stream`` does the same per job, and
ends each span once Redis has answered for its batch (:class:`StreamSpans`). Each attempt's
handler then runs inside a ``process {topic}`` span whose parent is that producer context,
linked to it as well, as the messaging semantic conventions recommend for a consumer. The pool
ends the consumer span once the attempt's outcome is stored: ``ack``, ``retry``, ``dead``,
``cancelled``, ``timeout``, ``lost`` (the lease was lost before the result came) or
``released`` (handed back at stop).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import Any

from actors.errors import AddStreamError, ConfigError
from actors.job import Retry
from actors.values import Lease, NewJob

try:
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.trace import INVALID_SPAN, Link, SpanKind, Status, StatusCode, Tracer
    from opentelemetry.trace import Span as Span  # re-exported for the runtime's annotations
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: tracing is off
    otel_trace = None  # type: ignore[assignment]
    Span = Any  # type: ignore[misc,assignment]  # so the runtime's annotations still import

AVAILABLE = otel_trace is not None

SYSTEM = "redelay"
ATTEMPT = "messaging.redelay.attempt"
OUTCOME = "messaging.redelay.outcome"
# Outcomes that mean the attempt went wrong: their span's status is ERROR.
_FAILED = frozenset({"dead", "timeout"})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("redelay")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "0"


class Tracing:
    """One queue's tracer, from ``tracer_provider`` or OpenTelemetry's global provider (which
    makes no-op spans until the application installs an SDK).

    Thread-safe: the facade uses it on the caller's thread, the pools on their actor threads.
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        self.tracer: Tracer | None = None
        if otel_trace is None:
            if tracer_provider is not None:
                raise ConfigError(
                    "tracer_provider needs opentelemetry-api (the otel extra): "
                    "pip install opentelemetry-api"
                )
            return
        self.tracer = otel_trace.get_tracer("redelay", _version(), tracer_provider=tracer_provider)
        self._propagator = TraceContextTextMapPropagator()

    # -- producing --------------------------------------------------------------------------

    @contextmanager
    def sending(self, jobs: Sequence[NewJob]) -> Iterator[Sequence[NewJob]]:
        """Yields ``jobs``, each carrying its producer span's traceparent, for the block to add;
        the spans end when the block does, with the error recorded on each when it raises.

        A context manager rather than a wrapper of a function, so the one code path serves the
        blocking facade (``DelayQueue``) and the awaited one (``AsyncDelayQueue``) alike: the
        block may ``await`` inside it."""
        traced, spans = self.start_sending(jobs)
        if not spans:
            yield traced
            return
        try:
            yield traced
        except BaseException as exc:  # a cancelled task too: its jobs may not have been added
            for span in spans:
                end_failed(span, exc)
            raise
        for span in spans:
            span.end()

    def start_sending(self, jobs: Sequence[NewJob]) -> tuple[Sequence[NewJob], list[Span]]:
        """``jobs``, each carrying its producer span's traceparent, and those spans, started and
        left for the caller to end; no spans when nothing is traced."""
        tracer = self.tracer
        if tracer is None or not jobs:
            return jobs, []
        first = self._send_span(tracer, jobs[0])
        if first is INVALID_SPAN:
            # A no-op tracer (the API without an SDK): its spans are this one shared invalid span,
            # whose end does nothing and whose context is not stored, so the rest of the batch
            # need not make theirs.
            return jobs, []
        spans = [first, *(self._send_span(tracer, job) for job in jobs[1:])]
        traced = [
            job if (parent := self._traceparent(span)) is None else replace(job, traceparent=parent)
            for job, span in zip(jobs, spans, strict=True)
        ]
        return traced, spans

    @staticmethod
    def _send_span(tracer: Tracer, job: NewJob) -> Span:
        return tracer.start_span(
            f"send {job.topic}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.destination.name": job.topic,
                "messaging.message.id": job.id,
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
            },
        )

    def _traceparent(self, span: Span) -> str | None:
        if not span.get_span_context().is_valid:  # a no-op tracer: nothing worth storing
            return None
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=otel_trace.set_span_in_context(span))
        return carrier.get("traceparent")

    # -- consuming --------------------------------------------------------------------------

    def process_batch(self, leases: Sequence[Lease]) -> list[Span | None] | None:
        """The consumer spans of a batch of attempts, in order; None when there is nothing to
        trace. A no-op tracer (the API without an SDK) makes only invalid spans, so when the
        first is one the rest are not made (2 µs per job, on the path of every delivery)."""
        if self.tracer is None or not leases:
            return None
        first = self.process(leases[0])
        if first is None:
            return None
        return [first, *(self.process(lease) for lease in leases[1:])]

    def process(self, lease: Lease) -> Span | None:
        """Starts the consumer span of one attempt (the pool ends it with :func:`finish`);
        None when there is nothing to trace."""
        tracer = self.tracer
        if tracer is None:
            return None
        parent = Context()  # never the pool thread's own context: a root unless the job has one
        links: list[Link] = []
        if lease.traceparent:
            extracted = self._propagator.extract({"traceparent": lease.traceparent})
            producer = otel_trace.get_current_span(extracted).get_span_context()
            if producer.is_valid:
                parent = extracted
                links.append(Link(producer))
        span = tracer.start_span(
            f"process {lease.topic}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.destination.name": lease.topic,
                "messaging.message.id": lease.id,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                ATTEMPT: lease.attempt,
            },
        )
        # No SDK installed (yet): an invalid no-op span, which the pool need not carry around.
        return span if span.get_span_context().is_valid else None


def current(span: Span | None) -> AbstractContextManager[Any]:
    """Makes ``span`` the current span (on the handler's thread or task), so spans the handler
    starts are its children. The pool ends it, not this."""
    if span is None:
        return nullcontext()
    return otel_trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def finish(span: Span | None, outcome: str, error: BaseException | None = None) -> None:
    """Ends an attempt's consumer span with its stored outcome. What the handler raised is
    recorded and makes the status ERROR, except a ``Retry``, which is the handler's choice; a
    dead job or a timeout is an ERROR too."""
    if span is None:
        return
    span.set_attribute(OUTCOME, outcome)
    raised = error is not None and not isinstance(error, Retry)
    if raised:
        assert error is not None
        span.record_exception(error)
    if raised or outcome in _FAILED:
        reason = f"{type(error).__name__}: {error}" if raised else outcome
        span.set_status(Status(StatusCode.ERROR, reason))
    span.end()


def end_failed(span: Span, exc: BaseException) -> None:
    """Ends a span whose work ``exc`` stopped: the exception recorded, the status ERROR."""
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    span.end()


class StreamSpans:
    """The producer spans of one ``add_stream``, each ended when Redis has answered for its
    job's batch, not when the batch was sent: a batch refused later (an existing job, a full
    Redis) ends its spans with the error, as ``add_many``'s would.

    Jobs are numbered in stream order, as the store's results are: ``traced`` numbers each
    batch as the stream takes it, ``added`` ends a batch the store reports added, and
    ``stopped`` ends the rest, those the stream's results show as not added with its error."""

    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing
        self._open: dict[int, Span] = {}
        self._taken = 0

    def traced(self, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
        traced, spans = self._tracing.start_sending(jobs)
        for n, span in enumerate(spans):
            self._open[self._taken + n] = span
        self._taken += len(jobs)
        return traced

    def added(self, first: int, count: int) -> None:
        for position in range(first, first + count):
            span = self._open.pop(position, None)
            if span is not None:
                span.end()

    @contextmanager
    def ending(self) -> Iterator[None]:
        """Around the stream: when it raises, every span still open is ended by ``stopped``
        (with an AddStreamError, its cause and results: the jobs' own error, as add_many's)."""
        try:
            yield
            # Every batch was reported added; a span left open would be a bookkeeping slip,
            # and its job was added, so it ends as such rather than leaking.
            self.added(0, self._taken)
        except AddStreamError as exc:
            self.stopped(exc.cause, exc.results)
            raise
        except BaseException as exc:  # a cancelled task, an interrupt: nothing known
            self.stopped(exc)
            raise

    def stopped(self, exc: BaseException, results: Sequence[str | None] = ()) -> None:
        """Ends every span still open: ``exc`` on those whose job ``results`` (the stream's
        so far) do not show as added."""
        for position, span in sorted(self._open.items()):
            if position < len(results) and results[position] is not None:
                span.end()
            else:
                end_failed(span, exc)
        self._open.clear()
