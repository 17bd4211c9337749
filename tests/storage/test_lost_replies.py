"""A producer's call whose reply was lost, sent again.

An add: the resend of a call that ran is not a conflict.

The add script stores each job's record with its created ms, so a call sent twice carries the
very same records; a second add of the same ids (a new call, a later ms) does not. The script
returns success, writing nothing, only when every job of the call is stored with the record it
sends; anything else is refused as before. Real redis-server throughout; ``reply_cut`` loses the
add's reply after Redis ran it, as a dropped connection does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from _reply_cut import ReplyCut
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors import AsyncDelayQueue, DelayQueue, JobExistsError
from actors.clock import FakeClock, SystemClock
from actors.errors import ErrorCode
from actors.storage.store import Store


def fingerprint(client: redis.Redis) -> dict[bytes, Any]:
    return {key: client.dump(key) for key in sorted(client.keys("*"))}  # type: ignore[misc]


def kinds(store: Store, job_id: str) -> list[str]:
    return [fields["e"] for _, fields in store.job_entries("mail", job_id)]


def test_a_client_retry_after_a_lost_reply_returns_new_and_adds_once(
    reply_cut: ReplyCut, redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    # redis-py sends the command again on the new connection by itself.
    retrying = redis.Redis.from_url(reply_cut.url, retry=Retry(NoBackoff(), 3))
    queue = DelayQueue(retrying, "test", clock=fake_clock, producer_only=True)
    reply_cut.arm_script("add")
    try:
        assert queue.add("mail", "42", {"n": 1}, delay=60) == "new"
        assert queue.add_many([{"topic": "mail", "id": "43", "delay": 60}]) == ["new"]
    finally:
        queue.close()
    assert reply_cut.cuts == 1
    store = Store(redis_client, "test", fake_clock)
    assert kinds(store, "42") == ["added"]  # the resend wrote no second entry
    assert store.stats()["mail"]["delayed"] == 2


def test_a_resent_add_with_a_delay_is_known_though_its_due_time_counts_from_the_servers_now(
    reply_cut: ReplyCut, redis_client: redis.Redis
) -> None:
    # The script counts the delay from its own now, so the resend, later, would find another due
    # time for the same job: it compares the records with the due time the first call wrote.
    retrying = redis.Redis.from_url(reply_cut.url, retry=Retry(NoBackoff(), 3))
    queue = DelayQueue(retrying, "test", producer_only=True)  # the server's clock judges
    reply_cut.arm_script("add")
    try:
        assert queue.add("mail", "42", {"n": 1}, delay=60) == "new"
    finally:
        queue.close()
    assert reply_cut.cuts == 1
    store = Store(redis_client, "test", SystemClock())
    assert kinds(store, "42") == ["added"]
    info = store.get("mail", "42")
    assert info is not None and info.due_ms == int(store.job_entries("mail", "42")[0][1]["due"])


def test_the_async_producer_is_the_same(
    reply_cut: ReplyCut, redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    async def add_through_the_cut() -> str:
        retrying = aredis.Redis.from_url(reply_cut.url, retry=AsyncRetry(NoBackoff(), 3))
        queue = AsyncDelayQueue(retrying, "test", clock=fake_clock)
        try:
            return await queue.add("mail", "42", {"n": 1}, delay=60)
        finally:
            await queue.aclose()

    reply_cut.arm_script("add")
    assert asyncio.run(add_through_the_cut()) == "new"
    assert reply_cut.cuts == 1
    assert kinds(Store(redis_client, "test", fake_clock), "42") == ["added"]


def test_the_same_call_twice_writes_once(store: Store) -> None:
    jobs = [store.new_job("mail", str(n), {"n": n}, delay_ms=60_000) for n in range(3)]
    assert store.add_many(jobs) == ["new"] * 3
    before = fingerprint(store.client)
    assert store.add_many(jobs) == ["new"] * 3
    assert fingerprint(store.client) == before


def test_a_later_add_of_the_same_job_is_refused(store: Store, fake_clock: FakeClock) -> None:
    job = store.new_job("mail", "42", {"n": 1}, delay_ms=60_000)
    store.add(job)
    before = fingerprint(store.client)
    fake_clock.advance(1)  # same body and due time, but another call: another created ms
    with pytest.raises(JobExistsError) as caught:
        store.add(job)
    assert caught.value.jobs == [("mail", "42")]
    assert fingerprint(store.client) == before


def test_a_resend_is_refused_once_a_job_of_it_has_changed(
    store: Store, fake_clock: FakeClock
) -> None:
    """A job acked or failed since the first send cannot be told from one never added, so the
    call is refused as a whole: nothing runs twice."""
    jobs = [store.new_job("mail", str(n), delay_ms=0) for n in range(3)]
    store.add_many(jobs)
    first, second, _ = store.lease("mail", 3)
    assert store.ack("mail", first.id, first.token) == ErrorCode.OK
    assert store.fail("mail", second.id, second.token, "boom") == "delayed"
    before = fingerprint(store.client)
    with pytest.raises(JobExistsError) as caught:
        store.add_many(jobs)
    assert caught.value.jobs == [("mail", "1"), ("mail", "2")]
    assert fingerprint(store.client) == before


def test_a_cancel_sent_again_after_a_lost_reply_returns_false_and_the_history_says_cancelled(
    reply_cut: ReplyCut, redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    """As docs/api.md says: the job will not run either way, and its history tells."""
    store = Store(redis_client, "test", fake_clock)
    store.add(store.new_job("mail", "42", delay_ms=60_000))
    retrying = redis.Redis.from_url(reply_cut.url, retry=Retry(NoBackoff(), 3))
    queue = DelayQueue(retrying, "test", clock=fake_clock, producer_only=True)
    reply_cut.arm_script("cancel")
    try:
        assert queue.cancel("mail", "42") is False
        assert [event.event for event in queue.history("mail", "42")] == ["added", "cancelled"]
    finally:
        queue.close()
    assert reply_cut.cuts == 1 and store.get("mail", "42") is None


def test_a_replace_sent_again_leaves_the_job_and_a_lease_taken_since(
    store: Store, fake_clock: FakeClock
) -> None:
    """Replacing again would revoke the lease and run the job twice: the resend changes nothing
    and answers the state the job is in."""
    store.add(store.new_job("mail", "42", {"n": 1}, delay_ms=60_000))
    call = [store.new_job("mail", "42", {"n": 2}, delay_ms=0)]
    assert store.add_many(call, replace=True) == ["delayed"]
    (lease,) = store.lease("mail", 1)
    before = fingerprint(store.client)
    assert store.add_many(call, replace=True) == ["leased"]
    assert fingerprint(store.client) == before
    assert store.ack("mail", "42", lease.token) == ErrorCode.OK
    assert kinds(store, "42") == ["added", "replaced", "leased", "acked"]


def test_a_client_retry_of_a_replace_after_a_lost_reply_replaces_once(
    reply_cut: ReplyCut, redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store = Store(redis_client, "test", fake_clock)
    store.add(store.new_job("mail", "42", {"n": 1}, delay_ms=60_000))
    retrying = redis.Redis.from_url(reply_cut.url, retry=Retry(NoBackoff(), 3))
    queue = DelayQueue(retrying, "test", clock=fake_clock, producer_only=True)
    reply_cut.arm_script("replace")
    try:
        # The answer is the resend's: the state the first send left the job in.
        assert queue.add("mail", "42", {"n": 2}, delay=30, replace=True) == "delayed"
    finally:
        queue.close()
    assert reply_cut.cuts == 1
    assert kinds(store, "42") == ["added", "replaced"]
