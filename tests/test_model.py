"""The pure lifecycle model: its transition table, and that illegal steps raise and change nothing.

No Redis here: the model is the oracle the stateful test holds the scripts to, so it is tested on
its own first.
"""

from __future__ import annotations

import copy
import itertools

import pytest

from actors.model import (
    LIVE_STATES,
    TRANSITIONS,
    Event,
    IllegalTransition,
    Model,
    State,
    check,
    next_retry,
    state_diagram,
)

T0 = 1_000_000
KEY = ("t", "j")


def model() -> Model:
    return Model(topic_retry_ms={"t": (100, 500)}, topic_lease_ms={"t": 1_000})


def in_state(state: State) -> Model:
    """A model holding job ("t", "j") in ``state`` at time T0."""
    m = model()
    if state is State.NEW:
        return m
    m.add(KEY, T0 + (10 if state is State.DELAYED else 0), T0)
    if state in (State.LEASED, State.DEAD):
        m.lease("t", T0, 1, ["tok-1"])
    if state is State.DEAD:
        m.jobs[KEY].attempts_failed = 2
        assert m.fail(KEY, "tok-1", T0) is State.DEAD
    assert m.state_of(KEY) is state
    return m


# -- the table ------------------------------------------------------------------------------


def test_every_event_but_rejected_has_a_transition() -> None:
    events = {event for event, _ in TRANSITIONS}
    assert events == set(Event) - {Event.REJECTED}


def test_every_live_state_has_a_way_out_and_the_end_states_have_none() -> None:
    sources = {state for _, state in TRANSITIONS}
    assert sources >= LIVE_STATES
    assert State.ACKED not in sources and State.CANCELLED not in sources
    targets = set().union(*TRANSITIONS.values())
    assert LIVE_STATES | {State.ACKED, State.CANCELLED} == targets


@pytest.mark.parametrize(("event", "state"), list(itertools.product(Event, State)))
def test_check_allows_exactly_the_pairs_in_the_table(event: Event, state: State) -> None:
    if (event, state) in TRANSITIONS:
        check(event, state)
        for after in State:
            if after in TRANSITIONS[(event, state)]:
                check(event, state, after)
            else:
                with pytest.raises(IllegalTransition):
                    check(event, state, after)
    else:
        with pytest.raises(IllegalTransition) as caught:
            check(event, state, key=KEY)
        assert (caught.value.event, caught.value.state) == (event, state)
        assert str(event) in str(caught.value) and str(KEY) in str(caught.value)


def test_the_state_diagram_has_one_line_per_edge_of_the_table() -> None:
    lines = state_diagram().splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert len(lines) - 1 == sum(len(targets) for targets in TRANSITIONS.values())
    assert "    [*] --> delayed: added" in lines
    assert "    leased --> [*]: acked (acked)" in lines
    assert "    dead --> ready: requeued" in lines


def test_next_retry_follows_the_schedule_then_gives_up() -> None:
    assert next_retry(0, (100, 500), T0, None) == T0 + 100
    assert next_retry(1, (100, 500), T0, None) == T0 + 500
    assert next_retry(2, (100, 500), T0, None) is None
    assert next_retry(0, (100, 500), T0, 7) == T0 + 7
    assert next_retry(2, (100, 500), T0, 7) is None  # an override never revives a job


# -- illegal steps raise or are refused, and change nothing -----------------------------------


@pytest.mark.parametrize("state", [State.DELAYED, State.READY, State.LEASED, State.DEAD])
def test_adding_an_existing_job_raises_and_changes_nothing(state: State) -> None:
    m = in_state(state)
    before = copy.deepcopy(m)
    with pytest.raises(IllegalTransition) as caught:
        m.add(KEY, T0, T0)
    assert caught.value.event is Event.ADDED and caught.value.state is state
    assert m == before


@pytest.mark.parametrize("state", [State.NEW, State.DELAYED, State.READY, State.DEAD])
def test_lease_operations_without_a_lease_are_refused_and_change_nothing(state: State) -> None:
    m = in_state(state)
    before = copy.deepcopy(m)
    assert m.ack(KEY, "tok-1") is False
    assert m.fail(KEY, "tok-1", T0) is None
    assert m.extend(KEY, "tok-1", T0, 500) is False
    assert m.release(KEY, "tok-1", T0) is False
    assert m == before


def test_a_wrong_token_is_refused_and_changes_nothing() -> None:
    m = in_state(State.LEASED)
    before = copy.deepcopy(m)
    assert m.ack(KEY, "tok-2") is False
    assert m.fail(KEY, "tok-2", T0) is None
    assert m.extend(KEY, "tok-2", T0, 500) is False
    assert m.release(KEY, "tok-2", T0) is False
    assert m == before


@pytest.mark.parametrize("state", [State.NEW, State.DELAYED, State.READY, State.LEASED])
def test_requeue_and_purge_of_a_job_that_is_not_dead_change_nothing(state: State) -> None:
    m = in_state(state)
    before = copy.deepcopy(m)
    assert m.requeue(KEY, T0) is False
    assert m.purge(KEY) is False
    assert m == before


def test_cancel_of_a_missing_job_changes_nothing() -> None:
    m = in_state(State.NEW)
    assert m.cancel(KEY) == "missing"
    assert m == model()


# -- what each legal step does --------------------------------------------------------------


