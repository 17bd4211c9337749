"""AsyncDelayQueue against a real redis-server: the same jobs, results and errors as DelayQueue.

Each test drives its coroutines with asyncio.run (one loop per test, as a service has one), and
checks what the async producer wrote through the sync DelayQueue, or the other way round.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio as aredis

from actors import (
    AsyncDelayQueue,
    ConfigError,
    DelayQueue,
    Durability,
    FakeClock,
    JobExistsError,
    NotReplicatedError,
    PartialAddError,
    RedisFullError,
    ValidationError,
)
from actors.server.embedded import RedisProcess

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        return await make()

    return asyncio.run(wrapped())


@pytest.fixture
def sync_queue(redis_server: RedisProcess, redis_client: redis.Redis) -> Iterator[DelayQueue]:
    queue = DelayQueue(redis_server.url, namespace="shop", producer_only=True)
    yield queue
    queue.close()


def test_a_job_added_async_is_the_job_the_sync_queue_sees(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    async def scenario() -> tuple[str, Any, dict[str, dict[str, int]]]:
        async with AsyncDelayQueue(redis_server.url, namespace="shop") as queue:
            added = await queue.add(
                "mail.send", "welcome-42", {"to": "ada@example.com"}, delay=60, retry=[1, 2]
            )
            return added, await queue.get("mail.send", "welcome-42"), await queue.stats()

    added, info, stats = run(scenario)
    assert added == "new"
    seen = sync_queue.get("mail.send", "welcome-42")
    assert seen is not None and info == seen
    assert seen.state == "delayed" and seen.retry_ms == (1_000, 2_000)
    assert seen.body_bytes == b'{"to":"ada@example.com"}'
    assert 59_000 <= seen.due_ms - sync_queue.clock.now_ms() <= 60_000
    assert (
        stats
        == sync_queue.stats()
        == {"mail.send": {"delayed": 1, "ready": 0, "leased": 0, "dead": 0, "paused": 0}}
    )


def test_existing_jobs_raise_and_replace_returns_the_state_before(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    sync_queue.add("t", "a", delay=60)

    async def scenario() -> list[str]:
        async with AsyncDelayQueue(redis_server.url, namespace="shop") as queue:
            with pytest.raises(JobExistsError) as exists:
                await queue.add("t", "a")
            assert exists.value.jobs == [("t", "a")]
            with pytest.raises(JobExistsError):
                await queue.add_many([{"topic": "t", "id": "b"}, {"topic": "t", "id": "a"}])
            assert await queue.get("t", "b") is None  # all or nothing
            return [
                await queue.add("t", "a", replace=True),
                *await queue.add_many(
                    [{"topic": "t", "id": "a", "delay": 5}, {"topic": "t", "id": "c"}],
                    replace=True,
                ),
            ]

    assert run(scenario) == ["delayed", "ready", "new"]
    info = sync_queue.get("t", "a")
    assert info is not None and info.state == "delayed"


BAD_INPUTS: list[tuple[str, dict[str, Any]]] = [
    ("topic", {"topic": "no spaces"}),
    ("id", {"job_id": ""}),
    ("delay", {"delay": -1}),
    ("delay", {"delay": "soon"}),
    ("at", {"at": datetime(2030, 1, 1)}),  # naive
    ("at", {"at": 1.7e12}),  # milliseconds
    ("delay", {"delay": 1, "at": 2}),
    ("retry[1]", {"retry": [1, math.inf]}),
    ("lease", {"lease": 0}),
    ("body.x", {"body": {"x": math.nan}}),
    ("callback", {"callback": "ftp://example.com"}),
]


@pytest.mark.parametrize(("field", "kwargs"), BAD_INPUTS, ids=[f for f, _ in BAD_INPUTS])
def test_bad_input_gives_the_sync_queues_error(
    redis_server: RedisProcess, sync_queue: DelayQueue, field: str, kwargs: dict[str, Any]
) -> None:
    arguments = {"topic": "t", "job_id": "j", **kwargs}
    with pytest.raises(ValidationError) as sync_error:
        sync_queue.add(**arguments)

    async def scenario() -> None:
        async with AsyncDelayQueue(redis_server.url, namespace="shop") as queue:
            with pytest.raises(ValidationError) as async_error:
                await queue.add(**arguments)
            assert str(async_error.value) == str(sync_error.value)
            assert async_error.value.field == field

    run(scenario)
    assert sync_queue.stats() == {}  # nothing was written by either


def test_add_many_names_the_bad_item_as_the_sync_queue_does(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    batch: list[dict[str, Any]] = [
        {"topic": "t", "id": "ok"},
        {"topic": "t", "id": "x", "delay": -5},
    ]
    with pytest.raises(ValidationError) as sync_error:
        sync_queue.add_many(batch)

    async def scenario() -> None:
        async with AsyncDelayQueue(redis_server.url, namespace="shop") as queue:
            with pytest.raises(ValidationError) as async_error:
                await queue.add_many(batch)
            assert async_error.value.field == "jobs[1].delay"
            assert str(async_error.value) == str(sync_error.value)
            with pytest.raises(ValidationError, match="unknown fields"):
                await queue.add_many([{"topic": "t", "id": "y", "dealy": 1}])

    run(scenario)
    assert sync_queue.stats() == {}


def test_cancel_history_and_jobs_match_the_sync_queue(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    async def scenario() -> tuple[bool, bool, list[Any], list[str]]:
        async with AsyncDelayQueue(redis_server.url, namespace="shop") as queue:
            await queue.add_many([{"topic": "t", "id": f"j{n}", "delay": 60 + n} for n in range(5)])
            await queue.add("t", "j0", delay=1, replace=True)
            first = await queue.cancel("t", "j1")
            again = await queue.cancel("t", "j1")
            history = await queue.history("t", "j0")
            page = await queue.jobs("t", "delayed", limit=10)
            return first, again, history, [info.id for info in page.jobs]

    first, again, history, listed = run(scenario)
    assert (first, again) == (True, False)
    assert [event.event for event in history] == ["added", "replaced"]
    assert history == sync_queue.history("t", "j0")
    assert listed == ["j0", "j2", "j3", "j4"]
    assert [info.id for info in sync_queue.jobs("t", "delayed").jobs] == listed


def test_shards_spread_the_jobs_and_reads_merge_them(redis_server: RedisProcess) -> None:
    ids = [f"order-{n}" for n in range(40)]

    async def scenario() -> tuple[dict[str, dict[str, int]], list[str], list[bool]]:
        async with AsyncDelayQueue(redis_server.url, namespace="big", shards=4) as queue:
            await queue.add_many([{"topic": "t", "id": i, "delay": 60} for i in ids])
            with pytest.raises(PartialAddError) as partial:  # one shard refuses, others add
                await queue.add_many(
                    [
                        {"topic": "t", "id": "order-0"},
                        *({"topic": "t", "id": f"x{n}"} for n in range(8)),
                    ]
                )
            assert partial.value.jobs == [("t", "order-0")]
            listed: list[str] = []
            after = None
            while True:
                page = await queue.jobs("t", "delayed", after=after, limit=7)
                listed += [info.id for info in page.jobs]
                if page.next_after is None:
                    break
                after = page.next_after
            found = [await queue.get("t", i) is not None for i in ids]
            return await queue.stats(), listed, found

    stats, listed, found = run(scenario)
    sync_queue = DelayQueue(redis_server.url, namespace="big", producer_only=True)
    assert sync_queue.store.shard_count == 4
    used = {sync_queue.store._shard_of("t", i) for i in ids}
    assert len(used) > 1
    assert stats == sync_queue.stats()
    assert stats["t"]["delayed"] == 40 + len(
        [j for j in sync_queue.jobs("t", "delayed", limit=100).jobs if j.id.startswith("x")]
    )
    assert set(ids) <= set(listed) and all(found)
    sync_queue.close()


def test_a_shard_count_that_disagrees_is_a_config_error(redis_server: RedisProcess) -> None:
    DelayQueue(redis_server.url, namespace="two", shards=2, producer_only=True).add("t", "j")

    async def scenario() -> None:
        async with AsyncDelayQueue(redis_server.url, namespace="two", shards=3) as queue:
            with pytest.raises(ConfigError, match="stored with 2 shards"):
                await queue.add("t", "k")

    run(scenario)


def test_scripts_flushed_from_the_server_are_loaded_again(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    async def scenario() -> list[str]:
        async with AsyncDelayQueue(redis_server.url, namespace="shop", shards=2) as queue:
            results = [await queue.add("t", "before")]
            redis_client.script_flush()  # as after a restart or a failover
            results.append(await queue.add("t", "after"))
            redis_client.script_flush()
            results += await queue.add_many([{"topic": "t", "id": f"m{n}"} for n in range(6)])
            return results

    assert run(scenario) == ["new"] * 8


def test_durability_without_replicas_raises_not_replicated(redis_server: RedisProcess) -> None:
    async def scenario() -> None:
        durable = Durability(replicas=1, timeout_ms=50)
        async with AsyncDelayQueue(redis_server.url, namespace="d", durability=durable) as queue:
            with pytest.raises(NotReplicatedError) as short:
                await queue.add("t", "j")
            assert short.value.acked == 0
            assert await queue.get("t", "j") is not None  # on the master all the same

    run(scenario)


def test_a_given_clock_dates_the_jobs_and_a_given_client_is_closed(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    clock = FakeClock(start_ms=1_900_000_000_000)

    async def scenario() -> None:
        client = aredis.Redis(unix_socket_path=redis_server.socket_path)
        queue = AsyncDelayQueue(client, namespace="f", clock=clock)
        await queue.add("t", "j", delay=2)
        info = await queue.get("t", "j")
        assert info is not None and info.due_ms == 1_900_000_002_000
        await queue.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await queue.get("t", "j")

    run(scenario)


def test_clients_it_cannot_use_are_refused_at_construction(redis_server: RedisProcess) -> None:
    with pytest.raises(ConfigError, match=r"redis\.asyncio"):
        AsyncDelayQueue(redis_server.client(), namespace="x")  # type: ignore[arg-type]
    decoding = aredis.Redis(unix_socket_path=redis_server.socket_path, decode_responses=True)
    with pytest.raises(ConfigError, match="decode_responses=False"):
        AsyncDelayQueue(decoding)


def test_many_concurrent_adds_from_one_loop_all_land(redis_server: RedisProcess) -> None:
    async def scenario() -> list[str]:
        async with AsyncDelayQueue(redis_server.url, namespace="c") as queue:
            return list(
                await asyncio.gather(*(queue.add("t", f"j{n}", delay=60) for n in range(200)))
            )

    assert run(scenario) == ["new"] * 200
    sync_queue = DelayQueue(redis_server.url, namespace="c", producer_only=True)
    assert sync_queue.stats()["t"]["delayed"] == 200
    sync_queue.close()


def test_concurrent_calls_share_pipelines_but_keep_their_own_outcomes(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    """Adds made at once from many tasks go out together (few connections, not one per task),
    and each still gets its own result: an existing job fails alone."""
    DelayQueue(redis_server.url, namespace="co", producer_only=True).add("t", "j7", delay=60)

    async def scenario() -> tuple[list[Any], int]:
        async with AsyncDelayQueue(redis_server.url, namespace="co") as queue:
            await queue.add("t", "warm-up")  # connects and syncs the clock
            before = int(redis_client.info("stats")["total_connections_received"])
            outcomes = await asyncio.gather(
                *(queue.add("t", f"j{n}", delay=60) for n in range(300)), return_exceptions=True
            )
            after = int(redis_client.info("stats")["total_connections_received"])
            return outcomes, after - before

    outcomes, connections = run(scenario)
    assert [type(o).__name__ for o in outcomes].count("JobExistsError") == 1
    assert isinstance(outcomes[7], JobExistsError) and outcomes[7].jobs == [("t", "j7")]
    assert outcomes[:7] == ["new"] * 7 and outcomes[8:] == ["new"] * 292
    assert connections <= 3, f"{connections} new connections for 300 concurrent adds"


def test_a_full_redis_refuses_the_add_as_the_sync_queue_does(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    async def scenario() -> None:
        async with AsyncDelayQueue(redis_server.url, namespace="full") as queue:
            await queue.add("t", "before")  # connected, namespace recorded
            redis_client.config_set("maxmemory", 1)
            try:
                with pytest.raises(RedisFullError) as full:
                    await queue.add("t", "refused")
            finally:
                redis_client.config_set("maxmemory", 0)
            assert full.value.doing == "add"
            assert await queue.get("t", "refused") is None  # nothing was written

    run(scenario)


# -- if_exists and recurring schedules: the sync queue's results, on the same server ---------


def fingerprint(client: redis.Redis) -> dict[bytes, bytes]:
    return {key: client.dump(key) for key in sorted(client.keys("*"))}  # type: ignore[misc]


def test_if_exists_keep_dedupes_and_replace_reschedules_as_the_sync_queue(
    redis_server: RedisProcess, redis_client: redis.Redis, sync_queue: DelayQueue
) -> None:
    sync_queue.add("mail", "42", {"n": 1}, delay=60)
    before = fingerprint(redis_client)

    async def keep() -> list[Any]:
        async with AsyncDelayQueue(redis_server.url, namespace="shop") as queue:
            with pytest.raises(JobExistsError, match="mail/42"):
                await queue.add("mail", "42", if_exists="error")
            return [
                await queue.add("mail", "42", {"n": 2}, if_exists="keep"),
                await queue.add_many([{"topic": "mail", "id": "42"}], if_exists="keep"),
            ]

    assert run(keep) == ["delayed", ["delayed"]]
    assert fingerprint(redis_client) == before  # kept: no record, event or counter written
    assert sync_queue.add("mail", "42", {"n": 3}, if_exists="keep") == "delayed"

    async def replace_and_add() -> list[Any]:
        async with AsyncDelayQueue(redis_server.url, namespace="shop") as queue:
            return [
                await queue.add("mail", "42", {"n": 4}, if_exists="replace"),
                await queue.add_many(
                    [{"topic": "mail", "id": "42"}, {"topic": "mail", "id": "43"}],
                    if_exists="keep",
                ),
            ]

    assert run(replace_and_add) == ["delayed", ["ready", "new"]]
    info = sync_queue.get("mail", "42")
    assert info is not None and info.body == {"n": 4} and info.state == "ready"
    assert sync_queue.stats()["mail"]["ready"] == 2


def test_if_exists_keep_across_shards_gives_the_sync_queues_results(
    redis_server: RedisProcess,
) -> None:
    ids = [f"j{n}" for n in range(12)]
    existing = ids[::3]
    batch = [{"topic": "t", "id": i} for i in ids]
    results = {}
    for namespace in ("sync3", "async3"):
        sync_queue = DelayQueue(redis_server.url, namespace, producer_only=True, shards=3)
        sync_queue.add_many([{"topic": "t", "id": i, "delay": 5} for i in existing])
        if namespace == "sync3":
            results[namespace] = sync_queue.add_many(batch, if_exists="keep")
        else:

            async def scenario() -> list[str]:
                async with AsyncDelayQueue(redis_server.url, "async3", shards=3) as queue:
                    return await queue.add_many(batch, if_exists="keep")

            results[namespace] = run(scenario)
        assert sync_queue.stats()["t"] == {
            "delayed": len(existing),
            "ready": len(ids) - len(existing),
            "leased": 0,
            "dead": 0,
            "paused": 0,
        }
        sync_queue.close()
    assert results["async3"] == results["sync3"]
    assert results["sync3"] == ["delayed" if i in existing else "new" for i in ids]


def test_schedules_made_async_are_the_sync_queues(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    """The same calls on both queues (one namespace each, one clock) store the same schedules
    and return the same outcomes; each side sees the other's."""
    clock = FakeClock(start_ms=1_700_000_000_000)
    other = DelayQueue(redis_server.url, namespace="sync-side", clock=clock, producer_only=True)
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("nightly", "reports", {"cron": "0 3 * * *", "tz": "Europe/Paris", "body": {"k": 1}}),
        ("poll", "supplier", {"every": 30, "misfire": "skip"}),
        ("nightly", "reports", {"cron": "0 3 * * *", "tz": "Europe/Paris", "body": {"k": 1}}),
        ("poll", "supplier", {"every": 45, "start_at": 1_700_000_100.0}),
    ]
    sync_outcomes = [other.schedule(name, topic, **kw) for name, topic, kw in calls]

    async def scenario() -> tuple[list[str], list[Any], list[bool], list[Any]]:
        async with AsyncDelayQueue(redis_server.url, namespace="shop", clock=clock) as queue:
            outcomes = [await queue.schedule(name, topic, **kw) for name, topic, kw in calls]
            listed = await queue.schedules()
            removed = [await queue.unschedule("poll"), await queue.unschedule("poll")]
            return outcomes, listed, removed, await queue.schedules()

    outcomes, listed, removed, after = run(scenario)
    assert outcomes == sync_outcomes == ["created", "created", "unchanged", "updated"]
    assert listed == other.schedules()
    assert [info.spec.name for info in listed] == ["nightly", "poll"]
    poll = listed[1]
    assert poll.spec.every_ms == 45_000 and poll.next_ms == 1_700_000_100_000
    assert removed == [True, False]
    assert [info.spec.name for info in after] == ["nightly"]
    # The async side wrote what the sync queue reads: the nightly's pending occurrence, and no
    # occurrence of the removed schedule.
    assert [info.spec.name for info in sync_queue.schedules()] == ["nightly"]
    pending = after[0].pending_id
    assert pending is not None and pending.startswith("@schedule:nightly:")
    info = sync_queue.get("reports", pending)
    assert info is not None and info.state == "delayed" and info.body == {"k": 1}
    assert sync_queue.stats()["supplier"]["delayed"] == 0
    other.close()


