"""DelayQueue.add_stream and Store.add_stream: batches sent before the last reply is read, on one
connection, each batch all or nothing, the stream stopped at the first batch that fails with every
job's result so far. Against real redis-servers (one killed on purpose)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from _stream_jobs import Spec, jobs, stored_ids

from actors import (
    AddStreamError,
    DelayQueue,
    Durability,
    JobExistsError,
    NotReplicatedError,
    RedisFullError,
    ValidationError,
)
from actors.clock import FakeClock
from actors.server.embedded import RedisProcess
from actors.storage.keys import shard_of
from actors.storage.store import Store


@pytest.fixture
def queue(redis_client: redis.Redis, fake_clock: FakeClock) -> Iterator[DelayQueue]:
    q = DelayQueue(redis_client, "stream", clock=fake_clock, producer_only=True)
    yield q
    q.close()


class Counted:
    """A generator of job mappings that counts how many the stream took from it."""

    def __init__(self, specs: list[Spec]) -> None:
        self.specs = specs
        self.taken = 0

    def __iter__(self) -> Iterator[Spec]:
        for spec in self.specs:
            self.taken += 1
            yield spec


def test_adds_every_job_of_a_generator_in_batches(queue: DelayQueue) -> None:
    source = Counted(jobs(2_345, delay=60))
    assert queue.add_stream(source, batch_size=500) == ["new"] * 2_345
    assert source.taken == 2_345
    assert queue.stats()["mail"]["delayed"] == 2_345
    info = queue.get("mail", "j2344")
    assert info is not None and info.body == {"k": 2344} and info.state == "delayed"


def test_batches_run_in_the_order_sent(queue: DelayQueue) -> None:
    # The same job in every batch, replaced each time: the last batch's body must win, and each
    # batch must see the one before (its result is the state the job had: delayed).
    specs = [{"topic": "mail", "id": "same", "body": {"batch": b}, "delay": 60} for b in range(6)]
    fillers = [jobs(9, prefix=f"b{b}-", delay=60) for b in range(6)]
    stream = [spec for b in range(6) for spec in [specs[b], *fillers[b]]]
    results = queue.add_stream(stream, batch_size=10, if_exists="replace")
    assert [results[b * 10] for b in range(6)] == ["new"] + ["delayed"] * 5
    info = queue.get("mail", "same")
    assert info is not None and info.body == {"batch": 5}


def test_an_existing_job_stops_the_stream_at_its_batch(queue: DelayQueue) -> None:
    queue.add("mail", "j25", {"old": True}, delay=60)
    source = Counted(jobs(100, delay=60))
    with pytest.raises(AddStreamError) as caught:
        queue.add_stream(source, batch_size=10)
    error = caught.value
    assert isinstance(error.cause, JobExistsError) and error.cause.jobs == [("mail", "j25")]
    # Batches 0 and 1 were added; batch 2 (which holds j25) added nothing; batch 3 was already
    # sent when batch 2's reply was read, and was added; nothing after it was taken.
    assert error.results == ["new"] * 20 + [None] * 10 + ["new"] * 10
    assert error.added == 30 and source.taken == 40
    assert "mail/j25 already existed" in str(error)
    assert stored_ids(queue) == {f"j{k}" for k in [*range(20), 25, *range(30, 40)]}
    old = queue.get("mail", "j25")
    assert old is not None and old.body == {"old": True}


def test_a_bad_job_names_its_place_in_the_stream_and_its_batch_writes_nothing(
    queue: DelayQueue,
) -> None:
    specs = jobs(50, delay=60)
    specs[33] = {**specs[33], "delay": -1}
    with pytest.raises(AddStreamError) as caught:
        queue.add_stream(specs, batch_size=10)
    error = caught.value
    assert isinstance(error.cause, ValidationError) and error.cause.field == "jobs[33].delay"
    assert error.results == ["new"] * 30  # the batches before; batch 3 was never sent
    assert stored_ids(queue) == {f"j{k}" for k in range(30)}


def test_keep_runs_batch_after_batch_and_reports_states(
    queue: DelayQueue, fake_clock: FakeClock
) -> None:
    queue.add("mail", "j3", {"old": True}, delay=60)
    fake_clock.advance(1)
    results = queue.add_stream(jobs(12, delay=60), batch_size=5, if_exists="keep")
    assert results == ["new"] * 3 + ["delayed"] + ["new"] * 8
    kept = queue.get("mail", "j3")
    assert kept is not None and kept.body == {"old": True}
    # A bad job under keep: the batches before it stay added.
    specs = jobs(12, prefix="k", delay=60)
    specs[7] = {"topic": "mail"}
    with pytest.raises(AddStreamError) as caught:
        queue.add_stream(specs, batch_size=5, if_exists="keep")
    assert caught.value.results == ["new"] * 5
    assert isinstance(caught.value.cause, ValidationError)
    assert caught.value.cause.field == "jobs[7]"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 10_001}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"if_exists": "overwrite"}, "if_exists"),
    ],
)
def test_bad_arguments_are_refused_before_any_job_is_taken(
    queue: DelayQueue, kwargs: dict[str, Any], field: str
) -> None:
    source = Counted(jobs(5))
    with pytest.raises(ValidationError) as caught:
        queue.add_stream(source, **kwargs)
    assert caught.value.field == field
    assert source.taken == 0 and stored_ids(queue) == set()


def test_a_job_named_twice_is_added_twice_in_order(queue: DelayQueue) -> None:
    specs = jobs(20, delay=60)
    specs[15] = {**specs[12], "body": {"second": True}}  # j12 again, in the same batch of 10
    results = queue.add_stream(specs, batch_size=10, if_exists="replace")
    assert results[12] == "new" and results[15] == "delayed"  # the second replaced the first
    info = queue.get("mail", "j12")
    assert info is not None and info.body == {"second": True}
    # Under the default "error", the second is an existing job: the stream stops there.
    again = jobs(20, prefix="e", delay=60)
    again[15] = again[12]
    with pytest.raises(AddStreamError) as caught:
        queue.add_stream(again, batch_size=10)
    assert isinstance(caught.value.cause, JobExistsError)
    assert caught.value.cause.jobs == [("mail", "e12")]
    # e0-e14 were added (e10-e14 as the part of their batch before the repeat); the part from
    # the repeat on added nothing, and nothing after it was sent.
    assert caught.value.results == ["new"] * 15 + [None] * 5
    assert stored_ids(queue) >= {f"e{k}" for k in range(15)}
    assert not stored_ids(queue) & {f"e{k}" for k in range(16, 20)}


def test_a_full_redis_stops_the_stream_and_each_batch_is_whole(
    redis_factory: Callable[..., RedisProcess],
) -> None:
    server = redis_factory()
    client = server.client()
    queue = DelayQueue(client, "full", clock=FakeClock(), producer_only=True)
    try:
        queue.add("mail", "warm", delay=60)
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 300_000)
        specs = jobs(2_000, delay=60, body="x" * 1_000)
        with pytest.raises(AddStreamError) as caught:
            queue.add_stream(specs, batch_size=20)
        error = caught.value
        assert isinstance(error.cause, RedisFullError)
        assert 0 < error.added < 2_000 and error.added % 20 == 0
        added = {f"j{k}" for k, result in enumerate(error.results) if result == "new"}
        client.config_set("maxmemory", 0)
        assert stored_ids(queue) == added | {"warm"}
    finally:
        queue.close()
        client.close()


def test_a_lost_server_stops_the_stream_with_a_connection_error(
    redis_factory: Callable[..., RedisProcess],
) -> None:
    server = redis_factory()
    queue = DelayQueue(server.client(), "lost", clock=FakeClock(), producer_only=True)
    queue.add("mail", "warm", delay=60)  # connected, scripts loaded

    def dies_after_the_first_batch() -> Iterator[Spec]:
        for k, spec in enumerate(jobs(30, delay=60)):
            if k == 10:
                server.kill()
            yield spec

    try:
        with pytest.raises(AddStreamError) as caught:
            queue.add_stream(dies_after_the_first_batch(), batch_size=10)
        assert isinstance(caught.value.cause, redis.ConnectionError)
        # The first batch was sent and its reply never came, so whether it ran is unknown; the
        # second was built and could not be sent. Both are None.
        assert caught.value.results == [None] * 20
    finally:
        queue.close()


def test_store_add_stream_across_shards_marks_the_shards_that_added(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store = Store(redis_client, "sharded", fake_clock, shards=3)
    existing = store.new_job("mail", "j4", delay_ms=1_000)
    store.add(existing)
    built = [store.new_job("mail", f"j{k}", delay_ms=1_000) for k in range(12)]
    batches = [built[0:6], built[6:12]]
    with pytest.raises(AddStreamError) as caught:
        store.add_stream(iter(batches))
    error = caught.value
    assert isinstance(error.cause, JobExistsError)
    blocked = shard_of("mail", "j4", 3)
    expected = [None if shard_of("mail", f"j{k}", 3) == blocked else "new" for k in range(6)]
    assert error.results == [*expected, *(["new"] * 6)]  # batch 1 was sent before the read
    added = {f"j{k}" for k, result in enumerate(error.results) if result == "new"}
    assert stored_ids(store) == added | {"j4"}


def test_store_add_stream_of_nothing_adds_nothing(store: Store) -> None:
    assert store.add_stream(iter([])) == []
    assert store.add_stream([[], []]) == []


def test_a_durable_stream_goes_batch_by_batch_and_stops_when_no_replica_acknowledges(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    # No replica: every durable add raises NotReplicatedError, its jobs on the master.
    queue = DelayQueue(
        redis_client,
        "durable",
        clock=fake_clock,
        producer_only=True,
        durability=Durability(replicas=1, timeout_ms=10),
    )
    try:
        source = Counted(jobs(30, delay=60))
        with pytest.raises(AddStreamError) as caught:
            queue.add_stream(source, batch_size=10)
        assert isinstance(caught.value.cause, NotReplicatedError)
        assert caught.value.results == ["new"] * 10  # on the master: added, not replicated
        assert source.taken == 10  # the first batch stopped the stream
        assert queue.stats()["mail"]["delayed"] == 10
    finally:
        queue.close()
