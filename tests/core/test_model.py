"""The pure lifecycle model: its transition table, and that illegal steps raise and change nothing.

No Redis here: the model is the oracle the stateful test holds the scripts to, so it is tested on
its own first.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from actors.lifecycle import (
    END_STATES,
    LEGACY_EVENTS,
    RULES,
    Effect,
    Facts,
    implied_before,
    sources,
    starts_record,
    step,
    target,
)
from actors.model import (
    LIVE_STATES,
    TRANSITIONS,
    Event,
    IllegalTransition,
    Model,
    State,
    check,
    effects_table,
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


def test_the_effects_table_has_one_line_per_event_and_rule() -> None:
    lines = effects_table().splitlines()
    assert len(lines) - 2 == len({(event, rule) for (event, _), rule in RULES.items()})
    assert "| `released` | leased | ready | ends lease, ready list front |" in lines
    assert "| `cancelled` | delayed, ready or dead | cancelled | - |" in lines


def test_the_transitions_are_the_rules_without_their_effects() -> None:
    assert {pair: rule.targets for pair, rule in RULES.items()} == TRANSITIONS


def test_target_is_the_only_one_or_chosen_by_the_due_time() -> None:
    assert target(Event.LEASED, State.READY) is State.LEASED
    assert target(Event.FAILED, State.LEASED, due_ms=T0, now_ms=T0) is State.READY
    assert target(Event.FAILED, State.LEASED, due_ms=T0 + 1, now_ms=T0) is State.DELAYED
    with pytest.raises(ValueError, match="which one"):
        target(Event.FAILED, State.LEASED)
    with pytest.raises(IllegalTransition):
        target(Event.FAILED, State.READY, due_ms=T0, now_ms=T0)


def test_the_state_implied_before_an_event_is_its_only_source() -> None:
    assert implied_before(Event.ADDED) is State.NEW
    assert implied_before(Event.READY) is State.DELAYED
    assert implied_before(Event.LEASED) is State.READY
    assert implied_before(Event.PURGED) is State.DEAD
    assert implied_before(Event.EXTENDED) is State.LEASED
    assert sources(Event.CANCELLED) == LIVE_STATES
    assert implied_before(Event.CANCELLED) is None  # its entry names the state it left
    assert implied_before(Event.REPLACED) is None
    assert implied_before(Event.REJECTED) is None
    assert {e for e in Event if starts_record(e)} == {Event.ADDED, Event.REPLACED}


@dataclass
class _Record:
    state: State
    due_ms: int = T0
    attempts_failed: int = 2
    token: str | None = "tok-1"
    deadline_ms: int | None = T0 + 100
    cancel_requested: bool = True
    lost: int = 1
    suspect: bool = True


@pytest.mark.parametrize(("event", "before"), list(RULES))
def test_step_applies_exactly_the_effects_of_the_row(event: Event, before: State) -> None:
    rule = RULES[(event, before)]
    after = min(rule.targets)
    record = _Record(before)
    facts = Facts(due_ms=T0 + 7, token="tok-2", deadline_ms=T0 + 900, lost=5)
    assert step(record, event, after, facts) is rule
    lease_set = {Effect.STARTS_LEASE, Effect.MOVES_DEADLINE} & rule.effects
    expected = _Record(
        after,
        due_ms=T0 + 7 if Effect.SETS_DUE in rule.effects else T0,
        attempts_failed=(
            0
            if Effect.RESETS_ATTEMPTS in rule.effects
            else 3
            if Effect.COUNTS_ATTEMPT in rule.effects
            else 2
        ),
        token="tok-2" if lease_set else None if Effect.ENDS_LEASE in rule.effects else "tok-1",
        deadline_ms=(
            T0 + 900 if lease_set else None if Effect.ENDS_LEASE in rule.effects else T0 + 100
        ),
        cancel_requested=Effect.CLEARS_CANCEL not in rule.effects,
        lost=(
            0
            if Effect.RESETS_LOSSES in rule.effects
            else 5
            if Effect.COUNTS_LOSS in rule.effects
            else 1
        ),
        suspect=not rule.effects & {Effect.RESETS_LOSSES, Effect.CLEARS_SUSPECT},
    )
    assert record == expected


def test_step_raises_before_changing_anything() -> None:
    record = _Record(State.LEASED)
    with pytest.raises(IllegalTransition):
        step(record, Event.LEASED, State.LEASED, Facts(token="x", deadline_ms=1))
    with pytest.raises(IllegalTransition):
        step(record, Event.FAILED, State.DEAD, Facts(due_ms=T0))
    with pytest.raises(ValueError, match="due_ms"):
        step(record, Event.FAILED, State.READY)
    with pytest.raises(ValueError, match="token"):
        step(record, Event.EXTENDED, State.LEASED, Facts(deadline_ms=T0))
    with pytest.raises(ValueError, match="lost is missing"):
        step(record, Event.LOST, State.READY, Facts(due_ms=T0))
    assert record == _Record(State.LEASED)


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


# -- every row of the table is a Model method's, and the Model asks the table ----------------


def leased_on_its_last_attempt() -> Model:
    m = in_state(State.LEASED)
    m.jobs[KEY].attempts_failed = 2
    return m


def leased_suspect_on_its_last_loss() -> Model:
    """Job KEY leased as a suspect with lost_max - 1 losses held against it."""
    m = in_state(State.LEASED)
    m.add(("t", "k"), T0, T0)
    assert m.expire(T0 + 1_000, 10) == [KEY]  # lost: a suspect from now on
    m.jobs[KEY].lost = 2
    assert m.carry(T0 + 1_100, 10) == [KEY]  # due after the schedule's first delay
    assert m.lease("t", T0 + 1_100, 2, ["tok-2", "tok-3"]) == [("t", "k")]  # not behind one
    assert m.ack(("t", "k"), "tok-2")
    assert m.lease("t", T0 + 1_100, 2, ["tok-4"], consumer="c") == [KEY]  # first, and alone
    return m


def leased_and_asked_to_cancel() -> Model:
    m = in_state(State.LEASED)
    assert m.cancel(KEY) == "requested"
    return m


def _fail(m: Model) -> object:
    return m.fail(KEY, "tok-1", T0)


def _cancel(m: Model) -> object:
    return m.cancel(KEY)


def _replace(m: Model) -> object:
    return m.add(KEY, T0, T0, replace=True)


def _in(state: State) -> Callable[[], Model]:
    return lambda: in_state(state)


# (event, state before) -> (a model holding job KEY in that state, the Model call that takes
# the job along that row).
ROW_CALLS: dict[tuple[Event, State], tuple[Callable[[], Model], Callable[[Model], object]]] = {
    (Event.ADDED, State.NEW): (_in(State.NEW), lambda m: m.add(KEY, T0, T0)),
    **{(Event.REPLACED, s): (_in(s), _replace) for s in sorted(LIVE_STATES, key=str)},
    (Event.READY, State.DELAYED): (_in(State.DELAYED), lambda m: m.carry(T0 + 10, 10)),
    (Event.LEASED, State.READY): (_in(State.READY), lambda m: m.lease("t", T0, 1, ["tok-2"])),
    (Event.ACKED, State.LEASED): (_in(State.LEASED), lambda m: m.ack(KEY, "tok-1")),
    (Event.FAILED, State.LEASED): (_in(State.LEASED), _fail),
    (Event.LOST, State.LEASED): (_in(State.LEASED), lambda m: m.expire(T0 + 1_000, 10)),
    (Event.QUARANTINED, State.LEASED): (
        leased_suspect_on_its_last_loss,
        lambda m: m.expire(T0 + 3_000, 10),
    ),
    (Event.DEAD, State.LEASED): (leased_on_its_last_attempt, _fail),
    (Event.EXTENDED, State.LEASED): (_in(State.LEASED), lambda m: m.extend(KEY, "tok-1", T0, 5)),
    (Event.RELEASED, State.LEASED): (_in(State.LEASED), lambda m: m.release(KEY, "tok-1", T0)),
    (Event.CANCEL_REQUESTED, State.LEASED): (_in(State.LEASED), _cancel),
    **{(Event.CANCELLED, s): (_in(s), _cancel) for s in (State.DELAYED, State.READY, State.DEAD)},
    (Event.CANCELLED, State.LEASED): (
        leased_and_asked_to_cancel,
        lambda m: m.release(KEY, "tok-1", T0),
    ),
    (Event.REQUEUED, State.DEAD): (_in(State.DEAD), lambda m: m.requeue(KEY, T0)),
    (Event.PURGED, State.DEAD): (_in(State.DEAD), lambda m: m.purge(KEY)),
}


def test_every_row_of_the_table_is_taken_by_a_model_method() -> None:
    assert set(ROW_CALLS) == {pair for pair in RULES if pair[0] not in LEGACY_EVENTS}


@pytest.mark.parametrize("row", list(ROW_CALLS), ids=lambda row: f"{row[0]}-from-{row[1]}")
def test_the_model_method_applies_that_row_once(row: tuple[Event, State]) -> None:
    make, call = ROW_CALLS[row]
    m = make()
    counted = Counter(m.transitions)
    call(m)
    assert m.transitions - counted == Counter({row: 1})
    after = m.state_of(KEY)
    assert after in RULES[row].targets
    assert (KEY in m.jobs) == (after not in END_STATES)


@pytest.mark.parametrize("row", list(ROW_CALLS), ids=lambda row: f"{row[0]}-from-{row[1]}")
def test_without_its_row_the_model_method_raises_and_changes_nothing(
    row: tuple[Event, State],
) -> None:
    make, call = ROW_CALLS[row]
    m = make()
    m.table = {pair: rule for pair, rule in RULES.items() if pair != row}
    before = copy.deepcopy(m)
    with pytest.raises(IllegalTransition) as caught:
        call(m)
    assert (caught.value.event, caught.value.state) == row
    assert m == before


def test_a_batch_with_one_illegal_move_changes_nothing() -> None:
    m = model()
    m.add(("t", "a"), T0, T0)
    m.add(("t", "b"), T0, T0)
    m.lease("t", T0, 2, ["tok-a", "tok-b"])
    m.cancel(("t", "b"))  # b's expiry is a cancel, a's a retry
    m.table = {
        pair: rule for pair, rule in RULES.items() if pair != (Event.CANCELLED, State.LEASED)
    }
    before = copy.deepcopy(m)
    with pytest.raises(IllegalTransition):
        m.expire(T0 + 1_000, 10)
    assert m == before


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


def test_expire_ends_overdue_leases_as_lost_not_failed() -> None:
    m = in_state(State.LEASED)
    m.add(("t", "k"), T0, T0)
    m.lease("t", T0, 1, ["tok-2"])
    assert m.expire(T0 + 999, 10) == []
    assert m.expire(T0 + 1_000, 10) == [KEY, ("t", "k")]
    job, other = m.jobs[KEY], m.jobs[("t", "k")]
    assert (job.state, job.attempts_failed, job.lost, job.suspect) == (State.DELAYED, 0, 0, True)
    # The schedule's delay after the running attempt, and the second of the sweep 100 ms later.
    assert (job.due_ms, other.due_ms) == (T0 + 1_000 + 100, T0 + 1_000 + 100 + 100)


def _lease_again_and_lose(m: Model, now_ms: int, token: str) -> State:
    m.carry(now_ms, 10)
    assert m.lease("t", now_ms, 5, [token]) == [KEY]
    assert m.expire(now_ms + 1_000, 10) == [KEY]
    return m.state_of(KEY)


def test_only_losses_as_a_suspect_count_and_lost_max_of_them_quarantine() -> None:
    m = in_state(State.LEASED)
    m.topic_lost_max["t"] = 2
    m.expire(T0 + 1_000, 10)  # lost beside others, perhaps: not held against it
    assert (m.jobs[KEY].lost, m.jobs[KEY].suspect) == (0, True)
    assert _lease_again_and_lose(m, T0 + 2_000, "tok-2") is State.DELAYED
    assert m.jobs[KEY].lost == 1
    assert _lease_again_and_lose(m, T0 + 4_000, "tok-3") is State.DEAD
    job = m.jobs[KEY]
    assert (job.lost, job.suspect, job.attempts_failed) == (2, False, 0)
    assert m.requeue(KEY, T0 + 6_000)
    assert (m.jobs[KEY].lost, m.jobs[KEY].suspect) == (0, False)


def test_a_failure_clears_the_suspicion_and_the_losses_stay() -> None:
    m = in_state(State.LEASED)
    m.expire(T0 + 1_000, 10)
    assert _lease_again_and_lose(m, T0 + 2_000, "tok-2") is State.DELAYED
    m.carry(T0 + 4_000, 10)
    m.lease("t", T0 + 4_000, 1, ["tok-3"])
    assert m.fail(KEY, "tok-3", T0 + 4_000) is State.DELAYED
    assert (m.jobs[KEY].lost, m.jobs[KEY].suspect, m.jobs[KEY].attempts_failed) == (1, False, 1)


def test_a_consumer_running_a_suspect_is_leased_nothing_else_until_its_lease_ends() -> None:
    m = in_state(State.LEASED)
    m.expire(T0 + 1_000, 10)
    m.carry(T0 + 1_100, 10)
    m.add(("t", "k"), T0 + 1_100, T0 + 1_100)
    assert list(m.ready["t"]) == [KEY, ("t", "k")]
    assert m.lease("t", T0 + 1_100, 5, ["tok-2"], consumer="c") == [KEY]  # alone
    assert m.runs_suspect("c") and not m.runs_suspect("d")
    assert m.lease("t", T0 + 1_100, 5, ["tok-3"], consumer="c") == []
    assert m.lease("t", T0 + 1_100, 5, ["tok-3"], consumer="d") == [("t", "k")]
    assert m.ack(KEY, "tok-2")
    assert not m.runs_suspect("c")


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
