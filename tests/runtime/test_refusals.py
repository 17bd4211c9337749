"""Reading why a result was refused from the job's own history (actors/runtime/_refusals.py):
each case is made for real on a store, then the refused result's history is read."""

from __future__ import annotations

from actors.clock import FakeClock
from actors.errors import ErrorCode
from actors.runtime._refusals import applied_reply, gone
from actors.storage.store import Store
from actors.values import AuditEntry, Lease, TopicConfig


def leased(store: Store, retry_ms: tuple[int, ...] = (1_000,)) -> Lease:
    store.configure_topic("t", TopicConfig(retry_ms=retry_ms, lease_ms=1_000))
    store.add(store.new_job("t", "j"))
    (lease,) = store.lease("t", 1, "us")
    return lease


def history(store: Store) -> list[AuditEntry]:
    (entries,) = store.jobs_entries([("t", "j")])
    return entries


def test_an_ack_sent_twice_reads_as_applied_by_the_first(store: Store) -> None:
    lease = leased(store)
    assert store.ack("t", "j", lease.token) is ErrorCode.OK
    assert store.ack("t", "j", lease.token) is ErrorCode.NOT_LEASED  # the second send
    entries = history(store)
    assert applied_reply(entries, lease.token, "ack") is ErrorCode.OK
    assert not gone(entries)


def test_a_fail_sent_twice_reads_as_the_state_the_first_left(store: Store) -> None:
    lease = leased(store)
    assert store.fail("t", "j", lease.token, "boom") == "delayed"
    assert store.fail("t", "j", lease.token, "boom") is ErrorCode.NOT_LEASED
    assert applied_reply(history(store), lease.token, "fail") == "delayed"
    assert applied_reply(history(store), lease.token, "ack") is None  # not an ack of it


def test_a_last_fail_sent_twice_reads_as_dead(store: Store) -> None:
    first = leased(store, retry_ms=(0,))
    assert store.fail("t", "j", first.token, "boom") == "ready"  # retried at once
    (lease,) = store.lease("t", 1, "us")
    assert store.fail("t", "j", lease.token, "boom") == "dead"
    assert applied_reply(history(store), lease.token, "fail") == "dead"


def test_a_fail_of_a_job_whose_cancel_was_asked_reads_as_cancelled(store: Store) -> None:
    lease = leased(store)
    store.cancel("t", "j")  # leased: the cancel is noted, the lease ends with the result
    assert store.fail("t", "j", lease.token, "boom") == "cancelled"
    assert applied_reply(history(store), lease.token, "fail") == "cancelled"


def test_a_lease_that_expired_is_not_applied_whatever_came_after(
    store: Store, fake_clock: FakeClock
) -> None:
    lease = leased(store)
    fake_clock.advance(1_000)
    assert store.expire()[0] == 1
    fake_clock.advance(1_000)
    store.carry()  # its retry is due
    (again,) = store.lease("t", 1, "another worker")
    assert store.ack("t", "j", again.token) is ErrorCode.OK  # the next attempt, elsewhere
    assert store.ack("t", "j", lease.token) is ErrorCode.NOT_LEASED
    entries = history(store)
    assert applied_reply(entries, lease.token, "ack") is None
    assert applied_reply(entries, lease.token, "fail") is None
    assert not gone(entries)


def test_a_lease_given_back_and_acked_by_another_is_not_ours(store: Store) -> None:
    lease = leased(store)
    assert store.release_many([("t", "j", lease.token)]) == [0]
    (again,) = store.lease("t", 1, "another worker")  # the same attempt, another token
    assert store.ack("t", "j", again.token) is ErrorCode.OK
    assert applied_reply(history(store), lease.token, "ack") is None


def test_a_job_redis_lost_is_gone(store: Store) -> None:
    lease = leased(store)
    store.client.flushall()
    assert store.ack("t", "j", lease.token) is ErrorCode.NOT_LEASED  # writes its own refusal
    entries = history(store)
    assert [f["e"] for _, f in entries] == ["rejected"]
    assert gone(entries)
    assert applied_reply(entries, lease.token, "ack") is None
