"""What the runtime tells a metrics backend, and the backend that records nothing.

The pools call a topic's recorder on their hot path, so the interface is narrow and bound to one
topic up front (no label lookups per job). Without a backend (``actors.metrics`` is not used, or
prometheus-client is not installed) every call is a no-op method.
"""

from __future__ import annotations

from typing import Protocol

# The events a pool counts: each is the audit event its store call wrote, except "rejected",
# which also covers a result refused as NOT_LEASED (the lease was lost before the result came).
# The sweeper counts "lost" and "quarantined" (and "cancelled"), for whatever process held them.
JOB_EVENTS = (
    "leased",
    "acked",
    "failed",
    "dead",
    "cancelled",
    "released",
    "extended",
    "rejected",
    "lost",
    "quarantined",
)
# How a handler run ended: returned, raised (Retry included), or overran the topic's timeout.
OUTCOMES = ("ok", "error", "timeout")


class TopicRecorder(Protocol):
    def jobs(self, event: str, count: int) -> None:
        """``count`` jobs went through ``event`` (one of JOB_EVENTS) in this process."""

    def started(self, lateness_ms: int) -> None:
        """A handler started ``lateness_ms`` after its job was due."""

    def finished(self, outcome: str, duration_ms: int) -> None:
        """A handler run ended with ``outcome`` (one of OUTCOMES) after ``duration_ms``."""

    def busy(self, handlers: int) -> None:
        """The pool now has ``handlers`` handlers running (timed-out threads included)."""


class Recorder(Protocol):
    def topic(self, topic: str) -> TopicRecorder:
        """The recorder a topic's pool calls, with its labels bound once."""


class _NoTopicRecorder:
    def jobs(self, event: str, count: int) -> None:
        pass

    def started(self, lateness_ms: int) -> None:
        pass

    def finished(self, outcome: str, duration_ms: int) -> None:
        pass

    def busy(self, handlers: int) -> None:
        pass


class NoRecorder:
    """Records nothing: what a queue uses until ``actors.metrics.registry`` gives it one."""

    _topic = _NoTopicRecorder()

    def topic(self, topic: str) -> TopicRecorder:
        return self._topic


NO_RECORDER = NoRecorder()
