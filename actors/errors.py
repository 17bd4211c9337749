"""Exceptions raised by redelay, and the error codes the Lua scripts return."""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Codes returned by the scripts in lua/ (see each script's contract)."""

    OK = 0
    EXISTS = -2
    STALE_TOKEN = -3
    NOT_LEASED = -4


class RedelayError(Exception):
    """Base class of every error redelay raises on purpose."""


class ValidationError(RedelayError, ValueError):
    """Bad input at the boundary. Nothing was written.

    ``field`` names the offending input, ``limit`` says what it must satisfy.
    """

    def __init__(self, field: str, message: str, limit: str = "") -> None:
        self.field = field
        self.limit = limit
        self.message = message
        text = f"{field}: {message}"
        if limit:
            text += f" (limit: {limit})"
        super().__init__(text)


class JobExistsError(RedelayError):
    """add() of a (topic, id) that already exists: ``if_exists="replace"`` reschedules it,
    ``if_exists="keep"`` leaves it as it is."""

    def __init__(self, members: list[tuple[str, str]]) -> None:
        self.jobs = members
        super().__init__(
            f"job already exists: {self.named()}; nothing was added "
            '(if_exists="replace" reschedules it, if_exists="keep" leaves it)'
        )

    def named(self) -> str:
        """The existing jobs as topic/id, the first five and how many more."""
        shown = ", ".join(f"{t}/{i}" for t, i in self.jobs[:5])
        more = f" and {len(self.jobs) - 5} more" if len(self.jobs) > 5 else ""
        return shown + more


class ConfigError(RedelayError):
    """A process's configuration disagrees with what is stored or cannot work."""


class RedisServerNotFound(RedelayError):
    """No redis-server binary could be found for an embedded or test server."""


class PartialAddError(JobExistsError):
    """An add_many spanning shards where some jobs existed: their shards added nothing, the
    other shards added theirs (listed in ``added``)."""

    def __init__(self, existing: list[tuple[str, str]], added: list[tuple[str, str]]) -> None:
        super().__init__(existing)
        self.added = added
        self.args = (
            f"{self.args[0].split('; nothing was added')[0]}; {len(added)} jobs in other shards "
            "were added (all-or-nothing holds per shard)",
        )


class AddStreamError(RedelayError):
    """add_stream stopped before the end of its jobs; ``cause`` says why (a ValidationError, a
    JobExistsError, RedisFullError, a connection error).

    ``results`` has one entry per job the stream took from its iterable, in order: what add_many
    would have returned for it ("new", or the state it had), or None when it was not added (a
    NotReplicatedError's batch counts as added: its jobs are on the master). Each
    batch is all or nothing; the batch sent before the failing one was read, so it counts. After
    a connection error, None also covers batches whose replies never came: they may or may not
    have been added, and adding them again with ``if_exists="keep"`` is safe.
    """

    def __init__(self, results: list[str | None], cause: BaseException) -> None:
        self.results = results
        self.cause = cause
        self.added = sum(1 for result in results if result is not None)
        # Why it stopped, in words true of the whole stream: JobExistsError's own text says
        # "nothing was added", which holds for its batch only.
        self.reason = f"{type(cause).__name__}: {cause}"
        if isinstance(cause, JobExistsError):
            self.reason = f"{cause.named()} already existed, so their batch added nothing"
        super().__init__(
            f"add_stream stopped after adding {self.added} of the {len(results)} jobs it took: "
            + self.reason
        )


class NotReplicatedError(RedelayError):
    """A durable add reached the master but fewer replicas than asked acknowledged it in time.

    The jobs exist on the master; they are lost only if it fails before replicating them.
    Adding them again with ``replace=True`` is safe.
    """

    def __init__(self, jobs: list[tuple[str, str]], acked: int, wanted: int, results: list[str]):
        self.jobs = jobs
        self.acked = acked
        self.wanted = wanted
        self.results = results
        super().__init__(
            f"{len(jobs)} jobs were added on the master but only {acked} of {wanted} replicas "
            "acknowledged them in time; they are lost if the master fails before replicating"
        )


class RedisFullError(RedelayError):
    """Redis is over its ``maxmemory`` (with ``noeviction``) and refused to store more; nothing
    was written. Delivery goes on (workers carry, lease and ack, which frees memory): retry later,
    purge dead jobs, shorten audit retention or raise ``maxmemory``."""

    def __init__(self, doing: str, detail: str = "") -> None:
        self.doing = doing
        text = (
            f"Redis is full: used memory is over 'maxmemory', so {doing} was refused and nothing "
            "was written; workers keep delivering and acking, which frees memory (or raise "
            "maxmemory, purge dead jobs, shorten audit retention)"
        )
        super().__init__(f"{text} [{detail}]" if detail else text)
