"""Checks at the boundary. Each failure names the field and the limit; nothing is written."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from actors._constants import (
    BODY_MAX_BYTES,
    BODY_MAX_DEPTH,
    CALLBACK_URL_MAX_CHARS,
    CONSUMER_NAME_MAX_CHARS,
    DELAY_MAX_MS,
    JOB_ID_MAX_CHARS,
    LEASE_MS_MAX,
    LEASE_MS_MIN,
    NAMESPACE_MAX_CHARS,
    REASON_MAX_CHARS,
    SCHEDULE_MAX_STEPS,
    TOPIC_MAX_CHARS,
    TRACEBACK_MAX_BYTES,
)
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
    checked = _check_name(field, value, _TOPIC_RE, TOPIC_MAX_CHARS, _TOPIC_CHARS)
    if len(_VALID_TOPICS) < _VALID_TOPICS_MAX:
        _VALID_TOPICS.add(checked)
    return checked


def job_id(value: object, field: str = "id") -> str:
    return _check_name(field, value, _JOB_ID_RE, JOB_ID_MAX_CHARS, _JOB_ID_CHARS)


def namespace(value: object, field: str = "namespace") -> str:
    return _check_name(field, value, _NAMESPACE_RE, NAMESPACE_MAX_CHARS, _NAMESPACE_CHARS)


def consumer_name(value: object, field: str = "consumer_name") -> str:
    """A worker's name, as audit events (``by``), logs and its heartbeat key carry it: an id's
    characters, which the default ``<host>:<pid>:<hex>`` keeps to."""
    return _check_name(field, value, _JOB_ID_RE, CONSUMER_NAME_MAX_CHARS, _JOB_ID_CHARS)


def body(value: Any, field: str = "body") -> bytes:
    """Serializes a body with orjson and checks its size and that every number is finite."""
    try:
        encoded = orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError is one
        if "Recursion limit" in str(exc):
            raise ValidationError(
                field, "is nested too deeply", f"{BODY_MAX_DEPTH} levels of arrays and objects"
            ) from None
        raise ValidationError(
            field, f"is not JSON-serializable: {exc}", "a value orjson can serialize"
        ) from None
    # orjson writes NaN and Infinity as null, which would change the body silently; a body
    # without any null cannot hold one, so only those are walked.
    if b"null" in encoded:
        where = _non_finite_path(value, field)
        if where is not None:
            raise ValidationError(
                where, "is NaN or Infinity, which JSON cannot hold", "finite numbers only"
            )
    if len(encoded) > BODY_MAX_BYTES:
        raise ValidationError(field, f"is {len(encoded)} bytes as JSON", f"{BODY_MAX_BYTES} bytes")
    return encoded


_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _key_path(path: str, key: object) -> str:
    if isinstance(key, str) and _IDENTIFIER_RE.fullmatch(key):
        return f"{path}.{key}"
    shown = orjson.dumps(key).decode() if isinstance(key, str) else repr(key)
    return f"{path}[{shown}]"


def _non_finite_path(value: Any, path: str) -> str | None:
    """The path of the first NaN or infinite float in ``value`` (as orjson walks it), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    children: Iterable[tuple[str, Any]]
    if isinstance(value, dict):
        children = ((_key_path(path, k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        children = ((f"{path}[{n}]", v) for n, v in enumerate(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = (
            (_key_path(path, f.name), getattr(value, f.name)) for f in dataclasses.fields(value)
        )
    else:
        return None
    for child_path, child in children:
        found = _non_finite_path(child, child_path)
        if found is not None:
            return found
    return None


# Durations are checked in milliseconds but reported in the unit the caller used: "s" for the
# public API (seconds), "ms" for the store's callers. Either way a readable size comes with it.
Unit = Literal["s", "ms"]

_MS_PER: tuple[tuple[str, float], ...] = (
    ("year", 365.25 * 86_400_000),
    ("day", 86_400_000),
    ("hour", 3_600_000),
    ("minute", 60_000),
    ("second", 1_000),
)

# Epoch seconds above this are far past year 5000: almost certainly milliseconds.
EPOCH_S_MAX_PLAUSIBLE = 1e11


def _plain(number: float) -> str:
    """A number without scientific notation: 3155760000000, 1.5, 0.25."""
    if number == int(number):
        return str(int(number))
    return f"{number:.3f}".rstrip("0").rstrip(".")


def readable_ms(ms: float) -> str:
    """A duration for people: 100 years, 1.5 hours, 250 ms (three significant digits)."""
    size = abs(ms)
    for name, unit_ms in _MS_PER:
        if size >= unit_ms:
            value = float(f"{ms / unit_ms:.3g}")
            return f"{_plain(value)} {name}{'' if abs(value) == 1 else 's'}"
    return f"{_plain(float(f'{ms:.3g}') if size >= 1 else round(ms, 3))} ms"


def _in_unit(ms: float, unit: Unit) -> str:
    """A duration in the caller's unit: readable for seconds, exact (and readable) for ms."""
    if unit == "s":
        return readable_ms(ms)
    exact = f"{_plain(ms)} ms"
    return exact if abs(ms) < 1_000 else f"{exact} ({readable_ms(ms)})"


# Pure, and asked with the same few arguments for every job added: computed once each.
@functools.cache
def _range(lower_ms: int, upper_ms: int, unit: Unit, note: str = "") -> str:
    scale = 1_000 if unit == "s" else 1
    text = f"{_plain(lower_ms / scale)} to {_plain(upper_ms / scale)} {unit}"
    return f"{text} ({note})" if note else text


def _number(field: str, value: object, limit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"must be a number, got {type(value).__name__}", limit)
    if not math.isfinite(value):
        raise ValidationError(field, f"must be finite, got {value}", limit)
    return float(value)


def _bounded_ms(
    field: str, number_ms: float, lower_ms: int, upper_ms: int, unit: Unit, limit: str
) -> int:
    if number_ms < lower_ms:
        given = _in_unit(number_ms, unit)  # text only for an error: a valid add spends nothing
        if lower_ms == 0:
            raise ValidationError(field, f"is {given}, which is negative", limit)
        minimum = _in_unit(lower_ms, unit)
        raise ValidationError(field, f"is {given}, less than the minimum of {minimum}", limit)
    if number_ms > upper_ms:
        given = _in_unit(number_ms, unit)
        maximum = _in_unit(upper_ms, unit)
        raise ValidationError(field, f"is {given}, more than the limit of {maximum}", limit)
    return round(number_ms)


def delay_ms(
    value: object, field: str = "delay", allow_negative: bool = False, unit: Unit = "ms"
) -> int:
    """A delay given in milliseconds: finite, within ten years (past due allowed for `at`).

    ``unit`` is only how errors speak: the unit the caller gave the value in before converting.
    """
    lower = -DELAY_MAX_MS if allow_negative else 0
    limit = _range(lower, DELAY_MAX_MS, unit, "ten years")
    number = _number(field, value, limit)
    return _bounded_ms(field, number, lower, DELAY_MAX_MS, unit, limit)


def due_ms(value: object, now_ms: int, field: str = "at") -> int:
    """An absolute due time in ms since the epoch, at most ten years from now either way."""
    limit = f"within {DELAY_MAX_MS} ms (ten years) of now"
    number = _number(field, value, limit)
    offset = number - now_ms
    if abs(offset) > DELAY_MAX_MS:
        when = "from now" if offset > 0 else "ago"
        raise ValidationError(
            field,
            f"is {_in_unit(abs(offset), 'ms')} {when}, more than the limit of "
            f"{_in_unit(DELAY_MAX_MS, 'ms')}",
            limit,
        )
    return round(number)


def due_at_s(value: object, now_ms: int, field: str = "at") -> int:
    """The public API's ``at`` in epoch seconds, as a due time in ms: a past time means now.

    Still a finite number from the epoch to ten years from now; a number that can only be
    milliseconds (or microseconds) is refused with that hint rather than read as a far future.
    """
    limit = "epoch seconds, from 0 (a past time means now) to ten years from now"
    number = _number(field, value, limit)
    if number > EPOCH_S_MAX_PLAUSIBLE:
        raise ValidationError(
            field,
            f"{_plain(number)} looks like milliseconds since the epoch; at takes seconds "
            f"(divide by 1000: {_plain(number / 1000)})",
            limit,
        )
    if number < 0:
        raise ValidationError(field, f"{_plain(number)} is before the epoch (1970)", limit)
    offset_ms = number * 1000 - now_ms
    if offset_ms > DELAY_MAX_MS:
        raise ValidationError(
            field,
            f"is {_in_unit(offset_ms, 's')} from now, more than the limit of "
            f"{_in_unit(DELAY_MAX_MS, 's')}",
            limit,
        )
    return max(round(number * 1000), now_ms)


def schedule_ms(value: object, field: str = "retry", unit: Unit = "ms") -> tuple[int, ...]:
    """A retry schedule: a non-empty list of finite non-negative delays in milliseconds."""
    limit = f"a list of 1 to {SCHEDULE_MAX_STEPS} delays in {unit}"
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError(field, f"must be a list of delays, got {type(value).__name__}", limit)
    if not value:
        raise ValidationError(field, "must not be empty", limit)
    if len(value) > SCHEDULE_MAX_STEPS:
        raise ValidationError(field, f"has {len(value)} steps", f"{SCHEDULE_MAX_STEPS} steps")
    return tuple(delay_ms(step, f"{field}[{n}]", unit=unit) for n, step in enumerate(value))


def lease_ms(value: object, field: str = "lease", unit: Unit = "ms") -> int:
    limit = _range(LEASE_MS_MIN, LEASE_MS_MAX, unit)
    number = _number(field, value, limit)
    return _bounded_ms(field, number, LEASE_MS_MIN, LEASE_MS_MAX, unit, limit)


def callback_url(value: object, field: str = "callback") -> str:
    limit = f"an http or https URL with a host, at most {CALLBACK_URL_MAX_CHARS} characters"
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}", limit)
    if len(value) > CALLBACK_URL_MAX_CHARS:
        raise ValidationError(field, f"is {len(value)} characters long", limit)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(field, f"{value!r} is not an http or https URL with a host", limit)
    return value


def traceback_tail(value: str) -> str:
    """The last TRACEBACK_MAX_BYTES of a traceback (its end names the error), as whole
    characters."""
    data = value.encode()
    if len(data) <= TRACEBACK_MAX_BYTES:
        return value
    return data[-TRACEBACK_MAX_BYTES:].decode(errors="ignore")


def reason(value: str) -> str:
    """Failure reasons are free text, cut (not refused) so a huge traceback cannot bloat the log."""
    return value[:REASON_MAX_CHARS]


def count(value: object, field: str, maximum: int, *, minimum: int = 1) -> int:
    limit = f"an integer from {minimum} to {maximum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {type(value).__name__}", limit)
    if value < minimum or value > maximum:
        raise ValidationError(field, f"is {value}", limit)
    return value


IfExists = Literal["error", "keep", "replace"]
_IF_EXISTS: tuple[IfExists, ...] = ("error", "keep", "replace")


def if_exists(value: object, replace: bool = False) -> IfExists:
    """What add does with an existing job: ``value``, or "replace" for the older
    ``replace=True`` (both given must agree)."""
    limit = '"error", "keep" or "replace"'
    if value is None:
        return "replace" if replace else "error"
    if value not in _IF_EXISTS:
        raise ValidationError("if_exists", f"is {value!r}", limit)
    if replace and value != "replace":
        raise ValidationError(
            "if_exists", f"is {value!r} but replace=True was given too", "give one of them"
        )
    return value
