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
    """add() of a (topic, id) that already exists; use replace=True to reschedule it."""

    def __init__(self, members: list[tuple[str, str]]) -> None:
        self.jobs = members
        shown = ", ".join(f"{t}/{i}" for t, i in members[:5])
        more = f" and {len(members) - 5} more" if len(members) > 5 else ""
        super().__init__(
            f"job already exists: {shown}{more}; nothing was added "
            "(pass replace=True to reschedule)"
        )


class LeaseLostError(RedelayError):
    """An ack, fail, extend or release with a lease token that no longer holds the job."""

    def __init__(self, topic: str, job_id: str, code: ErrorCode) -> None:
        self.topic = topic
        self.job_id = job_id
        self.code = code
        why = "another lease holds it" if code is ErrorCode.STALE_TOKEN else "it is not leased"
        super().__init__(f"lease on {topic}/{job_id} was lost: {why}")


class ConfigError(RedelayError):
    """A process's configuration disagrees with what is stored or cannot work."""


class RedisServerNotFound(RedelayError):
    """No redis-server binary could be found for an embedded or test server."""
