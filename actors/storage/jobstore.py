"""JobStore: what the actors and the facade need from a store of jobs.

Both :class:`actors.storage.store.Store` (one shard) and
:class:`actors.storage.sharding.ShardedStore` (every shard of a namespace, on one server or a
Redis Cluster) satisfy it, so actors are written once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

from actors.clock import Clock
from actors.errors import ErrorCode
from actors.values import JobInfo, Lease, NewJob, Snapshot, TopicConfig


class JobStore(Protocol):
    namespace: str
    clock: Clock
    default_topic_config: TopicConfig
    topic_configs: dict[str, TopicConfig]  # this process's topic defaults, by topic

    def new_job(
        self,
        topic: str,
        job_id: str,
        body: Any = None,
        *,
        delay_ms: float | None = None,
        due_ms: float | None = None,
        retry_ms: Sequence[float] | None = None,
        lease_ms: float | None = None,
        callback: str | None = None,
    ) -> NewJob: ...

    def configure_topic(self, topic: str, config: TopicConfig) -> None: ...

    def stored_topic_config(self, topic: str) -> TopicConfig | None: ...

    # -- transitions ------------------------------------------------------------------------

    def add_many(self, jobs: Sequence[NewJob], *, replace: bool = False) -> list[str]: ...

    def add(self, job: NewJob, *, replace: bool = False) -> str: ...

    def carry(self, limit: int = ...) -> tuple[int, int | None]: ...

    def lease(self, topic: str, limit: int, consumer: str = "") -> list[Lease]: ...

    def ack_many(
        self, acks: Sequence[tuple[str, str, str] | tuple[str, str, str, str]], detail: str = ""
    ) -> list[ErrorCode]: ...

    def ack(self, topic: str, job_id: str, token: str, detail: str = "") -> ErrorCode: ...

    def fail_many(
        self, failures: Sequence[tuple[str, str, str, str, int | None]]
    ) -> list[str | ErrorCode]: ...

    def fail(
        self, topic: str, job_id: str, token: str, reason: str, retry_after_ms: int | None = None
    ) -> str | ErrorCode: ...

    def extend_many(self, extensions: Sequence[tuple[str, str, str, int]]) -> list[int]: ...

    def release_many(self, releases: Sequence[tuple[str, str, str]]) -> list[int]: ...

    def expire(self, limit: int = ...) -> tuple[int, int | None]: ...

    def cancel(self, topic: str, job_id: str) -> Literal["missing", "removed", "requested"]: ...

    def requeue_dead(self, jobs: Sequence[tuple[str, str]]) -> int: ...

    def purge_dead(self, jobs: Sequence[tuple[str, str]]) -> int: ...

    # -- reads ------------------------------------------------------------------------------

    def get(self, topic: str, job_id: str) -> JobInfo | None: ...

    def topics(self) -> list[str]: ...

    def stats(self) -> dict[str, dict[str, int]]: ...

    def dead(self, topic: str | None = None, limit: int = 100) -> list[JobInfo]: ...

    def earliest_due_ms(self) -> int | None: ...

    def earliest_deadline_ms(self) -> int | None: ...

    def snapshot(self) -> Snapshot: ...

    def iter_audit(self, chunk: int = 5_000) -> Iterable[tuple[str, dict[str, str]]]: ...
