"""The loader finds every transition script, expands includes, and checks key counts."""

from __future__ import annotations

import re

import pytest
import redis

from actors import FakeClock, Store
from actors.storage.keys import member
from actors.storage.scripts import ScriptRunner, lua_dir, sources

TRANSITIONS = {
    "add",
    "replace",
    "carry",
    "lease",
    "ack",
    "fail",
    "expire",
    "extend",
    "release",
    "cancel",
    "requeue",
    "purge",
    "inspect",
}


def test_every_transition_has_a_script() -> None:
    assert set(sources()) == TRANSITIONS


def test_includes_are_expanded_and_every_script_opens_with_its_contract() -> None:
    for name, (_, source) in sources().items():
        assert "-- @include" not in source, name
        assert source.startswith(f"-- {name}:"), name
        assert "KEYS[1]" in source.split("\n\n")[0] or "KEYS[1]" in source[:800], name


def test_key_count_in_file_name_matches_the_contract() -> None:
    for path in lua_dir().glob("[a-z]*.lua"):
        declared = int(path.stem.rsplit("-", 1)[1])
        text = path.read_text()
        used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", text)}
        assert max(used) == declared, path.name


def test_every_script_compiles_on_the_server(redis_client: redis.Redis) -> None:
    for name, (_, source) in sources().items():
        sha = redis_client.script_load(source)
        assert redis_client.script_exists(sha) == [True], name


def test_runner_refuses_a_wrong_key_count(redis_client: redis.Redis) -> None:
    runner = ScriptRunner(redis_client)
    with pytest.raises(TypeError, match="takes 4 keys"):
        runner("carry", ["a"], [])


def test_expire_drops_a_lease_whose_record_is_gone(store: Store, fake_clock: FakeClock) -> None:
    """A record deleted behind the scripts' back must not stop the other leases expiring."""
    store.add_many([store.new_job("t", job_id, retry_ms=[1_000]) for job_id in ("a", "b", "c")])
    leases = store.lease("t", 3)
    assert [lease.id for lease in leases] == ["a", "b", "c"]
    store.client.hdel(store.keys.jobs, member("t", "a"))  # earliest deadline: expired first
    fake_clock.advance(60_000)

    assert store.expire() == (3, None)

    assert store.client.zscore(store.keys.leased, member("t", "a")) is None
    assert store.client.hget(store.keys.tokens, member("t", "a")) is None
    assert store.get("t", "a") is None
    for job_id in ("b", "c"):
        info = store.get("t", job_id)
        assert info is not None and info.state == "delayed" and info.attempts_failed == 1
    assert store.stats()["t"] == {"delayed": 2, "ready": 0, "leased": 0, "dead": 0}
    expired = [fields["i"] for _, fields in store.iter_audit() if fields["e"] == "expired"]
    assert expired == ["b", "c"]  # no event for the job that no longer exists
