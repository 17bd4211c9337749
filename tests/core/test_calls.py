"""The pure script-call builders and parsers (actors/storage/calls.py), without a server, and
the store's promise built on them: one clock read and one call per shard per operation."""

from __future__ import annotations

import inspect
import re

import pytest
import redis

from actors.clock import FakeClock
from actors.errors import ErrorCode
from actors.lifecycle import State
from actors.storage import calls, codec
from actors.storage import schedules as schedule_calls
from actors.storage.keys import ShardKeys, shard_of
from actors.storage.scripts import sources
from actors.storage.store import Store
from actors.values import NewJob

KEYS = ShardKeys("ns", 2)
ROTATES = re.compile(r"^rotate_history_index\(\)", re.MULTILINE)  # a call, not the definition
AT = calls.CallTime(now_ms=1_000, trim_kind="MAXLEN", trim_threshold="50")
COMMON = [1_000, "MAXLEN", "50", "redelay:{ns.2}:"]


def every_call() -> list[calls.ScriptCall]:
    job = NewJob("t", "a", b"{}", 5_000, None, None, None)
    blobs = {"t": codec.pack_topic_config((1,), 100, 3)}
    return [
        calls.add(KEYS, AT, [job], blobs, replace=False),
        calls.add(KEYS, AT, [job], blobs, replace=True),
        calls.carry(KEYS, AT, 10),
        calls.expire(KEYS, AT, 10),
        calls.lease(KEYS, AT, "t", 3, "w"),
        calls.ack(KEYS, AT, [("t|a", "tok", "")]),
        calls.fail(KEYS, AT, [("t|a", "tok", "no", -1, "")]),
        calls.extend(KEYS, AT, [("t|a", "tok", 100)]),
        calls.release(KEYS, AT, [("t|a", "tok")]),
        calls.cancel(KEYS, AT, "t|a"),
        calls.requeue(KEYS, AT, ["t|a"]),
        calls.purge(KEYS, AT, ["t|a"]),
        calls.inspect(KEYS, AT, "t|a"),
        calls.history(KEYS, AT, "t|a"),
        calls.delayed_layout(KEYS, AT),
        calls.list_page(KEYS, AT, "t", State.DELAYED, 10, 100, (5, "t|a")),
        schedule_calls.schedule(KEYS, AT, "s", b"spec", 0, blobs["t"], [5_000]),
        schedule_calls.unschedule(KEYS, AT, "s"),
        schedule_calls.refill(KEYS, AT, "s", 1, [5_000]),
        calls.pause(KEYS, AT, "t", True),
    ]


def test_every_script_has_a_builder_giving_it_as_many_keys_as_it_declares() -> None:
    built = every_call()
    assert {call.name for call in built} == set(sources())
    for call in built:
        declared, _ = sources()[call.name]
        assert len(call.keys) == declared, call.name
        assert all(key.startswith(KEYS.prefix) for key in call.keys), call.name
        assert call.args[:4] == COMMON, call.name


def test_scripts_read_the_servers_time_unless_the_clock_drives_them() -> None:
    served = calls.CallTime(1_000, "MAXLEN", "50", scripts_follow=False)
    assert calls.carry(KEYS, served, 10).args[:4] == ["", "MAXLEN", "50", KEYS.prefix]
    assert calls.carry(KEYS, AT, 10).args[:4] == COMMON  # a fake clock's time, followed


def test_builders_flatten_per_job_rows_after_the_common_arguments() -> None:
    call = calls.ack(KEYS, AT, [("t|a", "tok1", ""), ("t|b", "tok2", "200")])
    assert call.args == [*COMMON, 2, "t|a", "tok1", "", "t|b", "tok2", "200"]
    call = calls.fail(KEYS, AT, [("t|a", "tok", "boom", -1, "Traceback")])
    assert call.args == [*COMMON, KEYS.wake_channel, 1, "t|a", "tok", "boom", -1, "Traceback"]
    job = NewJob("t", "a", b'{"x":1}', 7_000, (5,), None, None)
    add = calls.add(KEYS, AT, [job], {"t": b"cfg"}, replace=False)
    assert add.args[4:8] == [KEYS.wake_channel, 1, "t|a", 7_000]
    record = codec.unpack(add.args[8])
    assert (record["b"], record["d"], record["n"], record["r"]) == (b'{"x":1}', 7_000, 1_000, [5])
    assert add.args[9] == b"cfg"


def test_parsers_type_the_replies() -> None:
    assert calls.existing_jobs([0]) == []
    assert calls.existing_jobs([ErrorCode.EXISTS, b"t|a", b"u|b"]) == [("t", "a"), ("u", "b")]
    assert calls.states_before([b"new", b"dead"]) == ["new", "dead"]
    assert calls.count_and_next([3, -1, 40]) == (3, None, 40)
    assert calls.count_and_next([0, 42, b"40"]) == (0, 42, 40)
    assert schedule_calls.carried([1, 42, b"40", b"s"]) == (1, 42, 40, ["s"])
    assert calls.error_codes([0, -3]) == [ErrorCode.OK, ErrorCode.STALE_TOKEN]
    assert calls.fail_outcomes([b"dead", -4]) == ["dead", ErrorCode.NOT_LEASED]
    assert calls.total([1, 0, 1]) == 2
    assert calls.cancel_outcome(2) == "requested"
    assert calls.inspected("t", "a", []) is None
    blob = codec.pack(b'{"x":1}', 9, 1, None, None, None)
    info = calls.inspected("t", "a", [b"delayed", blob, b"", -1, -1])
    assert info is not None and info.state == State.DELAYED and info.body == {"x": 1}
    (lease,) = calls.leases("t", [b"t|a", b"tok", 77, blob])
    assert (lease.id, lease.token, lease.deadline_ms, lease.attempt) == ("a", "tok", 77, 1)