def test_add_places_by_due_time_and_replace_resets_the_job() -> None:
    m = model()
    assert m.add(("t", "later"), T0 + 1, T0) is State.NEW
    assert m.add(("t", "now"), T0, T0) is State.NEW
    assert m.state_of(("t", "later")) is State.DELAYED
    assert list(m.ready["t"]) == [("t", "now")]
    m.lease("t", T0, 1, ["tok"])
    m.jobs[("t", "now")].attempts_failed = 1
    assert m.add(("t", "now"), T0 + 50, T0, replace=True) is State.LEASED
    job = m.jobs[("t", "now")]
    assert (job.state, job.attempts_failed, job.token, job.due_ms) == (
        State.DELAYED,
        0,
        None,
        T0 + 50,
    )
    assert m.ack(("t", "now"), "tok") is False  # the old lease was revoked


def test_carry_moves_due_jobs_in_due_then_member_order_up_to_the_limit() -> None:
    m = model()
    for name, due in [("c", 3), ("b2", 2), ("b1", 2), ("a", 1), ("z", 9)]:
        m.add(("t", name), T0 + due, T0)
    assert m.carry(T0 + 1, 10) == [("t", "a")]
    assert m.carry(T0 + 5, 2) == [("t", "b1"), ("t", "b2")]
    assert m.carry(T0 + 5, 10) == [("t", "c")]
    assert list(m.ready["t"]) == [("t", "a"), ("t", "b1"), ("t", "b2"), ("t", "c")]
    assert m.state_of(("t", "z")) is State.DELAYED


def test_lease_takes_the_front_of_the_list_and_sets_the_deadline() -> None:
    m = model()
    m.add(("t", "a"), T0, T0, lease_ms=300)
    m.add(("t", "b"), T0, T0)
    m.add(("u", "c"), T0, T0)
    assert m.lease("t", T0, 5, ["t1", "t2", "t3"]) == [("t", "a"), ("t", "b")]
    assert m.jobs[("t", "a")].deadline_ms == T0 + 300  # the job's own lease
    assert m.jobs[("t", "b")].deadline_ms == T0 + 1_000  # the topic's
    assert m.lease("u", T0, 5, ["t4"]) == [("u", "c")]
    assert m.jobs[("u", "c")].deadline_ms == T0 + 30_000  # the built-in default


def test_fail_follows_the_schedule_until_the_job_is_dead() -> None:
    m = in_state(State.LEASED)
    assert m.fail(KEY, "tok-1", T0) is State.DELAYED
    assert (m.jobs[KEY].due_ms, m.jobs[KEY].attempts_failed) == (T0 + 100, 1)
    m.carry(T0 + 100, 10)
    m.lease("t", T0 + 100, 1, ["tok-2"])
    assert m.fail(KEY, "tok-2", T0 + 100, override_ms=0) is State.READY
    m.lease("t", T0 + 100, 1, ["tok-3"])
    assert m.fail(KEY, "tok-3", T0 + 100) is State.DEAD
    assert m.jobs[KEY].attempts_failed == 3  # len(schedule) + 1 attempts


def test_expire_ends_overdue_leases_as_failed_attempts() -> None:
    m = in_state(State.LEASED)
    assert m.expire(T0 + 999, 10) == []
    assert m.expire(T0 + 1_000, 10) == [KEY]
    assert (m.state_of(KEY), m.jobs[KEY].attempts_failed) == (State.DELAYED, 1)


def test_release_puts_the_job_first_without_counting_an_attempt() -> None:
    m = in_state(State.LEASED)
    m.add(("t", "other"), T0, T0)
    assert m.release(KEY, "tok-1", T0) is True
    assert list(m.ready["t"]) == [KEY, ("t", "other")]
    assert m.jobs[KEY].attempts_failed == 0


@pytest.mark.parametrize("ending", ["ack", "fail", "expire", "release"])
def test_a_cancelled_leased_job_is_removed_by_whatever_ends_its_lease(ending: str) -> None:
    m = in_state(State.LEASED)
    assert m.cancel(KEY) == "requested"
    assert m.cancel(KEY) == "requested"
    if ending == "ack":
        assert m.ack(KEY, "tok-1")
        assert m.state_of(KEY) is State.ACKED
        return
    if ending == "fail":
        assert m.fail(KEY, "tok-1", T0) is State.CANCELLED
    elif ending == "expire":
        assert m.expire(T0 + 1_000, 10) == [KEY]
    else:
        assert m.release(KEY, "tok-1", T0)
    assert m.state_of(KEY) is State.CANCELLED
    assert KEY not in m.jobs and not m.ready.get("t")


@pytest.mark.parametrize("state", [State.DELAYED, State.READY, State.DEAD])
def test_cancel_removes_a_job_that_is_not_leased(state: State) -> None:
    m = in_state(state)
    assert m.cancel(KEY) == "removed"
    assert m.state_of(KEY) is State.CANCELLED
    assert not m.ready.get("t")


def test_requeue_and_purge_of_a_dead_job() -> None:
    m = in_state(State.DEAD)
    assert m.requeue(KEY, T0 + 5) is True
    job = m.jobs[KEY]
    assert (job.state, job.attempts_failed, job.due_ms) == (State.READY, 0, T0 + 5)
    m = in_state(State.DEAD)
    assert m.purge(KEY) is True
    assert m.state_of(KEY) is State.CANCELLED
    m.add(KEY, T0, T0)  # a purged (topic, id) may be added again
    assert m.state_of(KEY) is State.READY
