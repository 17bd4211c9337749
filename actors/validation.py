"""Checks at the boundary. Each failure names the field and the limit; nothing is written."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

from . import _constants as c
from .errors import ValidationError

# Topics and namespaces: no "|" (the member separator), no braces (hash tags), no whitespace.
_TOPIC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]*")
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")
# Ids may carry a little more (order numbers, UUIDs, e-mail-like keys) but still no "|", braces
# or whitespace, so a member prints and splits unambiguously.
_JOB_ID_RE = re.compile(r"[A-Za-z0-9._:@/+=\-]+")


def _check_name(field: str, value: object, pattern: re.Pattern[str], max_chars: int) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty")
    if len(value) > max_chars:
        raise ValidationError(field, f"is {len(value)} characters long", f"{max_chars} characters")
    if not pattern.fullmatch(value):
        raise ValidationError(
            field, f"{value!r} has characters outside the allowed set", pattern.pattern
        )
    return value


def topic(value: object, field: str = "topic") -> str:
    return _check_name(field, value, _TOPIC_RE, c.TOPIC_MAX_CHARS)


def job_id(value: object, field: str = "id") -> str:
    return _check_name(field, value, _JOB_ID_RE, c.JOB_ID_MAX_CHARS)


def namespace(value: object, field: str = "namespace") -> str:
    return _check_name(field, value, _NAMESPACE_RE, c.NAMESPACE_MAX_CHARS)


def body(value: Any, field: str = "body") -> bytes:
    """Serializes a body with orjson and checks its size."""
    try:
        encoded = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise ValidationError(field, f"is not JSON-serializable: {exc}") from None
    if len(encoded) > c.BODY_MAX_BYTES:
        raise ValidationError(
            field, f"is {len(encoded)} bytes as JSON", f"{c.BODY_MAX_BYTES} bytes"
        )
    return encoded


def _number(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValidationError(field, f"must be finite, got {value}")
    return float(value)


def delay_ms(value: object, field: str = "delay", allow_negative: bool = False) -> int:
    """A delay given in milliseconds: finite, within ten years (past due allowed for `at`)."""
    number = _number(field, value)
    lower = -c.DELAY_MAX_MS if allow_negative else 0
    if number < lower or number > c.DELAY_MAX_MS:
        raise ValidationError(field, f"is {number:g} ms", f"0 to {c.DELAY_MAX_MS} ms (ten years)")
    return round(number)


def schedule_ms(value: object, field: str = "retry") -> tuple[int, ...]:
    """A retry schedule: a non-empty list of finite non-negative delays in milliseconds."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError(field, f"must be a list of delays, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty (give [] of at least one delay)")
    if len(value) > c.SCHEDULE_MAX_STEPS:
        raise ValidationError(field, f"has {len(value)} steps", f"{c.SCHEDULE_MAX_STEPS} steps")
    return tuple(delay_ms(step, f"{field}[{n}]") for n, step in enumerate(value))


def lease_ms(value: object, field: str = "lease") -> int:
    number = _number(field, value)
    if number < c.LEASE_MS_MIN or number > c.LEASE_MS_MAX:
        raise ValidationError(
            field, f"is {number:g} ms", f"{c.LEASE_MS_MIN} to {c.LEASE_MS_MAX} ms"
        )
    return round(number)


def callback_url(value: object, field: str = "callback") -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if len(value) > c.CALLBACK_URL_MAX_CHARS:
        raise ValidationError(
            field, f"is {len(value)} characters long", f"{c.CALLBACK_URL_MAX_CHARS} characters"
        )
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(field, f"{value!r} is not an http or https URL with a host")
    return value


def reason(value: str) -> str:
    """Failure reasons are free text, cut (not refused) so a huge traceback cannot bloat the log."""
    return value[: c.REASON_MAX_CHARS]


def count(value: object, field: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {type(value).__name__}")
    if value < 1 or value > maximum:
        raise ValidationError(field, f"is {value}", f"1 to {maximum}")
    return value