def test_list_page_reads_the_states_structure_and_parses_positions() -> None:
    delayed = calls.list_page(KEYS, AT, "t", State.DELAYED, 10, 100, None)
    assert delayed.keys[0] == KEYS.delayed
    assert delayed.args[4:] == ["t", "delayed", 10, 100, "", ""]  # the buckets' index
    leased = calls.list_page(KEYS, AT, "t", State.LEASED, 10, 100, None)
    assert leased.keys[0] == KEYS.leased and leased.args[4:] == ["t", "zset", 10, 100, "", ""]
    ready = calls.list_page(KEYS, AT, "t", State.READY, 10, 100, (None, "t|a"))
    assert ready.keys[0] == KEYS.ready("t") and ready.args[4:] == ["t", "list", 10, 100, "", "t|a"]
    blob = codec.pack(b"1", 9, 1, None, None, None)
    page = calls.listed("t", State.LEASED, [0, b"77", b"u|z", b"t|a", b"77", blob, b"tok"])
    ((position, info),) = page.jobs
    assert position == (77, "t|a") and (info.token, info.lease_deadline_ms) == ("tok", 77)
    assert (page.complete, page.reached) == (False, (77, "u|z"))
    gone = calls.listed("t", State.READY, [1, b"", b"", b"t|a", b"", b"", b""])
    assert (gone.jobs, gone.complete, gone.reached) == ([], True, None)


def test_the_calls_module_imports_no_redis() -> None:
    source = inspect.getsource(calls)
    assert "import redis" not in source and "from redis" not in source


class CountingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def now_ms(self) -> int:
        self.reads += 1
        return super().now_ms()


@pytest.mark.parametrize("shards", [1, 3])
def test_each_operation_reads_the_clock_once_whatever_the_shard_count(
    redis_client: redis.Redis, shards: int
) -> None:
    clock = CountingClock()
    store = Store(redis_client, f"once{shards}", clock, shards=shards)
    ids = [f"j{n}" for n in range(12)]
    assert len({shard_of("t", i, shards) for i in ids}) == shards  # every shard has work
    jobs = [store.new_job("t", i) for i in ids]

    def reads_of(operation: str) -> int:
        clock.reads = 0
        getattr(store, operation)()
        return clock.reads

    assert reads_of("carry") == 1
    clock.reads = 0
    assert store.add_many(jobs) == ["new"] * 12
    assert clock.reads == 1
    clock.reads = 0
    leases = store.lease("t", 12)
    assert len(leases) == 12 and clock.reads == 1
    clock.reads = 0
    assert store.ack_many([(x.topic, x.id, x.token) for x in leases]) == [ErrorCode.OK] * 12
    assert clock.reads == 1
    assert reads_of("expire") == 1


def test_a_sharded_add_runs_one_script_call_per_shard(redis_client: redis.Redis) -> None:
    store = Store(redis_client, "calls", FakeClock(), shards=3)
    ids = [f"j{n}" for n in range(12)]
    before = _evalsha_calls(redis_client)
    store.add_many([store.new_job("t", i) for i in ids])
    assert _evalsha_calls(redis_client) - before == 3


def _evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_every_script_that_writes_the_audit_stream_declares_the_index_as_its_last_key() -> None:
    """The index is declared, not built from the prefix, so that during a slot migration a script
    runs on the importing node only once the index has arrived there (lua/_lib.lua). A script
    that may drop the index's previous generation (rotate_history_index) declares that last."""
    writers = [call for call in every_call() if KEYS.audit in call.keys and call.name != "history"]
    assert len(writers) >= 16
    source = {name: text for name, (_, text) in sources().items()}
    rotating = {call.name for call in writers if ROTATES.search(source[call.name])}
    assert {"ack", "cancel", "purge", "carry"} <= rotating
    both = [KEYS.history, KEYS.history_previous]
    assert [call.name for call in writers if call.name in rotating and call.keys[-2:] != both] == []
    others = [call for call in writers if call.name not in rotating]
    assert [call.name for call in others if call.keys[-1] != KEYS.history] == []
    assert [call.name for call in others if KEYS.history_previous in call.keys] == []


def test_error_codes_map_every_code_and_refuse_an_unknown_one() -> None:
    assert calls.error_codes([int(code) for code in ErrorCode]) == list(ErrorCode)
    assert calls.fail_outcomes([b"dead", -3]) == ["dead", ErrorCode.STALE_TOKEN]
    with pytest.raises(ValueError):
        calls.error_codes([99])
