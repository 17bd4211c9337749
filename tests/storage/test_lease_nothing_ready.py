"""A lease that finds nothing ready on an ungated topic answers before the script's helpers
(lua/lease-10.lua's first lines); a gated topic still answers with its wait."""

from __future__ import annotations

import re
from collections.abc import Callable

import redis

from actors.clock import FakeClock
from actors.storage.scripts import lua_dir
from actors.storage.store import Store
from actors.values import TopicLimits


def command_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def calls_made_by(client: redis.Redis, work: Callable[[], object]) -> dict[str, int]:
    """The commands ``work`` made Redis run, a script's own included, by name."""
    before = command_calls(client)
    work()
    after = command_calls(client)
    after["info"] -= 1  # the INFO that read `before`
    return {name: n - before.get(name, 0) for name, n in after.items() if n != before.get(name, 0)}


def test_nothing_ready_on_an_ungated_topic_costs_two_reads(
    store: Store, redis_client: redis.Redis
) -> None:
    store.add(store.new_job("orders", "warm", None))
    assert [x.id for x in store.lease("orders", 10, "w")] == ["warm"]  # scripts loaded, list empty
    made = calls_made_by(redis_client, lambda: store.lease_batch("orders", 10, "w"))
    # The script's own commands: the full-Redis DEL the loader puts first, then the fast path.
    assert made == {"evalsha": 1, "del": 1, "llen": 1, "hmget": 1}
    assert store.lease_batch("orders", 10, "w").wait_ms == 0


def test_a_paused_topic_with_nothing_ready_still_says_it_is_paused(
    store: Store, redis_client: redis.Redis
) -> None:
    store.pause("orders")
    made = calls_made_by(redis_client, lambda: store.lease_batch("orders", 10, "w"))
    assert "exists" in made  # the whole path: the helpers' slot probe ran
    assert store.lease_batch("orders", 10, "w").paused


def test_a_rate_limited_topic_with_nothing_ready_takes_the_whole_path(
    store: Store, redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store.set_limits("orders", TopicLimits(rate=(1, 60.0)))
    store.add(store.new_job("orders", "first", None))
    assert len(store.lease("orders", 10, "w")) == 1  # the one job the rate lets go this minute
    made = calls_made_by(redis_client, lambda: store.lease_batch("orders", 10, "w"))
    assert "exists" in made and "llen" in made
    # Nothing is ready, and the rate already let its job go: the answer is its wait, not 0.
    assert (store.lease_batch("orders", 10, "w").wait_ms or 0) > 0


def gate_fields_read(code: str) -> set[str]:
    """The gate fields (the part after "<topic>|") the first HMGET in ``code`` reads."""
    hmget = re.search(r"call\('HMGET', [^)]*\)", code)
    assert hmget is not None
    return set(re.findall(r"topic \.\. '\|(\w+)'", hmget[0]))


def test_the_early_answer_reads_every_gate_field_that_holds_jobs_back() -> None:
    lua = lua_dir()
    gate = (lua / "_gate.lua").read_text()
    open_gate = gate.split("local function open_gate", 1)[1].split("\nend\n", 1)[0]
    early = (lua / "lease-10.lua").read_text().split("-- @include", 1)[0]
    # "tat" is the rate's state, read only with a rate: alone it holds nothing back.
    assert (
        gate_fields_read(open_gate) - {"tat"}
        == gate_fields_read(early)
        == {
            "paused",
            "rate",
            "flight",
        }
    )
