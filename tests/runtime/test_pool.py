"""ConsumerPool: the concurrency limit, acks and fails sent in batches, Retry(after=...), a
timeout that is counted and failed, lease extension of a long handler, async handlers on the
pool's own loop. Driven by the fake clock: timeouts and extensions happen inside advance()."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pykka
import pytest
import redis
from _actor_support import events, stats
from _reply_cut import ReplyCut
from _wait import wait_until

from actors.clock import Clock, FakeClock, SteppedClock
from actors.job import Job, Retry
from actors.runtime._handlers import Outcome
from actors.runtime.listener import TopicListener
from actors.runtime.messages import Drain, Run, SetListener
from actors.runtime.notifier import ShardNotifier
from actors.runtime.pool import ConsumerPool
from actors.server.embedded import RedisProcess
from actors.storage.store import Store
from actors.values import Lease, TopicConfig

LEASE_MS = 1_000


@pytest.fixture
def topic(store: Store) -> Store:
    """Topic "t": retried after 1 s then 2 s, leases last 1 s."""
    store.configure_topic("t", TopicConfig(retry_ms=(1_000, 2_000), lease_ms=LEASE_MS))
    return store


def leased(store: Store, count: int) -> tuple[Lease, ...]:
    store.add_many([store.new_job("t", f"j{n}", {"n": n}) for n in range(count)])
    return tuple(store.lease("t", count, "test"))


def start_pool(
    store: Store, clock: Clock, handler: Callable[[Job], Any], **kwargs: Any
) -> pykka.ActorRef[ConsumerPool]:
    options: dict[str, Any] = {"concurrency": 4, "timeout_ms": 10_000, "lease_ms": LEASE_MS}
    options.update(kwargs)
    return ConsumerPool.start(store, clock, "t", handler, **options)


def run(pool: pykka.ActorRef[Any], leases: tuple[Lease, ...]) -> None:
    """Hands the pool jobs and waits until it has started them (and set its check timer)."""
    pool.tell(Run(leases))
    stats(pool)


def advance_and_settle(clock: FakeClock, pool: pykka.ActorRef[Any], total_ms: int) -> None:
    """Advances in 100 ms steps (the pool's check interval), letting the pool handle each
    CheckRunning before the next step sets the next timer."""
    for _ in range(total_ms // 100):
        clock.advance(100)
        stats(pool)


def test_runs_at_most_concurrency_handlers_at_once(
    topic: Store, fake_clock: FakeClock, notifiers: Callable[[Store], ShardNotifier]
) -> None:
    active: set[str] = set()
    most = [0]
    lock = threading.Lock()
    release = threading.Semaphore(0)

    def handler(job: Job) -> None:
        with lock:
            active.add(job.id)
            most[0] = max(most[0], len(active))
        release.acquire()
        with lock:
            active.discard(job.id)

    pool = start_pool(topic, fake_clock, handler, concurrency=2)
    listener = TopicListener.start(topic, fake_clock, "t", pool, 2, notifier=notifiers(topic))
    pool.tell(SetListener(listener))
    topic.add_many([topic.new_job("t", f"j{n}") for n in range(6)])
    for _ in range(6):
        wait_until(lambda: len(active) == 2 or stats(pool)["acked"] >= 5, "two running")
        release.release()
    wait_until(lambda: stats(pool)["acked"] == 6, "every job acked")
    assert most[0] == 2


class ObservedPool(ConsumerPool):
    """Counts the results reported, so a test knows they are in the pool's result queue."""

    reported: threading.Semaphore

    def _report(self, lease: Lease, outcome: Outcome) -> None:
        super()._report(lease, outcome)
        self.reported.release()


def test_acks_and_fails_that_arrive_together_share_one_round_trip_each(
    topic: Store, fake_clock: FakeClock, redis_client: redis.Redis
) -> None:
    gate = threading.Event()

    def handler(job: Job) -> None:
        gate.wait()
        if job.body["n"] < 2:
            raise RuntimeError("boom")

    ObservedPool.reported = threading.Semaphore(0)
    pool = ObservedPool.start(
        topic, fake_clock, "t", handler, concurrency=5, timeout_ms=10_000, lease_ms=LEASE_MS
    )
    run(pool, leased(topic, 5))
    advance_and_settle(fake_clock, pool, 400)
    # Keep the pool busy in a Redis call while all five finish: writes are paused, and the
    # pool's lease extension (due at half the lease) waits for the pause to end.
    redis_client.client_pause(5_000, all=False)
    try:
        fake_clock.advance(100)
        wait_until(lambda: redis_client.info("clients")["blocked_clients"] == 1, "the pause")
        gate.set()
        for _ in range(5):
            assert ObservedPool.reported.acquire(timeout=5)
    finally:
        redis_client.client_unpause()
    wait_until(lambda: stats(pool)["acked"] == 3 and stats(pool)["failed"] == 2, "the results")
    assert stats(pool)["flushes"] == 2  # one ack call for three jobs, one fail call for two
    assert topic.stats()["t"] == {"delayed": 2, "ready": 0, "leased": 0, "dead": 0}


def test_retry_after_sets_the_next_due_time(topic: Store, fake_clock: FakeClock) -> None:
    def handler(job: Job) -> None:
        raise Retry(after=2.5, reason="not yet")

    pool = start_pool(topic, fake_clock, handler)
    (lease,) = leased(topic, 1)
    run(pool, (lease,))
    wait_until(lambda: stats(pool)["failed"] == 1, "the failed attempt")
    info = topic.get("t", "j0")
    assert info is not None and info.state == "delayed"
    assert info.due_ms == fake_clock.now_ms() + 2_500  # not the schedule's 1 s
    assert info.attempts_failed == 1
    assert events(topic, "j0")[-1]["why"] == "not yet"


def test_a_handler_over_its_timeout_is_failed_counted_and_keeps_its_thread(
    topic: Store, fake_clock: FakeClock
) -> None:
    gate = threading.Event()
    pool = start_pool(topic, fake_clock, lambda job: gate.wait(), timeout_ms=1_000)
    (lease,) = leased(topic, 1)
    run(pool, (lease,))
    advance_and_settle(fake_clock, pool, 900)
    assert stats(pool)["timeouts"] == 0
    advance_and_settle(fake_clock, pool, 100)
    wait_until(lambda: stats(pool)["failed"] == 1, "the timeout failed")
    assert stats(pool)["timeouts"] == 1
    assert stats(pool)["running"] == 1  # its thread still runs, and holds its slot
    info = topic.get("t", "j0")
    assert info is not None and info.state == "delayed" and info.attempts_failed == 1
    assert events(topic, "j0")[-1]["why"] == "timeout after 1s"

    gate.set()  # the late result is ignored: the attempt was already failed
    wait_until(lambda: stats(pool)["running"] == 0, "the thread returned, its slot freed")
    assert stats(pool)["acked"] == 0
    assert topic.get("t", "j0") == info


@pytest.mark.parametrize("offset_ms", [600_000, -600_000], ids=["ahead", "behind"])
def test_a_pool_whose_clock_is_off_extends_a_lease_once_half_of_it_is_gone(
    topic: Store, fake_clock: FakeClock, offset_ms: int
) -> None:
    # The scripts follow the shared clock (Redis's TIME, in production); the pool's own clock is
    # ten minutes off it. Behind, it took the deadline for far away and never extended; ahead,
    # it extended at every check.
    gate = threading.Event()
    own = SteppedClock(fake_clock, offset_ms)
    pool = start_pool(topic, own, lambda job: gate.wait(), timeout_ms=60_000)
    (lease,) = leased(topic, 1)
    run(pool, (lease,))
    advance_and_settle(fake_clock, pool, 5 * LEASE_MS)  # five times the lease
    info = topic.get("t", "j0")
    assert info is not None and info.state == "leased" and info.token == lease.token
    assert topic.expire()[0] == 0
    assert 8 <= stats(pool)["extended"] <= 10  # once every half lease, not every 100 ms check
    gate.set()
    wait_until(lambda: stats(pool)["acked"] == 1, "the ack")


def test_a_long_handler_keeps_its_lease(topic: Store, fake_clock: FakeClock) -> None:
    gate = threading.Event()
    pool = start_pool(topic, fake_clock, lambda job: gate.wait(), timeout_ms=60_000)
    (lease,) = leased(topic, 1)
    run(pool, (lease,))
    advance_and_settle(fake_clock, pool, 5 * LEASE_MS)  # five times the lease

    info = topic.get("t", "j0")
    assert info is not None and info.state == "leased" and info.token == lease.token
    assert info.lease_deadline_ms is not None and info.lease_deadline_ms > fake_clock.now_ms()
    # Another consumer's sweeper finds nothing expired, and nothing is left to lease.
    assert topic.expire() == (0, info.lease_deadline_ms)
    assert topic.lease("t", 1, "other") == []
    assert stats(pool)["extended"] >= 8
    gate.set()
    wait_until(lambda: stats(pool)["acked"] == 1, "the ack")
    assert [e["e"] for e in events(topic, "j0")][-1] == "acked"


def test_async_handlers_run_together_on_the_pools_loop(topic: Store, fake_clock: FakeClock) -> None:
    threads: set[str] = set()
    loops: set[int] = set()
    started = threading.Semaphore(0)
    box: dict[str, asyncio.Event] = {}

    async def handler(job: Job) -> str:
        threads.add(threading.current_thread().name)
        loops.add(id(asyncio.get_running_loop()))
        box.setdefault("gate", asyncio.Event())
        started.release()
        await box["gate"].wait()
        return "done"

    pool = start_pool(topic, fake_clock, handler)
    run(pool, leased(topic, 3))
    for _ in range(3):  # all three are awaiting at once on one thread
        assert started.acquire(timeout=5)
    loop = next(iter(box.values()))._loop  # type: ignore[attr-defined]
    loop.call_soon_threadsafe(box["gate"].set)
    wait_until(lambda: stats(pool)["acked"] == 3, "three acks")
    assert threads == {"redelay-t-loop"} and len(loops) == 1
    assert events(topic, "j1")[-1]["detail"] == "done"


def test_an_async_handler_over_its_timeout_is_cancelled(
    topic: Store, fake_clock: FakeClock
) -> None:
    cancelled = threading.Event()

    async def handler(job: Job) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    pool = start_pool(topic, fake_clock, handler, timeout_ms=500)
    run(pool, leased(topic, 1))
    advance_and_settle(fake_clock, pool, 500)
    assert cancelled.wait(5)
    wait_until(lambda: stats(pool)["running"] == 0, "the slot freed")
    assert stats(pool)["timeouts"] == 1 and stats(pool)["failed"] == 1


def test_a_body_that_is_not_json_fails_the_attempt_not_the_pool(
    topic: Store, fake_clock: FakeClock
) -> None:
    (lease,) = leased(topic, 1)
    broken = Lease(**{**{f: getattr(lease, f) for f in lease.__slots__}, "body": b"{nope"})
    pool = start_pool(topic, fake_clock, lambda job: None)
    run(pool, (broken,))
    wait_until(lambda: stats(pool)["failed"] == 1, "the failed attempt")
    assert "JSONDecodeError" in events(topic, "j0")[-1]["why"]
    assert pool.is_alive()


def test_a_handler_that_exits_does_not_end_its_thread(topic: Store, fake_clock: FakeClock) -> None:
    def handler(job: Job) -> None:
        raise SystemExit(3)

    pool = start_pool(topic, fake_clock, handler, concurrency=1)
    pool.tell(Run(leased(topic, 2)))  # one thread: the second job needs the first's thread
    wait_until(lambda: stats(pool)["failed"] == 2, "both attempts failed")
    assert events(topic, "j1")[-1]["why"] == "SystemExit: 3"


def test_acks_wait_out_a_redis_outage_and_are_sent_when_it_returns(
    redis_factory: Callable[..., RedisProcess], fake_clock: FakeClock
) -> None:
    server = redis_factory(appendonly=True, appendfsync="always")
    store = Store(redis.Redis.from_url(server.url), "test", fake_clock)
    store.configure_topic("t", TopicConfig(retry_ms=(1_000,), lease_ms=60_000))
    gate = threading.Event()
    pool = start_pool(store, fake_clock, lambda job: gate.wait(), lease_ms=60_000)
    run(pool, leased(store, 3))

    server.kill()
    gate.set()  # all three return while Redis is away: the ack cannot be sent
    wait_until(lambda: stats(pool)["running"] == 0, "the handlers finished")
    assert stats(pool)["acked"] == 0
    for _ in range(3):  # each retry waits longer, on the clock
        fake_clock.advance(5_000)
        stats(pool)
    server.start()
    fake_clock.advance(5_000)
    wait_until(lambda: stats(pool)["acked"] == 3, "the acks after the outage")
    assert store.stats()["t"] == {"delayed": 0, "ready": 0, "leased": 0, "dead": 0}
    assert pool.is_alive()


# -- a result whose reply was lost ---------------------------------------------------------------


def pool_behind(
    reply_cut: ReplyCut, clock: FakeClock, handler: Callable[[Job], Any], **kwargs: Any
) -> tuple[pykka.ActorRef[ConsumerPool], Store]:
    """A pool whose Redis connections go through ``reply_cut``, and a store that does not."""
    direct = Store(redis.Redis(unix_socket_path=reply_cut.redis_socket), "test", clock)
    direct.configure_topic("t", TopicConfig(retry_ms=(1_000,), lease_ms=LEASE_MS))
    behind = Store(redis.Redis.from_url(reply_cut.url), "test", clock)
    return start_pool(behind, clock, handler, **kwargs), direct


def pool_losing_a_reply(
    reply_cut: ReplyCut,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    script: str,
    handler: Callable[[Job], Any],
) -> tuple[pykka.ActorRef[ConsumerPool], Store]:
    """A pool behind ``reply_cut`` running one leased job, whose first ``script`` call will run
    on Redis and lose its reply; everything logged is captured."""
    caplog.set_level(logging.DEBUG, logger="actors")
    pool, direct = pool_behind(reply_cut, clock, handler)
    reply_cut.arm_script(script)
    run(pool, leased(direct, 1))
    return pool, direct


def pool_whose_lease_expired(
    topic: Store, clock: FakeClock
) -> tuple[pykka.ActorRef[ConsumerPool], threading.Event]:
    """A pool running one job held on the returned gate, whose lease another consumer's sweeper
    took back; the pool does not know yet (its first check is after the lease ran out)."""
    gate = threading.Event()
    pool = start_pool(topic, clock, lambda job: gate.wait(), check_interval_ms=60_000)
    run(pool, leased(topic, 1))
    clock.advance(LEASE_MS)
    assert topic.expire() == (1, None)  # it will run again
    return pool, gate


def pool_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the pool logged (the outage's own two lines come from actors.redis)."""
    return [r for r in caplog.records if r.name == "actors.pool"]


def resend_after_backoff(
    clock: FakeClock, pool: pykka.ActorRef[Any], done: Callable[[], bool]
) -> None:
    """The pool sends again after its backoff, which runs on the fake clock."""

    def advanced() -> bool:
        clock.advance(100)
        stats(pool)
        return done()

    wait_until(advanced, "the result sent again")


def test_an_ack_that_ran_but_whose_reply_was_lost_counts_as_acked_not_as_a_lost_lease(
    redis_client: redis.Redis,
    reply_cut: ReplyCut,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool, direct = pool_losing_a_reply(reply_cut, fake_clock, caplog, "ack", lambda job: None)

    resend_after_backoff(fake_clock, pool, lambda: stats(pool)["acked"] == 1)
    assert reply_cut.cuts == 1
    # The first ack ran; the second, sent because its reply never came, was refused.
    assert [e["e"] for e in events(direct, "j0")] == ["added", "leased", "acked", "rejected"]
    assert stats(pool)["lost_leases"] == 0
    assert not [r for r in pool_records(caplog) if r.levelno >= logging.WARNING]
    assert any("already applied" in r.getMessage() for r in pool_records(caplog))


def test_a_fail_that_ran_but_whose_reply_was_lost_is_reported_as_the_retry_it_was(
    redis_client: redis.Redis,
    reply_cut: ReplyCut,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:

    def broken(job: Job) -> None:
        raise KeyError("sku")

    pool, direct = pool_losing_a_reply(reply_cut, fake_clock, caplog, "fail", broken)

    resend_after_backoff(fake_clock, pool, lambda: stats(pool)["failed"] == 1)
    assert reply_cut.cuts == 1
    assert [e["e"] for e in events(direct, "j0")] == ["added", "leased", "failed", "rejected"]
    assert stats(pool)["lost_leases"] == 0
    loud = [r.getMessage() for r in pool_records(caplog) if r.levelno >= logging.WARNING]
    assert loud == ["pool t: job j0 attempt 1 failed (KeyError: 'sku'); retried (delayed)"]


def test_an_ack_refused_because_the_lease_expired_is_reported_as_lost(
    topic: Store, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="actors")
    pool, gate = pool_whose_lease_expired(topic, fake_clock)
    gate.set()

    wait_until(lambda: stats(pool)["lost_leases"] == 1, "the refused ack")
    assert stats(pool)["acked"] == 0
    assert [r.getMessage() for r in caplog.records] == [
        "pool t: 1 results refused, their leases were lost"
    ]


def test_an_ack_for_a_job_redis_no_longer_has_is_not_reported_as_a_lost_lease(
    topic: Store,
    redis_client: redis.Redis,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What a Redis restarted without persistence looks like to a pool that sends its ack again.
    caplog.set_level(logging.INFO, logger="actors")
    gate = threading.Event()
    pool = start_pool(topic, fake_clock, lambda job: gate.wait())
    run(pool, leased(topic, 1))
    redis_client.flushall()
    gate.set()

    wait_until(lambda: stats(pool)["running"] == 0 and stats(pool)["flushes"] >= 1, "the ack")
    assert (stats(pool)["acked"], stats(pool)["lost_leases"]) == (0, 0)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.INFO,
            "pool t: 1 results refused for jobs Redis no longer has (removed "
            "meanwhile, or lost with Redis's data); nothing of them is left to run",
        )
    ]


def test_an_ack_for_a_job_whose_history_was_trimmed_but_which_is_still_there_is_lost(
    topic: Store,
    redis_client: redis.Redis,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Redis full: the carrier trims the audit stream hard, and the index forgets trimmed jobs.
    caplog.set_level(logging.INFO, logger="actors")
    pool, gate = pool_whose_lease_expired(topic, fake_clock)
    for key in redis_client.scan_iter("*"):
        if redis_client.type(key) == b"stream" or key.endswith(b"history"):
            redis_client.delete(key)
    assert topic.job_entries("t", "j0") == [] and topic.get("t", "j0") is not None
    gate.set()

    wait_until(lambda: stats(pool)["lost_leases"] == 1, "the refused ack")
    assert stats(pool)["gone"] == 0
    assert [r.getMessage() for r in pool_records(caplog)] == [
        "pool t: 1 results refused, their leases were lost"
    ]


def test_an_applied_ack_is_told_apart_even_when_its_id_was_reused_and_leased_meanwhile(
    redis_client: redis.Redis,
    reply_cut: ReplyCut,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool, direct = pool_losing_a_reply(reply_cut, fake_clock, caplog, "ack", lambda job: None)
    wait_until(lambda: reply_cut.cuts == 1, "the ack's reply lost")
    # Before the pool sends it again (its backoff waits on the fake clock): a new job, same id.
    direct.add(direct.new_job("t", "j0", {"n": "again"}))
    (again,) = direct.lease("t", 1, "another worker")

    resend_after_backoff(fake_clock, pool, lambda: stats(pool)["acked"] == 1)
    assert [e["e"] for e in events(direct, "j0")] == [
        "added",
        "leased",
        "acked",
        "added",
        "leased",
        "rejected",
    ]
    assert events(direct, "j0")[-1]["code"] == "-3"  # STALE_TOKEN: the new job's lease is current
    assert stats(pool)["lost_leases"] == 0
    assert not [r for r in pool_records(caplog) if r.levelno >= logging.WARNING]
    info = direct.get("t", "j0")
    assert info is not None and info.token == again.token  # the new job is untouched


def test_a_release_that_ran_but_whose_reply_was_lost_warns_without_claiming_the_jobs_held(
    redis_client: redis.Redis,
    reply_cut: ReplyCut,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At a drain the pool gives back a job it had not started; the release runs on Redis and
    its reply is lost. The warning must hold either way: the job is in fact ready again."""
    started, gate = threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        started.set()
        gate.wait()

    pool, direct = pool_behind(reply_cut, fake_clock, handler, concurrency=1)
    caplog.set_level(logging.WARNING, logger="actors")
    reply_cut.arm_script("release")
    run(pool, leased(direct, 2))  # j0 runs, j1 waits for the one slot
    # The drain must come once j0's handler has begun: before that it withdraws j0 as well.
    assert started.wait(10), "j0's handler never began"

    pool.tell(Drain())
    wait_until(lambda: reply_cut.cuts == 1, "the release's reply lost")
    gate.set()
    pool.stop()
    assert [e["e"] for e in events(direct, "j1")] == ["added", "leased", "released"]
    assert direct.get("t", "j1").state == "ready"  # type: ignore[union-attr]
    assert [r.getMessage() for r in pool_records(caplog)][-1].startswith(
        "pool t: releasing 1 jobs failed ("
    )
    assert (
        pool_records(caplog)[-1]
        .getMessage()
        .endswith("); any not released run again when their leases expire")
    )
