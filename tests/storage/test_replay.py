"""Replay folds the audit stream back into state: one job's history, every job at a chosen time,
and drift against the live state. Retention trims the stream; replay then says what is partial.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from _tamper import move_due, take_out
from _wait import wait_until

from actors.clock import FakeClock
from actors.errors import ErrorCode
from actors.lifecycle import END_STATES, LEGACY_EVENTS, LIVE_STATES, RULES, implied_before
from actors.model import Event, Model, State
from actors.replay import ANOMALIES_KEPT, ENDED_MEMORY, Drift, Replay, compare, fold, history
from actors.storage.store import Store
from actors.values import AuditRetention, TopicConfig


def busy_store(store: Store, clock: FakeClock) -> dict[str, int]:
    """Runs a few jobs through every transition; returns the clock reading after each phase."""
    store.configure_topic("t", TopicConfig(retry_ms=(1_000,), lease_ms=2_000))
    marks = {"start": clock.now_ms()}
    store.add(store.new_job("t", "a", {"n": 1}, delay_ms=500))
    store.add(store.new_job("t", "b"))
    store.add(store.new_job("t", "c", delay_ms=10_000))
    marks["added"] = clock.now_ms()
    clock.advance(500)
    store.carry()
    marks["carried"] = clock.now_ms()
    clock.advance(100)
    b, a = store.lease("t", 2)
    marks["leased"] = clock.now_ms()
    clock.advance(100)
    store.fail("t", "a", a.token, "boom")
    store.ack("t", "b", b.token)
    store.ack("t", "b", b.token)  # rejected: no state change, but an event
    marks["ended"] = clock.now_ms()
    return marks


def replayed_states(store: Store, until_ms: int | None = None) -> dict[str, str]:
    replay = fold(store.iter_audit(), until_ms)
    assert replay.anomalies == []
    return {key[1]: job.state.value for key, job in replay.jobs.items()}


def test_history_lists_one_jobs_events_in_order(store: Store, fake_clock: FakeClock) -> None:
    busy_store(store, fake_clock)
    events = history(store.iter_audit(), "t", "a")
    assert [f["e"] for _, f in events] == ["added", "ready", "leased", "failed"]
    assert [f["e"] for _, f in history(store.iter_audit(), "t", "b")] == [
        "added",
        "leased",
        "acked",
        "rejected",
    ]
    assert history(store.iter_audit(), "t", "nobody") == []


def test_an_event_after_the_job_was_acked_is_an_anomaly_not_trimmed_history(
    store: Store, fake_clock: FakeClock
) -> None:
    store.add(store.new_job("t", "a"))
    (lease,) = store.lease("t", 1)
    store.ack("t", "a", lease.token)
    entries = list(store.iter_audit())
    # A broken ack that left the job leased would be followed by an expiry:
    forged = dict(entries[-2][1], e="expired", due=str(fake_clock.now_ms()), to="delayed")
    replay = fold([*entries, ("9999999999999-0", forged)])
    assert len(replay.anomalies) == 1
    assert "after the job was acked" in replay.anomalies[0]
    assert ("t", "a") not in replay.jobs


def test_fold_until_a_time_gives_the_state_at_that_time(
    store: Store, fake_clock: FakeClock
) -> None:
    marks = busy_store(store, fake_clock)
    assert replayed_states(store, marks["start"] - 1) == {}
    assert replayed_states(store, marks["added"]) == {"a": "delayed", "b": "ready", "c": "delayed"}
    assert replayed_states(store, marks["carried"]) == {"a": "ready", "b": "ready", "c": "delayed"}
    assert replayed_states(store, marks["leased"]) == {"a": "leased", "b": "leased", "c": "delayed"}
    assert replayed_states(store, marks["ended"]) == {"a": "delayed", "c": "delayed"}
    replay = fold(store.iter_audit())
    assert replay.recently_ended == {("t", "b"): State.ACKED}
    assert replay.ended_counts == Counter({State.ACKED: 1})
    assert replay.jobs[("t", "a")].attempts_failed == 1
    assert replay.events == 9
    assert replay.last_ms == marks["ended"]


def test_compare_finds_no_drift_in_an_untouched_store(store: Store, fake_clock: FakeClock) -> None:
    busy_store(store, fake_clock)
    store.cancel("t", "c")
    replay = fold(store.iter_audit())
    assert replay.anomalies == []
    assert compare(replay, store.snapshot()) == []


def drift_after(store: Store, tamper: str) -> list[Drift]:
    """Runs busy_store's jobs, then changes Redis behind the scripts' back."""
    k = store.keys
    client = store.client
    if tamper == "zadd-due":  # a delayed job's due time moved, everywhere the scripts keep it
        move_due(client, k, "t|c", 1)
    elif tamper == "zadd-ready-job":  # a ready job also put in the delayed set
        store.add(store.new_job("t", "r"))
        # A bucket of its own, first in the set (due at 1), as the scripts would make one.
        client.zadd(k.due_bucket("t|r"), {"t|r": 1})
        client.zadd(k.delayed, {"t|r": 1})
    elif tamper == "lost-job":  # a record deleted
        client.hdel(k.jobs, "t|c")
        take_out(client, k, "t|c")
    elif tamper == "ghost":  # a member with no record pushed onto a ready list
        client.rpush(k.ready("t"), "t|ghost")
    elif tamper == "token":  # a lease token overwritten
        store.add(store.new_job("t", "l"))
        store.lease("t", 1)
        client.hset(k.tokens, "t|l", "1-1")
    else:
        raise AssertionError(tamper)
    return compare(fold(store.iter_audit()), store.snapshot())


@pytest.mark.parametrize(
    ("tamper", "job", "field"),
    [
        ("zadd-due", "c", "due_ms"),
        ("zadd-ready-job", "r", "structure"),
        ("lost-job", "c", "exists"),
        ("ghost", "ghost", "structure"),
        ("token", "l", "token"),
    ],
)
def test_compare_reports_drift_when_redis_is_changed_behind_the_scripts(
    store: Store, fake_clock: FakeClock, tamper: str, job: str, field: str
) -> None:
    busy_store(store, fake_clock)
    drift = drift_after(store, tamper)
    assert [(d.id, d.field) for d in drift] == [(job, field)], drift
    assert job in str(drift[0])


def trimmed_store(
    client: redis.Redis, clock: FakeClock, retention: AuditRetention
) -> tuple[Store, str]:
    """Adds a job, buries its first events under 300 others, then leases and fails it.

    Returns the store and the token of the job's current lease.
    """
    store = Store(client, "trim", clock, retention=retention)
    store.configure_topic("t", TopicConfig(retry_ms=(0, 0), lease_ms=1_000))
    store.add(store.new_job("t", "old"))
    store.add(store.new_job("t", "doomed", delay_ms=60_000))
    store.add(store.new_job("t", "swapped", delay_ms=60_000))
    store.add(store.new_job("t", "extended", delay_ms=60_000))
    for n in range(300):
        store.add(store.new_job("filler", f"f{n}"))
        clock.advance(1)
    (lease,) = store.lease("t", 1)
    assert lease.id == "old"
    assert store.fail("t", "old", lease.token, "boom") == "ready"
    (lease,) = store.lease("t", 1)
    store.cancel("t", "doomed")
    store.add(store.new_job("t", "swapped", delay_ms=5), replace=True)
    return store, lease.token


def test_replay_after_maxlen_trimming_is_partial_but_agrees_with_the_live_state(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store, token = trimmed_store(redis_client, fake_clock, AuditRetention("MAXLEN", maxlen=50))
    length = redis_client.xlen(store.keys.audit)
    # Approximate: whole nodes of 100 entries go, so somewhat more than maxlen stays.
    assert 50 <= length < 300
    replay = fold(store.iter_audit())
    assert replay.anomalies == []
    old = replay.jobs[("t", "old")]
    assert old.partial
    assert (old.state, old.token) == (State.LEASED, token)
    assert ("t", "doomed") not in replay.jobs
    assert replay.recently_ended[("t", "doomed")] == State.CANCELLED
    assert not replay.jobs[("t", "swapped")].partial  # a replace starts the job afresh
    assert compare(replay, store.snapshot()) == []


def test_a_partial_job_whose_first_visible_event_is_an_extend_is_not_drift(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    store = Store(redis_client, "trim", fake_clock, retention=AuditRetention("MAXLEN", maxlen=1))
    store.add(store.new_job("t", "j"))
    (lease,) = store.lease("t", 1, "w")
    for n in range(250):
        store.add(store.new_job("filler", f"f{n}", delay_ms=1_000))
    store.extend_many([("t", "j", lease.token, 5_000)])
    store.cancel("t", "j")
    replay = fold(store.iter_audit())
    assert replay.anomalies == []
    assert replay.jobs[("t", "j")].partial
    assert compare(replay, store.snapshot()) == []
    assert store.ack("t", "j", lease.token) is ErrorCode.OK
    assert compare(fold(store.iter_audit()), store.snapshot()) == []


def test_minid_retention_drops_old_entries_and_keeps_recent_ones(
    redis_client: redis.Redis,
) -> None:
    seconds, micros = redis_client.time()
    clock = FakeClock(seconds * 1_000 + micros // 1_000)
    store = Store(redis_client, "m", clock, retention=AuditRetention("MINID", retention_ms=200))
    store.add_many([store.new_job("old", f"o{n}", delay_ms=60_000) for n in range(250)])
    # The stream's ids come from the server clock; wait (with a deadline) until it has moved on.

    def server_ms() -> int:
        seconds, micros = redis_client.time()
        return int(seconds) * 1_000 + int(micros) // 1_000

    wait_until(lambda: server_ms() > clock.now_ms() + 400, what="the server clock to move on")
    clock.advance(400)
    store.add(store.new_job("new", "n"))
    entries = store.audit_entries()
    topics = {f["t"] for _, f in entries}
    assert "new" in topics  # the entry just written always survives
    # Whole nodes of 100 entries below the threshold go; the last partial node may stay.
    assert len(entries) <= 51, len(entries)


def test_minid_retention_never_trims_the_entry_just_written_when_the_clock_runs_ahead(
    redis_client: redis.Redis,
) -> None:
    # A caller clock far ahead of the server (a skewed host, a fake clock) must not empty the log.
    clock = FakeClock(4_000_000_000_000)
    store = Store(redis_client, "m", clock, retention=AuditRetention("MINID", retention_ms=1_000))
    for n in range(250):
        store.add(store.new_job("t", f"j{n}", delay_ms=1_000))
    assert redis_client.xlen(store.keys.audit) == 250
    replay = fold(store.iter_audit())
    assert compare(replay, store.snapshot()) == []


def test_retention_none_keeps_everything(redis_client: redis.Redis, fake_clock: FakeClock) -> None:
    store = Store(redis_client, "n", fake_clock, retention=AuditRetention("NONE"))
    for n in range(300):
        store.add(store.new_job("t", f"j{n}"))
    assert redis_client.xlen(store.keys.audit) == 300


# -- replay reads the lifecycle table --------------------------------------------------------

T0 = 1_700_000_000_000


def entry(event: Event, n: int = 1, /, **extra: str) -> tuple[str, dict[str, str]]:
    """An audit entry of job t/j with every field an event may need."""
    fields = {"e": event.value, "t": "t", "i": "j", "a": "1", "ms": str(T0 + n)}
    fields.update(due=str(T0), tok="tok-1", dl=str(T0 + 500), lost="0")
    return (f"{T0 + n}-0", fields | extra)


def first_seen(event: Event, before: State) -> tuple[str, dict[str, str]]:
    """The first entry replay sees of a job whose history was trimmed: ``event`` from ``before``,
    naming ``before`` where the table cannot tell it, and its target where it has several."""
    extra: dict[str, str] = {}
    if implied_before(event) is None:
        extra["was" if event is Event.REPLACED else "from"] = before.value
    targets = RULES[(event, before)].targets
    if len(targets) > 1:
        extra["to"] = min(targets).value
    return entry(event, **extra)


@pytest.mark.parametrize(("event", "before"), list(RULES), ids=lambda x: str(x))
def test_replay_recognises_every_row_of_the_table(event: Event, before: State) -> None:
    replay = fold([first_seen(event, before)])
    assert replay.anomalies == []
    assert replay.transitions == Counter({(event, before): 1})
    after = min(RULES[(event, before)].targets)
    if after in END_STATES:
        assert replay.recently_ended == {("t", "j"): after} and replay.jobs == {}
        assert replay.ended_counts == Counter({after: 1})
    else:
        job = replay.jobs[("t", "j")]
        assert job.state is after
        assert job.partial is (event is not Event.ADDED and event is not Event.REPLACED)


# A first entry that leaves job t/j in each live state.
INTO: dict[State, tuple[str, dict[str, str]]] = {
    State.DELAYED: entry(Event.ADDED, to="delayed"),
    State.READY: entry(Event.ADDED, to="ready"),
    State.LEASED: entry(Event.LEASED),
    State.DEAD: entry(Event.DEAD),
}


@pytest.mark.parametrize(
    ("event", "state"),
    [
        (event, state)
        for event in Event
        for state in sorted(LIVE_STATES)
        if event is not Event.REJECTED and (event, state) not in RULES
    ],
    ids=lambda x: str(x),
)
def test_an_event_the_table_does_not_allow_is_an_anomaly_and_changes_nothing(
    event: Event, state: State
) -> None:
    replay = fold([INTO[state]])
    assert replay.jobs[("t", "j")].state is state
    before = replay.jobs[("t", "j")]
    replay.apply(*entry(event, 2, to="ready", **{"from": state.value, "was": state.value}))
    assert len(replay.anomalies) == 1
    assert f"{event} is not legal from {state}" in replay.anomalies[0]
    assert replay.jobs == {("t", "j"): before} and sum(replay.transitions.values()) == 1


def test_an_entry_that_does_not_say_where_it_went_is_an_anomaly() -> None:
    replay = fold([entry(Event.ADDED, to="ready"), entry(Event.LEASED, 2)])
    replay.apply(*entry(Event.FAILED, 3))  # delayed or ready: only "to" can say
    replay.apply(*entry(Event.CANCELLED, 4, i="other"))  # an unseen job: only "from" can say
    assert len(replay.anomalies) == 2
    assert "which one" in replay.anomalies[0]
    assert "does not say the state it left" in replay.anomalies[1]
    assert replay.jobs[("t", "j")].state is State.LEASED


def test_replay_and_the_model_take_every_row_of_the_table_alike(
    store: Store, fake_clock: FakeClock
) -> None:
    """The real scripts take jobs along every row of the table; the model, fed the same calls,
    and the replay of the audit stream count the same rows, and agree with Redis."""
    clock = fake_clock
    store.configure_topic("t", TopicConfig(retry_ms=(1_000,), lease_ms=2_000))
    store.configure_topic("q", TopicConfig(retry_ms=(0,), lease_ms=2_000, lost_max=1))
    model = Model(
        topic_retry_ms={"t": (1_000,), "q": (0,)},
        topic_lease_ms={"t": 2_000, "q": 2_000},
        topic_lost_max={"q": 1},
    )

    calls = itertools.count()  # a body of its own per add: the same record twice is a resend

    def add(job_id: str, delay_ms: int = 0, replace: bool = False, topic: str = "t") -> None:
        job = store.new_job(
            topic,
            job_id,
            {"call": next(calls)},
            delay_ms=delay_ms,
            retry_ms=[0] if topic == "d" else None,
        )
        was = store.add(job, replace=replace)
        key = (topic, job_id)
        assert was == model.add(
            key, job.due_ms, clock.now_ms(), job.retry_ms, job.lease_ms, replace
        )

    def lease(limit: int, topic: str = "t") -> dict[str, str]:
        leases = store.lease(topic, limit)
        tokens = [lease.token for lease in leases]
        assert [lease.key for lease in leases] == model.lease(topic, clock.now_ms(), limit, tokens)
        return {lease.id: lease.token for lease in leases}

    def fail(job_id: str, token: str, topic: str = "t") -> None:
        state = model.fail((topic, job_id), token, clock.now_ms())
        assert state is not None
        assert store.fail(topic, job_id, token, "boom") == state.value

    def carry() -> None:
        assert store.carry()[0] == len(model.carry(clock.now_ms(), 100))

    def dead(job_id: str) -> None:
        """A job of topic d (schedule [0]: two attempts) whose attempts both failed."""
        add(job_id, topic="d")
        for _ in range(2):
            fail(job_id, lease(1, "d")[job_id], "d")
        assert model.state_of(("d", job_id)) is State.DEAD

    def cancel(job_id: str, topic: str = "t") -> None:
        assert store.cancel(topic, job_id) == model.cancel((topic, job_id))

    add("a", 500)
    add("b")
    add("a", 500, replace=True)
    add("b", replace=True)
    clock.advance(500)
    carry()
    tokens = lease(2)
    add("b", replace=True)  # revokes b's lease
    assert store.extend_many([("t", "a", tokens["a"], 300)]) == [clock.now_ms() + 300]
    assert model.extend(("t", "a"), tokens["a"], clock.now_ms(), 300)
    fail("a", tokens["a"])
    tokens = lease(1)
    assert store.release_many([("t", "b", tokens["b"])]) == [0]
    assert model.release(("t", "b"), tokens["b"], clock.now_ms())
    tokens = lease(1)
    cancel("b")
    assert store.ack("t", "b", tokens["b"]) is ErrorCode.OK
    assert model.ack(("t", "b"), tokens["b"])
    add("c")
    lease(1)
    clock.advance(2_000)
    assert store.expire()[0] == len(model.expire(clock.now_ms(), 100)) == 1
    clock.advance(1_000)
    carry()
    tokens = lease(2)  # a, not c: a suspect behind another job waits for a lease of its own
    assert list(tokens) == ["a"]
    fail("a", tokens["a"])  # its second attempt: dead
    tokens = lease(2)  # c, alone
    cancel("c")
    fail("c", tokens["c"])  # asked to cancel: cancelled, not retried
    add("q", topic="q")
    for _ in range(2):  # lost beside others perhaps, then as a suspect: quarantined
        lease(1, "q")
        clock.advance(2_000)
        assert store.expire()[0] == len(model.expire(clock.now_ms(), 100)) == 1
    assert model.state_of(("q", "q")) is State.DEAD
    assert store.requeue_dead([("t", "a")]) == 1 and model.requeue(("t", "a"), clock.now_ms())
    add("e", 60_000)
    cancel("e")  # delayed
    add("e")
    cancel("e")  # ready
    dead("x")
    cancel("x", "d")
    dead("y")
    add("y", 60_000, replace=True, topic="d")
    dead("z")
    assert store.purge_dead([("d", "z")]) == 1 and model.purge(("d", "z"))

    replay = fold(store.iter_audit())
    assert replay.anomalies == []
    assert set(model.transitions) == {pair for pair in RULES if pair[0] not in LEGACY_EVENTS}
    assert replay.transitions == model.transitions
    snapshot = store.snapshot()
    assert compare(replay, snapshot) == []
    assert {key: info.state for key, info in snapshot.jobs.items()} == {
        key: job.state for key, job in model.jobs.items()
    }
    # Far below the memory's cap, it holds every job that ended and was not added again; the
    # counts count every end: b acked; c, e twice, x and z (purged) cancelled.
    assert replay.recently_ended == model.done
    assert replay.ended_counts == Counter({State.ACKED: 1, State.CANCELLED: 5})


# -- memory: bounded by the live jobs, not by the stream ------------------------------------


def ended_jobs(first: int, count: int) -> Iterator[tuple[str, dict[str, str]]]:
    """Entries of jobs t/j<first>... that end one after the other: even ones added, leased and
    acked, odd ones added and cancelled."""
    for n in range(first, first + count):
        job = {"i": f"j{n}", "ms": str(T0 + n), "due": str(T0 + n)}
        yield entry(Event.ADDED, n, to="ready", **job)
        if n % 2 == 0:
            yield entry(Event.LEASED, n, **job)
            yield entry(Event.ACKED, n, **job)
        else:
            yield entry(Event.CANCELLED, n, **job)


def test_a_long_stream_of_ended_jobs_is_counted_and_only_the_newest_are_remembered() -> None:
    assert Replay().ended_memory == ENDED_MEMORY  # what fold uses; a smaller cap keeps this fast
    replay = Replay(ended_memory=1_000)
    jobs = 10_000
    for fields in [*ended_jobs(0, jobs), entry(Event.ADDED, jobs, to="delayed", i="live")]:
        replay.apply(*fields)
        assert len(replay.recently_ended) <= 1_000  # never one key per ended job
    assert replay.anomalies == []
    assert replay.ended_counts == Counter({State.ACKED: jobs // 2, State.CANCELLED: jobs // 2})
    assert len(replay.recently_ended) == 1_000
    assert next(iter(replay.recently_ended)) == ("t", "j9000")  # the oldest went first
    assert replay.recently_ended[("t", f"j{jobs - 1}")] is State.CANCELLED
    assert list(replay.jobs) == [("t", "live")]


def test_an_event_after_an_end_is_an_anomaly_while_the_end_is_remembered() -> None:
    replay = Replay(ended_memory=3)
    for fields in ended_jobs(0, 6):
        replay.apply(*fields)
    assert list(replay.recently_ended) == [("t", "j3"), ("t", "j4"), ("t", "j5")]
    # j4 was acked three ends ago: remembered, so an expiry after it cannot be trimmed history.
    replay.apply(*entry(Event.EXPIRED, 10, i="j4", to="delayed"))
    assert replay.anomaly_count == 1 and "after the job was acked" in replay.anomalies[0]
    assert ("t", "j4") not in replay.jobs
    # j0's end is out of the window: the same entry reads as a job whose history was trimmed.
    replay.apply(*entry(Event.EXPIRED, 11, i="j0", to="delayed"))
    assert replay.anomaly_count == 1 and replay.jobs[("t", "j0")].partial


def test_anomaly_texts_are_kept_up_to_a_cap_and_all_counted() -> None:
    # A cancel of a job replay never saw, without "from": replay cannot tell its state before.
    blind = [entry(Event.CANCELLED, n, i=f"x{n}") for n in range(ANOMALIES_KEPT + 10)]
    replay = fold(blind)
    assert replay.anomaly_count == ANOMALIES_KEPT + 10
    assert len(replay.anomalies) == ANOMALIES_KEPT
    assert replay.anomalies[0].startswith(f"{T0}-0: cancelled does not say")
    merged = Replay()
    merged.add_up(replay)
    merged.add_up(fold(blind[:5]))  # another shard's: counted, its texts past the cap dropped
    assert merged.anomaly_count == ANOMALIES_KEPT + 15
    assert len(merged.anomalies) == ANOMALIES_KEPT
