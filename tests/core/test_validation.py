"""Bad input: each path raises ValidationError naming the field and the limit, and writes nothing.

Every case runs against a shard that already holds a job, a lease and a topic, and compares a
fingerprint of the whole server (every key and its DUMP) before and after the call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from actors import _constants as c
from actors.clock import FakeClock
from actors.errors import ValidationError
from actors.storage.store import Store
from actors.values import TopicConfig


@pytest.fixture
def seeded(store: Store) -> tuple[Store, str]:
    """A store holding one delayed job and one leased job; returns it and the lease token."""
    store.add(store.new_job("t", "delayed", {"x": 1}, delay_ms=1_000))
    store.add(store.new_job("t", "leased"))
    (lease,) = store.lease("t", 1)
    return store, lease.token


def fingerprint(client: redis.Redis) -> dict[bytes, bytes]:
    return {key: client.dump(key) for key in sorted(client.keys("*"))}  # type: ignore[misc]


def refused(
    store: Store, call: Callable[[], object], field: str, limit: str | None = None
) -> ValidationError:
    """Runs ``call``: it must raise naming ``field`` and ``limit``, and write nothing."""
    before = fingerprint(store.client)
    with pytest.raises(ValidationError) as caught:
        call()
    error = caught.value
    assert error.field == field, error
    assert error.limit, f"no limit in {error}"
    if limit is not None:
        assert limit in error.limit, error
    assert str(error).startswith(f"{field}: ")
    assert isinstance(error, ValueError)  # callers that catch ValueError still see it
    assert fingerprint(store.client) == before
    return error


# -- topics and ids -------------------------------------------------------------------------

BAD_NAMES: list[tuple[object, str | None]] = [
    ("", "1 to"),
    ("a|b", "no '|'"),
    ("a{b", "braces"),
    ("a}b", "braces"),
    ("{tag}", "braces"),
    ("a b", "whitespace"),
    ("a\nb", "whitespace"),
    ("caf\u00e9", "letters"),
    (5, "1 to"),
    (None, "1 to"),
]


@pytest.mark.parametrize(("name", "limit"), BAD_NAMES)
def test_a_bad_topic_is_refused_everywhere(
    seeded: tuple[Store, str], name: Any, limit: str | None
) -> None:
    store, token = seeded
    refused(store, lambda: store.add(store.new_job(name, "j")), "topic", limit)
    refused(store, lambda: store.lease(name, 1), "topic", limit)
    refused(store, lambda: store.ack(name, "j", token), "topic", limit)
    refused(store, lambda: store.fail(name, "j", token, "x"), "topic", limit)
    refused(store, lambda: store.extend_many([(name, "j", token, 1_000)]), "topic", limit)
    refused(store, lambda: store.release_many([(name, "j", token)]), "topic", limit)
    refused(store, lambda: store.cancel(name, "j"), "topic", limit)
    refused(store, lambda: store.get(name, "j"), "topic", limit)
    refused(store, lambda: store.requeue_dead([(name, "j")]), "topic", limit)
    refused(store, lambda: store.purge_dead([(name, "j")]), "topic", limit)
    refused(store, lambda: store.configure_topic(name, TopicConfig()), "topic", limit)


@pytest.mark.parametrize(("name", "limit"), BAD_NAMES)
def test_a_bad_job_id_is_refused_everywhere(
    seeded: tuple[Store, str], name: Any, limit: str | None
) -> None:
    store, token = seeded
    refused(store, lambda: store.add(store.new_job("t", name)), "id", limit)
    refused(store, lambda: store.ack("t", name, token), "id", limit)
    refused(store, lambda: store.fail("t", name, token, "x"), "id", limit)
    refused(store, lambda: store.extend_many([("t", name, token, 1_000)]), "id", limit)
    refused(store, lambda: store.release_many([("t", name, token)]), "id", limit)
    refused(store, lambda: store.cancel("t", name), "id", limit)
    refused(store, lambda: store.get("t", name), "id", limit)
    refused(store, lambda: store.requeue_dead([("t", name)]), "id", limit)
    refused(store, lambda: store.purge_dead([("t", name)]), "id", limit)


def test_a_stale_ack_naming_a_member_with_a_separator_writes_no_event(
    seeded: tuple[Store, str],
) -> None:
    # "t|leased" as a topic would address the member "t|leased|j"; refused before any script.
    store, token = seeded
    refused(store, lambda: store.ack("t|leased", "j", token), "topic")


def test_names_at_their_length_limit_are_accepted_and_one_more_is_refused(store: Store) -> None:
    topic, job_id = "t" * c.TOPIC_MAX_CHARS, "i" * c.JOB_ID_MAX_CHARS
    store.add(store.new_job(topic, job_id))
    assert store.get(topic, job_id) is not None
    refused(store, lambda: store.new_job(topic + "t", "j"), "topic", f"{c.TOPIC_MAX_CHARS}")
    refused(store, lambda: store.new_job("t", job_id + "i"), "id", f"{c.JOB_ID_MAX_CHARS}")


def test_ids_may_hold_uuids_emails_and_paths(store: Store) -> None:
    for job_id in ("3f2a-9c", "user@example.com", "orders/42", "a+b=c", "x:y.z_1"):
        store.add(store.new_job("t", job_id))
        assert store.get("t", job_id) is not None


@pytest.mark.parametrize("name", ["", "a{b}", "a|b", "a b", "n" * (c.NAMESPACE_MAX_CHARS + 1)])
def test_a_bad_namespace_is_refused(
    redis_client: redis.Redis, fake_clock: FakeClock, name: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Store(redis_client, name, fake_clock)
    assert caught.value.field == "namespace" and caught.value.limit
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "must not be empty"),
        ("worker 1", "outside the allowed set"),
        ("w{1}", "outside the allowed set"),
        ("w|1", "outside the allowed set"),
        ("w\n1", "outside the allowed set"),  # would forge a line in a log
        ("w" * (c.CONSUMER_NAME_MAX_CHARS + 1), "characters long"),
        (7, "must be a string"),
    ],
)
def test_a_bad_consumer_name_is_refused_before_anything_starts(
    tmp_path: Path, name: object, message: str
) -> None:
    from actors import DelayQueue

    data_dir = tmp_path / "data"
    with pytest.raises(ValidationError) as caught:
        DelayQueue(None, consumer_name=name, data_dir=data_dir)  # type: ignore[arg-type]
    assert caught.value.field == "consumer_name" and message in caught.value.message
    assert caught.value.limit
    assert not data_dir.exists()  # no embedded server was started for it


def test_a_consumer_name_may_hold_a_host_a_pid_and_an_address() -> None:
    from actors import DelayQueue

    for name in ("web-1.example.com:4242:0f3a9c", "orders@host-7", "pool/2", "w_1+x=y"):
        queue = DelayQueue("redis://127.0.0.1:1/0", consumer_name=name, producer_only=True)
        assert queue.consumer == name
        queue.close()


# -- bodies ---------------------------------------------------------------------------------


def test_a_body_over_the_size_limit_is_refused(seeded: tuple[Store, str]) -> None:
    store, _ = seeded
    just_fits = "x" * (c.BODY_MAX_BYTES - 2)  # the two quotes make it exactly the limit
    store.add(store.new_job("t", "big", just_fits))
    too_big = "x" * (c.BODY_MAX_BYTES - 1)
    error = refused(store, lambda: store.new_job("t", "j", too_big), "body", str(c.BODY_MAX_BYTES))
    assert str(c.BODY_MAX_BYTES + 1) in str(error)


@pytest.mark.parametrize("body", [object(), {1, 2}, b"bytes", {1: "int key"}, 2**70])
def test_a_body_that_is_not_json_is_refused(seeded: tuple[Store, str], body: object) -> None:
    store, _ = seeded
    refused(store, lambda: store.new_job("t", "j", body), "body", "orjson")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"x": math.nan}, "body.x"),
        ({"items": [1, 2, math.inf]}, "body.items[2]"),
        ([{"a-b": -math.inf}], 'body[0]["a-b"]'),
    ],
)
def test_a_body_holding_nan_or_infinity_is_refused(
    seeded: tuple[Store, str], body: object, field: str
) -> None:
    # orjson would store them as null: the job would run with a different body.
    store, _ = seeded
    refused(store, lambda: store.new_job("t", "j", body), field, "finite numbers")


# -- delays and due times -------------------------------------------------------------------

BAD_DELAYS: list[object] = [
    math.inf,
    -math.inf,
    math.nan,
    -1,
    -0.6,
    c.DELAY_MAX_MS + 1,
    "5",
    True,
]


@pytest.mark.parametrize("delay", BAD_DELAYS)
def test_a_bad_delay_is_refused(seeded: tuple[Store, str], delay: Any) -> None:
    store, _ = seeded
    refused(store, lambda: store.new_job("t", "j", delay_ms=delay), "delay", "ten years")


def test_a_delay_at_the_limit_is_accepted(store: Store, fake_clock: FakeClock) -> None:
    job = store.new_job("t", "j", delay_ms=c.DELAY_MAX_MS)
    assert job.due_ms == fake_clock.now_ms() + c.DELAY_MAX_MS


@pytest.mark.parametrize("due", [math.inf, math.nan, "tomorrow", 0, 2**63])
def test_a_bad_due_time_is_refused(seeded: tuple[Store, str], due: Any) -> None:
    store, _ = seeded
    refused(store, lambda: store.new_job("t", "j", due_ms=due), "at", "ten years")


def test_a_past_due_time_is_accepted_and_the_job_is_ready(
    store: Store, fake_clock: FakeClock
) -> None:
    job = store.new_job("t", "j", due_ms=fake_clock.now_ms() - 5_000)
    store.add(job)
    info = store.get("t", "j")
    assert info is not None and info.state == "ready" and info.due_ms == job.due_ms


def test_delay_and_due_time_together_are_refused(seeded: tuple[Store, str]) -> None:
    store, _ = seeded
    refused(store, lambda: store.new_job("t", "j", delay_ms=1, due_ms=5), "delay", "one of")


@pytest.mark.parametrize("after", [-1, math.inf, math.nan, c.DELAY_MAX_MS + 1, "soon"])
def test_a_bad_retry_override_is_refused(seeded: tuple[Store, str], after: Any) -> None:
    store, token = seeded
    refused(store, lambda: store.fail("t", "leased", token, "x", after), "retry_after")


# -- schedules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "field", "limit"),
    [
        ([], "retry", "1 to 100"),
        ((), "retry", "1 to 100"),
        ("1000", "retry", "a list"),
        (1000, "retry", "a list"),
        ({"a": 1}, "retry", "a list"),
        ([1000, -1], "retry[1]", "0 to"),
        ([math.inf], "retry[0]", "ten years"),
        ([10, math.nan], "retry[1]", "ten years"),
        ([10, "x"], "retry[1]", "ten years"),
        ([1] * (c.SCHEDULE_MAX_STEPS + 1), "retry", f"{c.SCHEDULE_MAX_STEPS} steps"),
    ],
)
def test_a_bad_schedule_is_refused(
    seeded: tuple[Store, str], schedule: Any, field: str, limit: str
) -> None:
    store, _ = seeded
    refused(store, lambda: store.new_job("t", "j", retry_ms=schedule), field, limit)
    config = TopicConfig(retry_ms=schedule, lease_ms=1_000)
    refused(store, lambda: store.configure_topic("t", config), field, limit)


def test_a_schedule_at_the_limit_is_accepted(store: Store) -> None:
    job = store.new_job("t", "j", retry_ms=[0] * c.SCHEDULE_MAX_STEPS)
    assert job.retry_ms == (0,) * c.SCHEDULE_MAX_STEPS


# -- leases ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lease", [c.LEASE_MS_MIN - 1, c.LEASE_MS_MAX + 1, 0, -5, math.inf, math.nan, "1s"]
)
def test_a_bad_lease_is_refused(seeded: tuple[Store, str], lease: Any) -> None:
    store, token = seeded
    limit = f"{c.LEASE_MS_MIN} to {c.LEASE_MS_MAX} ms"
    refused(store, lambda: store.new_job("t", "j", lease_ms=lease), "lease", limit)
    refused(store, lambda: store.extend_many([("t", "leased", token, lease)]), "extend", limit)
    config = TopicConfig(retry_ms=(1,), lease_ms=lease)
    refused(store, lambda: store.configure_topic("t", config), "lease", limit)


@pytest.mark.parametrize("limit", [0, -1, c.CARRY_LIMIT_MAX + 1, 1.5, "10", True])
def test_a_bad_carry_lease_or_expire_bound_is_refused(
    seeded: tuple[Store, str], limit: Any
) -> None:
    store, _ = seeded
    refused(store, lambda: store.carry(limit), "limit", "1 to")
    refused(store, lambda: store.lease("t", limit), "limit", "1 to")
    refused(store, lambda: store.expire(limit), "limit", "1 to")


# -- callbacks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "http://",
        "example.com/cb",
        "https://example.com/" + "x" * c.CALLBACK_URL_MAX_CHARS,
        42,
    ],
)
def test_a_bad_callback_url_is_refused(seeded: tuple[Store, str], url: Any) -> None:
    store, _ = seeded
    refused(store, lambda: store.new_job("t", "j", callback=url), "callback", "http or https")


# -- batches --------------------------------------------------------------------------------


def test_a_batch_over_the_limit_is_refused(seeded: tuple[Store, str]) -> None:
    store, token = seeded
    one = store.new_job("t", "j")
    too_many = [one] * (c.BATCH_MAX_JOBS + 1)
    limit = f"{c.BATCH_MAX_JOBS} per call"
    refused(store, lambda: store.add_many(too_many), "jobs", limit)
    refused(store, lambda: store.add_many(too_many, replace=True), "jobs", limit)
    acks = [("t", "leased", token)] * (c.BATCH_MAX_JOBS + 1)
    refused(store, lambda: store.ack_many(acks), "acks", limit)
    refused(store, lambda: store.release_many(acks), "releases", limit)
    fails = [("t", "leased", token, "x", None)] * (c.BATCH_MAX_JOBS + 1)
    refused(store, lambda: store.fail_many(fails), "failures", limit)
    extensions = [("t", "leased", token, 1_000)] * (c.BATCH_MAX_JOBS + 1)
    refused(store, lambda: store.extend_many(extensions), "extensions", limit)
    names = [("t", "j")] * (c.BATCH_MAX_JOBS + 1)
    refused(store, lambda: store.requeue_dead(names), "jobs", limit)
    refused(store, lambda: store.purge_dead(names), "jobs", limit)


def test_a_job_twice_in_one_batch_is_refused(seeded: tuple[Store, str]) -> None:
    store, _ = seeded
    batch = [store.new_job("t", "a"), store.new_job("t", "b"), store.new_job("t", "a", 2)]
    error = refused(store, lambda: store.add_many(batch), "jobs", "once per call")
    assert "t/a" in str(error)
    refused(store, lambda: store.add_many(batch, replace=True), "jobs", "once per call")


def test_a_bad_item_late_in_a_batch_writes_nothing_for_the_good_ones(
    seeded: tuple[Store, str],
) -> None:
    store, token = seeded
    fails = [("t", "leased", token, "x", None), ("t", "other", "0-0", "x", -5)]
    refused(store, lambda: store.fail_many(fails), "retry_after")
    info = store.get("t", "leased")
    assert info is not None and info.state == "leased"


def test_the_facades_add_many_names_the_item_and_its_field_once(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    from actors import DelayQueue

    queue = DelayQueue(redis_client, "facade", clock=fake_clock, producer_only=True)
    good = {"topic": "t", "id": "ok"}
    error = refused(
        queue.store,
        lambda: queue.add_many([good, {"topic": "t|x", "id": "j"}]),
        "jobs[1].topic",
    )
    assert str(error).count("(limit:") == 1, error
    assert str(error).count("topic:") == 1, error


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        ([None], "jobs[0]"),
        ([{"topic": "t", "id": "ok"}, None], "jobs[1]"),
        (["topic"], "jobs[0]"),  # a string is not read as its characters' names
        ([("topic", "t")], "jobs[0]"),
        (None, "jobs"),
    ],
)
def test_add_many_refuses_an_item_that_is_not_a_mapping(
    redis_client: redis.Redis, fake_clock: FakeClock, batch: Any, field: str
) -> None:
    from actors import DelayQueue

    queue = DelayQueue(redis_client, "facade", clock=fake_clock, producer_only=True)
    error = refused(queue.store, lambda: queue.add_many(batch), field, "mapping")
    assert "must be" in error.message, error


def test_purge_dead_of_every_topic_needs_all_true(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    """The CLI demands --all; a call that forgot its topic must not empty the dead set."""
    from actors import DelayQueue

    queue = DelayQueue(redis_client, "facade", clock=fake_clock, producer_only=True)
    store = queue.store
    for topic in ("a", "b"):
        store.add(store.new_job(topic, "d", retry_ms=[0]))
        for _ in range(2):
            (lease,) = store.lease(topic, 1)
            store.fail(topic, "d", lease.token, "boom", 0)
    error = refused(store, lambda: queue.purge_dead(), "topic", "all=True")
    assert "every dead job" in error.message
    refused(store, lambda: queue.purge_dead("a", all=True), "all")
    assert len(store.dead(None, 10)) == 2
    assert queue.purge_dead("a") == 1
    assert queue.purge_dead(all=True) == 1
    assert store.dead(None, 10) == []
