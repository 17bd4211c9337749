"""Checks at the boundary. Each failure names the field and the limit; nothing is written."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

from actors import _constants as c
from actors.errors import ValidationError

# Topics and namespaces: no "|" (the member separator), no braces (hash tags), no whitespace.
_TOPIC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]*")
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")
# Ids may carry a little more (order numbers, UUIDs, e-mail-like keys) but still no "|", braces
# or whitespace, so a member prints and splits unambiguously.
_JOB_ID_RE = re.compile(r"[A-Za-z0-9._:@/+=\-]+")


# What each name may hold, as the error message says it.
_TOPIC_CHARS = "letters, digits and . _ : - (no '|', braces or whitespace)"
_NAMESPACE_CHARS = "letters, digits and . _ - (no '|', braces or whitespace)"
_JOB_ID_CHARS = "letters, digits and . _ : @ / + = - (no '|', braces or whitespace)"


def _check_name(
    field: str, value: object, pattern: re.Pattern[str], max_chars: int, chars: str
) -> str:
    limit = f"1 to {max_chars} characters: {chars}"
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}", limit)
    if not value:
        raise ValidationError(field, "must not be empty", limit)
    if len(value) > max_chars:
        raise ValidationError(field, f"is {len(value)} characters long", f"{max_chars} characters")
    if not pattern.fullmatch(value):
        raise ValidationError(field, f"{value!r} has characters outside the allowed set", chars)
    return value


# Topics are few and repeat on every job of a batch: remember the ones already found valid.
_VALID_TOPICS: set[str] = set()
_VALID_TOPICS_MAX = 10_000


def topic(value: object, field: str = "topic") -> str:
    if isinstance(value, str) and value in _VALID_TOPICS:
        return value
    checked = _check_name(field, value, _TOPIC_RE, c.TOPIC_MAX_CHARS, _TOPIC_CHARS)
    if len(_VALID_TOPICS) < _VALID_TOPICS_MAX:
        _VALID_TOPICS.add(checked)
    return checked


def job_id(value: object, field: str = "id") -> str:
    return _check_name(field, value, _JOB_ID_RE, c.JOB_ID_MAX_CHARS, _JOB_ID_CHARS)


def namespace(value: object, field: str = "namespace") -> str:
    return _check_name(field, value, _NAMESPACE_RE, c.NAMESPACE_MAX_CHARS, _NAMESPACE_CHARS)


def body(value: Any, field: str = "body") -> bytes:
    """Serializes a body with orjson and checks its size."""
    try:
        encoded = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise ValidationError(
            field, f"is not JSON-serializable: {exc}", "a value orjson can serialize"
        ) from None
    if len(encoded) > c.BODY_MAX_BYTES:
        raise ValidationError(
            field, f"is {len(encoded)} bytes as JSON", f"{c.BODY_MAX_BYTES} bytes"
        )
    return encoded


def _number(field: str, value: object, limit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"must be a number, got {type(value).__name__}", limit)
    if not math.isfinite(value):
        raise ValidationError(field, f"must be finite, got {value}", limit)
    return float(value)


def delay_ms(value: object, field: str = "delay", allow_negative: bool = False) -> int:
    """A delay given in milliseconds: finite, within ten years (past due allowed for `at`)."""
    lower = -c.DELAY_MAX_MS if allow_negative else 0
    limit = f"{lower} to {c.DELAY_MAX_MS} ms (ten years)"
    number = _number(field, value, limit)
    if number < lower or number > c.DELAY_MAX_MS:
        raise ValidationError(field, f"is {number:g} ms", limit)
    return round(number)


def due_ms(value: object, now_ms: int, field: str = "at") -> int:
    """An absolute due time in ms since the epoch, at most ten years from now either way."""
    limit = f"within {c.DELAY_MAX_MS} ms (ten years) of now"
    number = _number(field, value, limit)
    if abs(number - now_ms) > c.DELAY_MAX_MS:
        raise ValidationError(field, f"is {number - now_ms:+g} ms from now", limit)
    return round(number)


def schedule_ms(value: object, field: str = "retry") -> tuple[int, ...]:
    """A retry schedule: a non-empty list of finite non-negative delays in milliseconds."""
    limit = f"a list of 1 to {c.SCHEDULE_MAX_STEPS} delays in ms"
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError(field, f"must be a list of delays, got {type(value).__name__}", limit)
    if not value:
        raise ValidationError(field, "must not be empty", limit)
    if len(value) > c.SCHEDULE_MAX_STEPS:
        raise ValidationError(field, f"has {len(value)} steps", f"{c.SCHEDULE_MAX_STEPS} steps")
    return tuple(delay_ms(step, f"{field}[{n}]") for n, step in enumerate(value))


def lease_ms(value: object, field: str = "lease") -> int:
    limit = f"{c.LEASE_MS_MIN} to {c.LEASE_MS_MAX} ms"
    number = _number(field, value, limit)
    if number < c.LEASE_MS_MIN or number > c.LEASE_MS_MAX:
        raise ValidationError(field, f"is {number:g} ms", limit)
    return round(number)


def callback_url(value: object, field: str = "callback") -> str:
    limit = f"an http or https URL with a host, at most {c.CALLBACK_URL_MAX_CHARS} characters"
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}", limit)
    if len(value) > c.CALLBACK_URL_MAX_CHARS:
        raise ValidationError(field, f"is {len(value)} characters long", limit)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(field, f"{value!r} is not an http or https URL with a host", limit)
    return value


def reason(value: str) -> str:
    """Failure reasons are free text, cut (not refused) so a huge traceback cannot bloat the log."""
    return value[: c.REASON_MAX_CHARS]


def count(value: object, field: str, maximum: int) -> int:
    limit = f"an integer from 1 to {maximum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {type(value).__name__}", limit)
    if value < 1 or value > maximum:
        raise ValidationError(field, f"is {value}", limit)
    return value
