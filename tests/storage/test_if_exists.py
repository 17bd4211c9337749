"""add(..., if_exists=...): "error" names the job and writes nothing, "keep" deduplicates (nothing
written, the existing state returned), "replace" is the older replace=True. One shard and several,
against a real redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from actors import DelayQueue, JobExistsError, ValidationError
from actors.clock import FakeClock
from actors.server.embedded import RedisProcess
from actors.storage.keys import shard_of


@pytest.fixture
def queue(redis_client: redis.Redis, fake_clock: FakeClock) -> Iterator[DelayQueue]:
    q = DelayQueue(redis_client, "dedupe", clock=fake_clock, producer_only=True)
    yield q
    q.close()


def fingerprint(client: redis.Redis) -> dict[bytes, bytes]:
    return {key: client.dump(key) for key in sorted(client.keys("*"))}  # type: ignore[misc]


def test_error_is_the_default_and_names_the_job(queue: DelayQueue) -> None:
    queue.add("mail", "42", {"n": 1}, delay=60)
    before = fingerprint(queue.store.client)
    for mode in (None, "error"):
        with pytest.raises(JobExistsError, match="mail/42") as caught:
            queue.add("mail", "42", {"n": 2}, if_exists=mode)
        assert caught.value.jobs == [("mail", "42")]
    assert fingerprint(queue.store.client) == before


def test_keep_writes_nothing_and_returns_the_existing_state(
    queue: DelayQueue, fake_clock: FakeClock
) -> None:
    queue.add("mail", "42", {"n": 1}, delay=60)
    before = fingerprint(queue.store.client)
    assert queue.add("mail", "42", {"n": 2}, if_exists="keep") == "delayed"
    assert fingerprint(queue.store.client) == before  # no record, no event, no counter changed
    info = queue.get("mail", "42")
    assert info is not None and info.body == {"n": 1}
    assert queue.add("mail", "new", {"n": 3}, if_exists="keep") == "new"
    fake_clock.advance(60_000)
    queue.store.carry()
    assert sorted(lease.id for lease in queue.store.lease("mail", 2)) == ["42", "new"]
    assert queue.add("mail", "42", if_exists="keep") == "leased"


def test_keep_in_a_batch_adds_the_new_jobs_and_keeps_the_rest(queue: DelayQueue) -> None:
    queue.add("mail", "a", {"v": "old"}, delay=10)
    results = queue.add_many(
        [
            {"topic": "mail", "id": "a", "body": {"v": "new"}},
            {"topic": "mail", "id": "b", "body": {"v": "new"}},
        ],
        if_exists="keep",
    )
    assert results == ["delayed", "new"]
    kept, added = queue.get("mail", "a"), queue.get("mail", "b")
    assert kept is not None and kept.body == {"v": "old"}
    assert added is not None and added.body == {"v": "new"} and added.state == "ready"
    assert queue.stats()["mail"]["ready"] == 1 and queue.stats()["mail"]["delayed"] == 1


def test_keep_across_shards_adds_every_shard_s_new_jobs(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    queue = DelayQueue(redis_client, "dedupe3", clock=fake_clock, producer_only=True, shards=3)
    try:
        ids = [f"j{n}" for n in range(12)]
        existing = ids[::3]  # a few, in whichever shards they hash to
        assert {shard_of("t", i, 3) for i in existing} != set()
        queue.add_many([{"topic": "t", "id": i, "delay": 5} for i in existing])
        results = queue.add_many([{"topic": "t", "id": i} for i in ids], if_exists="keep")
        assert results == ["delayed" if i in existing else "new" for i in ids]
        assert queue.stats()["t"]["ready"] == len(ids) - len(existing)
    finally:
        queue.close()


def test_replace_and_its_alias(queue: DelayQueue) -> None:
    queue.add("mail", "42", {"n": 1}, delay=60)
    assert queue.add("mail", "42", {"n": 2}, if_exists="replace") == "delayed"
    assert queue.add("mail", "42", {"n": 3}, replace=True) == "ready"
    info = queue.get("mail", "42")
    assert info is not None and info.body == {"n": 3}


def test_a_bad_value_names_the_field_and_writes_nothing(queue: DelayQueue) -> None:
    before = fingerprint(queue.store.client)
    with pytest.raises(ValidationError, match="if_exists") as caught:
        queue.add("mail", "1", if_exists="ignore")  # type: ignore[arg-type]
    assert caught.value.field == "if_exists"
    with pytest.raises(ValidationError, match="if_exists"):
        queue.add("mail", "1", if_exists="keep", replace=True)
    with pytest.raises(ValidationError, match="if_exists"):
        queue.add_many([{"topic": "mail", "id": "1"}], if_exists="skip")  # type: ignore[arg-type]
    assert fingerprint(queue.store.client) == before


@pytest.mark.slow
def test_the_cli_keeps_an_existing_job(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    where = ["--delay", "1h", "--redis", redis_server.url, "--namespace", "clikeep", "--json"]

    def add(*extra: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
        if "REDELAY_REDIS_SERVER" in os.environ:
            env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "actors.cli",
                "add",
                "mail",
                "7",
                "--delay",
                "1h",
                *where,
                *extra,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    assert add().returncode == 0
    assert add().returncode == 4  # the default: error
    kept = add("--if-exists", "keep")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["kept"] is True
    assert json.loads(kept.stdout)["state"] == "delayed"
    assert add("--if-exists", "keep", "--replace").returncode == 2  # one or the other
