"""AsyncDelayQueue.add_stream and AsyncStore.add_stream: the async twin of test_add_stream.py's
checks, against real redis-servers. Each test drives its coroutines with asyncio.run."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis
from _stream_jobs import Spec, jobs, stored_ids

from actors import (
    AddStreamError,
    AsyncDelayQueue,
    DelayQueue,
    Durability,
    JobExistsError,
    NotReplicatedError,
    ValidationError,
)
from actors.server.embedded import RedisProcess

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(make())  # type: ignore[arg-type]


@pytest.fixture
def sync_queue(redis_server: RedisProcess, redis_client: redis.Redis) -> Iterator[DelayQueue]:
    queue = DelayQueue(redis_server.url, "astream", producer_only=True)
    yield queue
    queue.close()


def add_stream(url: str, specs: Any, **kwargs: Any) -> list[str]:
    async def scenario() -> list[str]:
        async with AsyncDelayQueue(url, "astream") as queue:
            return await queue.add_stream(specs, **kwargs)

    return run(scenario)


def test_adds_every_job_of_a_generator_in_order(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    specs = (spec for spec in jobs(1_234, delay=60))
    assert add_stream(redis_server.url, specs, batch_size=100) == ["new"] * 1_234
    assert sync_queue.stats()["mail"]["delayed"] == 1_234
    # The same job in each batch, replaced each time: the last batch's body wins.
    again = [{"topic": "mail", "id": "same", "body": {"b": b}, "delay": 60} for b in range(5)]
    assert add_stream(redis_server.url, again, batch_size=1, if_exists="replace") == (
        ["new"] + ["delayed"] * 4
    )
    info = sync_queue.get("mail", "same")
    assert info is not None and info.body == {"b": 4}


def test_an_existing_job_stops_the_stream_and_the_batch_sent_after_it_counts(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    sync_queue.add("mail", "j25", delay=60)
    with pytest.raises(AddStreamError) as caught:
        add_stream(redis_server.url, jobs(100, delay=60), batch_size=10)
    error = caught.value
    assert isinstance(error.cause, JobExistsError) and error.cause.jobs == [("mail", "j25")]
    assert error.results == ["new"] * 20 + [None] * 10 + ["new"] * 10
    assert stored_ids(sync_queue) == {f"j{k}" for k in [*range(20), 25, *range(30, 40)]}


def test_a_bad_job_names_its_place_in_the_stream(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    specs = jobs(50, delay=60)
    specs[33] = {**specs[33], "delay": -1}
    with pytest.raises(AddStreamError) as caught:
        add_stream(redis_server.url, specs, batch_size=10)
    assert isinstance(caught.value.cause, ValidationError)
    assert caught.value.cause.field == "jobs[33].delay"
    assert caught.value.results == ["new"] * 30
    assert stored_ids(sync_queue) == {f"j{k}" for k in range(30)}


def test_keep_goes_batch_by_batch_and_reports_states(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    sync_queue.add("mail", "j3", {"old": True}, delay=60)
    results = add_stream(redis_server.url, jobs(12, delay=60), batch_size=5, if_exists="keep")
    assert results == ["new"] * 3 + ["delayed"] + ["new"] * 8
    kept = sync_queue.get("mail", "j3")
    assert kept is not None and kept.body == {"old": True}


def test_bad_arguments_are_refused_before_any_job_is_taken(redis_server: RedisProcess) -> None:
    for kwargs, field in (({"batch_size": 0}, "batch_size"), ({"if_exists": "x"}, "if_exists")):
        with pytest.raises(ValidationError) as caught:
            add_stream(redis_server.url, jobs(3), **kwargs)
        assert caught.value.field == field


def test_a_lost_server_stops_the_stream_with_a_connection_error(
    redis_factory: Callable[..., RedisProcess],
) -> None:
    server = redis_factory()

    async def scenario() -> None:
        async with AsyncDelayQueue(server.url, "lost") as queue:
            await queue.add("mail", "warm", delay=60)

            def dies_after_the_first_batch() -> Iterator[Spec]:
                for k, spec in enumerate(jobs(30, delay=60)):
                    if k == 10:
                        server.kill()
                    yield spec

            await queue.add_stream(dies_after_the_first_batch(), batch_size=10)

    with pytest.raises(AddStreamError) as caught:
        run(scenario)
    assert isinstance(caught.value.cause, redis.ConnectionError)
    assert caught.value.added == 0 and None in caught.value.results


def test_a_durable_stream_stops_when_no_replica_acknowledges(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    async def scenario() -> list[str]:
        durable = Durability(replicas=1, timeout_ms=10)
        async with AsyncDelayQueue(redis_server.url, "astream", durability=durable) as queue:
            return await queue.add_stream(jobs(30, delay=60), batch_size=10)

    with pytest.raises(AddStreamError) as caught:
        run(scenario)
    assert isinstance(caught.value.cause, NotReplicatedError)
    assert caught.value.results == ["new"] * 10  # on the master: added, not replicated
    assert sync_queue.stats()["mail"]["delayed"] == 10
