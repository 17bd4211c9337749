"""Lease and Job write their __init__ by hand (actors/_frozen.py): they must still be the frozen
dataclasses their fields say, built exactly as the generated __init__ would build them."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from actors.job import Job
from actors.values import Lease

LEASE: dict[str, Any] = {
    "topic": "t",
    "id": "a1",
    "token": "tok",
    "deadline_ms": 9,
    "body": b'{"x":1}',
    "attempt": 2,
    "due_ms": 5,
    "callback": "https://example.com/cb",
    "lease_ms": 30_000,
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
}
JOB: dict[str, Any] = {
    "topic": "t",
    "id": "a1",
    "body": {"x": 1},
    "body_bytes": b'{"x":1}',
    "attempt": 2,
    "due_ms": 5,
    "deadline_ms": 9,
    "token": "tok",
    "callback": "https://example.com/cb",
}


@pytest.mark.parametrize(("cls", "values"), [(Lease, LEASE), (Job, JOB)])
def test_the_init_takes_every_field_in_order_with_its_default(
    cls: type[Any], values: dict[str, Any]
) -> None:
    # A field added to the class but not to its hand-written __init__ fails here.
    fields = dataclasses.fields(cls)
    parameters = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        missing = field.default is dataclasses.MISSING
        assert parameter.default == (inspect.Parameter.empty if missing else field.default)
    assert list(values) == [f.name for f in fields]


@pytest.mark.parametrize(("cls", "values"), [(Lease, LEASE), (Job, JOB)])
def test_built_by_keyword_or_position_it_holds_every_value(
    cls: type[Any], values: dict[str, Any]
) -> None:
    by_keyword = cls(**values)
    by_position = cls(*values.values())
    for built in (by_keyword, by_position):
        assert type(built) is cls
        assert dataclasses.asdict(built) == values
    assert by_keyword == by_position


def test_a_lease_hashes_by_its_values() -> None:
    assert hash(Lease(**LEASE)) == hash(Lease(*LEASE.values()))  # a Job's body may be a dict


@pytest.mark.parametrize(("cls", "values"), [(Lease, LEASE), (Job, JOB)])
def test_it_stays_frozen_and_copies_as_one(cls: type[Any], values: dict[str, Any]) -> None:
    built = cls(**values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.token = "other"
    changed = dataclasses.replace(built, attempt=3)
    assert type(changed) is cls
    assert changed.attempt == 3
    assert changed.token == built.token
    assert pickle.loads(pickle.dumps(built)) == built
    assert copy.deepcopy(built) == built


def test_the_defaults_apply() -> None:
    lease = Lease(*list(LEASE.values())[:-1])
    job = Job(*list(JOB.values())[:-1])
    assert lease.traceparent is None
    assert job.callback is None