def test_schedules_on_many_shards_are_all_listed(redis_server: RedisProcess) -> None:
    names = [f"s{n}" for n in range(8)]

    async def scenario() -> list[Any]:
        async with AsyncDelayQueue(redis_server.url, namespace="sh4", shards=4) as queue:
            for name in reversed(names):
                assert await queue.schedule(name, "t", every=60) == "created"
            return await queue.schedules()

    listed = run(scenario)
    assert [info.spec.name for info in listed] == names
    sync_queue = DelayQueue(redis_server.url, namespace="sh4", producer_only=True, shards=4)
    assert sync_queue.schedules() == listed
    assert sync_queue.stats()["t"]["delayed"] == len(names)  # one pending occurrence each
    sync_queue.close()


BAD_SCHEDULES: list[tuple[str, dict[str, Any]]] = [
    ("name", {"name": ""}),
    ("name", {"name": "has space"}),
    ("topic", {"topic": "no spaces"}),
    ("cron", {"cron": "61 * * * *"}),
    ("every", {"every": 0.5}),
    ("cron", {"cron": "* * * * *", "every": 60}),
    ("tz", {"tz": "Mars/Olympus"}),
    ("misfire", {"misfire": "twice"}),
    ("start_at", {"start_at": datetime(2030, 1, 1)}),  # naive
    ("body.x", {"body": {"x": math.nan}}),
]


@pytest.mark.parametrize(("field", "kwargs"), BAD_SCHEDULES, ids=[f for f, _ in BAD_SCHEDULES])
def test_a_bad_schedule_gives_the_sync_queues_error_before_connecting(
    sync_queue: DelayQueue, field: str, kwargs: dict[str, Any]
) -> None:
    arguments = {"name": "s", "topic": "t", "every": 60, **kwargs}
    if "cron" in kwargs and "every" not in kwargs:
        del arguments["every"]
    with pytest.raises(ValidationError) as sync_error:
        sync_queue.schedule(**arguments)

    async def scenario() -> None:
        # Nothing listens there: the error comes from the check, before any connection.
        queue = AsyncDelayQueue("redis://127.0.0.1:1/0", namespace="shop")
        with pytest.raises(ValidationError) as async_error:
            await queue.schedule(**arguments)
        assert async_error.value.field == sync_error.value.field
        assert str(async_error.value) == str(sync_error.value)
        await queue.aclose()

    run(scenario)
    assert sync_error.value.field.startswith(field)
    assert sync_queue.schedules() == [] and sync_queue.stats() == {}


def test_bad_unschedule_names_and_if_exists_values_name_the_field_before_connecting() -> None:
    async def scenario() -> list[str]:
        queue = AsyncDelayQueue("redis://127.0.0.1:1/0", namespace="shop")
        fields = []
        for attempt in (
            lambda: queue.unschedule(""),
            lambda: queue.add("t", "j", if_exists="ignore"),  # type: ignore[arg-type]
            lambda: queue.add("t", "j", if_exists="keep", replace=True),
            lambda: queue.add_many([{"topic": "t", "id": "j"}], if_exists="skip"),  # type: ignore[arg-type]
        ):
            with pytest.raises(ValidationError) as caught:
                await attempt()
            fields.append(caught.value.field)
        await queue.aclose()
        return fields

    assert run(scenario) == ["name", "if_exists", "if_exists", "if_exists"]


BAD_JOBS: list[tuple[str, dict[str, Any]]] = [
    ("topic", {"topic": "a|b"}),
    ("id", {"id": ""}),
    ("delay", {"delay": -1}),
    ("delay", {"delay": 5, "at": 1_900_000_000}),
    ("retry", {"retry": [-1]}),
    ("lease", {"lease": 0}),
    ("callback", {"callback": "ftp://example.com/x"}),
    ("body", {"body": {"x": math.nan}}),
]


@pytest.mark.parametrize(
    ("field", "changes"), BAD_JOBS, ids=[f"{f}-{n}" for n, (f, _) in enumerate(BAD_JOBS)]
)
def test_a_bad_job_gives_the_sync_queues_error_before_connecting(
    sync_queue: DelayQueue, field: str, changes: dict[str, Any]
) -> None:
    job: dict[str, Any] = {"topic": "t", "id": "j", **changes}
    with pytest.raises(ValidationError) as sync_error:
        sync_queue.add(**{("job_id" if k == "id" else k): v for k, v in job.items()})

    async def scenario() -> tuple[ValidationError, ValidationError]:
        # Nothing listens there: the error comes from the check, before any connection.
        queue = AsyncDelayQueue("redis://127.0.0.1:1/0", namespace="shop")
        with pytest.raises(ValidationError) as one:
            await queue.add(**{("job_id" if k == "id" else k): v for k, v in job.items()})
        # add_many reads an iterator once: a generator's bad item is still named.
        with pytest.raises(ValidationError) as many:
            await queue.add_many(item for item in [{"topic": "t", "id": "ok"}, job])
        await queue.aclose()
        return one.value, many.value

    one, many = run(scenario)
    assert one.field == sync_error.value.field and str(one) == str(sync_error.value)
    assert one.field.startswith(field)
    assert many.field.startswith(f"jobs[1].{field}") or many.field == "jobs[1]"
    assert sync_queue.stats() == {}


def test_a_good_job_from_a_generator_is_added_on_the_first_connection(
    redis_server: RedisProcess, sync_queue: DelayQueue
) -> None:
    async def scenario() -> list[str]:
        queue = AsyncDelayQueue(redis_server.url, namespace=sync_queue.namespace)
        try:
            return await queue.add_many({"topic": "t", "id": str(n)} for n in range(3))
        finally:
            await queue.aclose()

    assert run(scenario) == ["new"] * 3
    assert [sync_queue.get("t", str(n)) is not None for n in range(3)] == [True] * 3
