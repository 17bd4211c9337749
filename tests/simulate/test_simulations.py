"""The simulators: their checkers on histories made by the real scripts (and on hand-made ones
for what the scripts cannot do), then both simulators end to end in their CI sizes.

The end-to-end runs are what `make test` uses to run the simulations in CI (about a minute).
"""

from __future__ import annotations

import heapq
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from _reply_cut import ReplyCut

from actors.clock import FakeClock
from actors.storage.keys import shard_of
from actors.storage.store import Store
from actors.values import Snapshot, TopicConfig
from simulations.crash.checkers import (
    EXIT_CODES,
    EXIT_NO_REDIS,
    AuditIndex,
    Evidence,
    Failure,
    check_all,
    lateness,
)
from simulations.crash.ledger import CancelRow, FaultRow, JobRow, Ledger, LedgerData, RunRow
from simulations.crash.workload import HandlerMix, fault_times, storms

ROOT = Path(__file__).resolve().parents[2]
T = "orders"


# A CI-sized simulator run takes 90-120 s on an idle 2-core machine and was seen at 236 s beside
# the rest of the suite on a loaded one; the ceiling only ends a hung run.
SIMULATOR_TIMEOUT_S = 540
pytestmark = pytest.mark.timeout(SIMULATOR_TIMEOUT_S + 60)


def _evidence(
    store: Store,
    jobs: list[JobRow],
    runs: list[RunRow],
    cancels: list[CancelRow] | None = None,
    faults: list[FaultRow] | None = None,
    **kwargs: int | None,
) -> Evidence:
    ledger = LedgerData({j.key: j for j in jobs}, cancels or [], runs, faults or [])
    return Evidence(ledger, store.audit_entries(), store.snapshot(), **kwargs)  # type: ignore[arg-type]


def _add(store: Store, job_id: str, delay_ms: int = 0) -> JobRow:
    now = store.clock.now_ms()
    store.add(store.new_job(T, job_id, {"id": job_id}, delay_ms=delay_ms))
    return JobRow(T, job_id, now + delay_ms, now)


def _lease_one(store: Store, clock: FakeClock, until_ms: int) -> str:
    clock.advance(max(0, until_ms - clock.now_ms()))
    store.carry()
    (lease,) = store.lease(T, 1, "w1.1")
    return lease.token


def _run(seq: int, job: JobRow, token: str, started_ms: int, outcome: str | None) -> RunRow:
    return RunRow(seq, T, job.id, token, 1, job.due_ms, started_ms, "w1.1", outcome, None)


def _failures(evidence: Evidence) -> list[Failure]:
    return check_all(evidence).failures


# -- checkers on real histories ---------------------------------------------------------------


def test_a_clean_history_passes(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a", delay_ms=1_000)
    token = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", token)
    verdict = check_all(_evidence(store, [job], [_run(1, job, token, job.due_ms, "ok")]))
    assert verdict.failures == []
    assert verdict.exit_code == 0
    assert verdict.outcomes == {"acked": 1, "jobs": 1}
    assert verdict.lateness.calm.max_ms == 0


def test_a_run_before_the_due_time_is_early(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a", delay_ms=1_000)
    token = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", token)
    evidence = _evidence(store, [job], [_run(1, job, token, job.due_ms - 5, "ok")])
    verdict = check_all(evidence)
    assert verdict.failures == [Failure.EARLY]
    assert verdict.exit_code == EXIT_CODES[Failure.EARLY] == 10
    # Within the tolerance between clocks it is not early.
    tolerant = Evidence(evidence.ledger, evidence.audit, evidence.live, early_tolerance_ms=5)
    assert _failures(tolerant) == []


def test_a_lease_before_the_due_time_is_early(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a", delay_ms=1_000)
    token = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", token)
    evidence = _evidence(store, [job], [_run(1, job, token, job.due_ms, "ok")])
    audit = [(i, {**f, "ms": "1"} if f["e"] == "leased" else f) for i, f in evidence.audit]
    moved = Evidence(evidence.ledger, audit, evidence.live)
    assert _failures(moved) == [Failure.EARLY]
    # Read by the server's time (the stream ids: real time, long after the fake due time) the
    # same lease is not early: that is how the chaos simulator reads real processes' leases.
    by_server = Evidence(evidence.ledger, audit, evidence.live, audit_time="server")
    assert _failures(by_server) == []


def test_a_lease_between_a_pause_and_its_resume(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a")
    store.pause(T)
    store.pause(T, False)
    token = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", token)
    evidence = _evidence(store, [job], [_run(1, job, token, job.due_ms, "ok")])
    assert _failures(evidence) == []  # the lease came after the resume
    # What a gate that let the lease through would have written: the resume after the lease.
    entries = evidence.audit
    resumed = next(n for n, (_, f) in enumerate(entries) if f["e"] == "resumed")
    moved = entries[:resumed] + entries[resumed + 1 : -1] + [entries[resumed], entries[-1]]
    verdict = check_all(Evidence(evidence.ledger, moved, evidence.live))
    assert verdict.failures == [Failure.PAUSED_LEASED]
    assert verdict.exit_code == EXIT_CODES[Failure.PAUSED_LEASED] == 19
    # Never resumed: paused to the end of the stream.
    cut = [e for e in moved if e[1]["e"] != "resumed"]
    assert _failures(Evidence(evidence.ledger, cut, evidence.live)) == [Failure.PAUSED_LEASED]


def test_a_run_after_a_cancel_that_removed_the_job(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a")
    assert store.cancel(T, "a") == "removed"
    cancel = CancelRow(1, T, "a", fake_clock.now_ms(), "removed")
    # What a broken cancel would allow: the job comes back and runs.
    again = _add(store, "a")
    token = _lease_one(store, fake_clock, again.due_ms)
    store.ack(T, "a", token)
    evidence = _evidence(store, [job], [_run(2, job, token, job.due_ms, "ok")], [cancel])
    assert Failure.CANCELLED_DELIVERED in _failures(evidence)
    # The same run before the cancel is fine.
    before = _evidence(store, [job], [_run(0, job, token, job.due_ms, "ok")], [cancel])
    assert Failure.CANCELLED_DELIVERED not in _failures(before)


def test_a_lease_after_a_cancel_in_the_stream(store: Store) -> None:
    job = _add(store, "a")
    store.cancel(T, "a")
    entries = store.audit_entries()
    ms = entries[-1][1]["ms"]
    leased = {"e": "leased", "t": T, "i": "a", "a": "1", "ms": ms, "tok": "x", "dl": ms, "by": ""}
    evidence = Evidence(
        LedgerData({job.key: job}, [], [], []), [*entries, ("9-9", leased)], store.snapshot()
    )
    assert Failure.CANCELLED_DELIVERED in _failures(evidence)


def test_events_after_an_ack(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a")
    token = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", token)
    entries = store.audit_entries()
    expired = {"e": "expired", "t": T, "i": "a", "a": "1", "ms": "0", "due": "0", "to": "ready"}
    evidence = Evidence(
        LedgerData({job.key: job}, [], [_run(1, job, token, job.due_ms, "ok")], []),
        [*entries, ("9-9", expired)],
        store.snapshot(),
    )
    verdict = check_all(evidence)
    assert verdict.failures[0] is Failure.AFTER_ACK
    assert "after it was acked" in str(verdict.violations[0])


def test_a_change_behind_the_scripts_back_is_audit_drift(
    store: Store, fake_clock: FakeClock
) -> None:
    job = _add(store, "a", delay_ms=60_000)
    store.client.zadd(store.keys.delayed, {f"{T}|a": job.due_ms + 1})  # not through a script
    verdict = check_all(_evidence(store, [job], []))
    assert verdict.failures[0] is Failure.AUDIT_DRIFT
    assert verdict.exit_code == 13


def test_an_illegal_transition_names_its_job_and_shows_the_jobs_entries(
    store: Store, fake_clock: FakeClock
) -> None:
    """A CI run's evidence goes with its temporary directory: the violation itself must carry
    what it takes to understand it, the job's own entries."""
    job = _add(store, "a")  # due now: added to=ready
    _add(store, "b")
    # A second `ready` written behind the scripts' back, as a carry of a job already ready would.
    now = str(fake_clock.now_ms())
    store.client.xadd(store.keys.audit, {"e": "ready", "t": T, "i": "a", "a": "1", "ms": now})
    verdict = check_all(_evidence(store, [job], []))
    (drift,) = [v for v in verdict.violations if "illegal transition" in v.message]
    assert drift.failure is Failure.AUDIT_DRIFT and drift.key == (T, "a")
    assert "ready is not legal from ready" in drift.message
    shown = drift.message.split("its entries: ", 1)[1].split(" | ")
    assert [entry.split()[1] for entry in shown] == ["added", "ready"]  # job a's, not b's
    assert "to=ready" in shown[0]


def test_a_job_missing_from_redis_is_lost(store: Store) -> None:
    job = JobRow(T, "never-added", 0, 0)
    verdict = check_all(_evidence(store, [job], []))
    assert verdict.failures == [Failure.LOST]
    assert verdict.outcomes["lost"] == 1
    assert "gone from Redis" in verdict.violations[0].message


def test_acked_without_a_good_run_is_lost(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a")
    token = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", token)
    verdict = check_all(_evidence(store, [job], [_run(1, job, token, job.due_ms, "error")]))
    assert verdict.failures == [Failure.LOST]


def test_a_duplicate_after_an_expired_lease_is_explained(
    store: Store, fake_clock: FakeClock
) -> None:
    store.configure_topic(T, TopicConfig((1_000,), 1_000))
    job = _add(store, "a")
    first = _lease_one(store, fake_clock, job.due_ms)
    fault = FaultRow(1, fake_clock.now_ms(), "worker_abandon", "w1.1")
    fake_clock.advance(1_000)
    assert store.expire()[0] == 1
    second = _lease_one(store, fake_clock, fake_clock.now_ms() + 1_000)
    store.ack(T, "a", second)
    runs = [_run(1, job, first, job.due_ms, None), _run(2, job, second, job.due_ms, "ok")]
    verdict = check_all(_evidence(store, [job], runs, faults=[fault]))
    assert verdict.failures == []
    assert verdict.duplicates.count == 1
    assert verdict.duplicates.by_cause == {"expired lease after worker_abandon": 1}


@pytest.mark.parametrize("kind", ["master_kill", "slot_migration"])
def test_a_cluster_fault_explains_any_lease_it_cost(
    store: Store, fake_clock: FakeClock, kind: str
) -> None:
    """A master kill or a slot migration hits every consumer of the shard, whoever it is."""
    store.configure_topic(T, TopicConfig((1_000,), 1_000))
    job = _add(store, "a")
    first = _lease_one(store, fake_clock, job.due_ms)
    fault = FaultRow(1, fake_clock.now_ms(), kind, "127.0.0.1:30001")
    fake_clock.advance(1_000)
    assert store.expire()[0] == 1
    second = _lease_one(store, fake_clock, fake_clock.now_ms() + 1_000)
    store.ack(T, "a", second)
    runs = [_run(1, job, first, job.due_ms, "ok"), _run(2, job, second, job.due_ms, "ok")]
    verdict = check_all(_evidence(store, [job], runs, faults=[fault]))
    assert verdict.failures == []
    assert verdict.duplicates.by_cause == {f"expired lease after {kind}": 1}


def test_a_retry_after_the_handler_raised_is_no_duplicate(
    store: Store, fake_clock: FakeClock
) -> None:
    store.configure_topic(T, TopicConfig((1_000,), 30_000))
    job = _add(store, "a")
    first = _lease_one(store, fake_clock, job.due_ms)
    store.fail(T, "a", first, "boom")
    second = _lease_one(store, fake_clock, fake_clock.now_ms() + 1_000)
    store.ack(T, "a", second)
    runs = [_run(1, job, first, job.due_ms, "error"), _run(2, job, second, job.due_ms, "ok")]
    verdict = check_all(_evidence(store, [job], runs))
    assert verdict.failures == []
    assert verdict.duplicates.count == 0


def test_a_run_after_the_job_was_acked_and_added_again_is_explained(
    store: Store, fake_clock: FakeClock
) -> None:
    """The chaos producer retries a whole add_many when one shard's part failed; a job from
    another shard that already ran and was acked is added, and runs, again."""
    job = _add(store, "a")
    first = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", first)
    fake_clock.advance(100)
    _add(store, "a")
    second = _lease_one(store, fake_clock, fake_clock.now_ms())
    store.ack(T, "a", second)
    runs = [_run(1, job, first, job.due_ms, "ok"), _run(2, job, second, job.due_ms, "ok")]
    verdict = check_all(_evidence(store, [job], runs))
    assert verdict.failures == []
    assert verdict.duplicates.by_cause == {"added again after its ack": 1}


def test_a_lease_run_twice_is_an_unexplained_duplicate(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a")
    token = _lease_one(store, fake_clock, job.due_ms)
    store.ack(T, "a", token)
    runs = [_run(1, job, token, job.due_ms, "ok"), _run(2, job, token, job.due_ms, "ok")]
    verdict = check_all(_evidence(store, [job], runs))
    assert verdict.failures == [Failure.UNEXPLAINED_DUPLICATE]
    assert verdict.duplicates.ran_ok_twice == 1


def test_a_job_still_pending_at_the_end_is_stuck(store: Store) -> None:
    job = _add(store, "a", delay_ms=60_000)
    verdict = check_all(_evidence(store, [job], []))
    assert verdict.failures == [Failure.STUCK]
    assert verdict.exit_code == 16


def test_calm_lateness_over_the_bound_is_late(store: Store, fake_clock: FakeClock) -> None:
    job = _add(store, "a")
    token = _lease_one(store, fake_clock, job.due_ms + 500)
    store.ack(T, "a", token)
    runs = [_run(1, job, token, job.due_ms + 500, "ok")]
    assert _failures(_evidence(store, [job], runs, calm_p99_bound_ms=1_000)) == []
    assert _failures(_evidence(store, [job], runs, calm_p99_bound_ms=100)) == [Failure.LATE]


def test_the_first_failure_decides_the_exit_code(store: Store, fake_clock: FakeClock) -> None:
    early = _add(store, "a")
    token = _lease_one(store, fake_clock, early.due_ms)
    store.ack(T, "a", token)
    stuck = _add(store, "b", delay_ms=60_000)
    runs = [_run(1, early, token, early.due_ms - 10, "ok")]
    verdict = check_all(_evidence(store, [early, stuck], runs))
    assert verdict.failures == [Failure.EARLY, Failure.STUCK]
    assert verdict.exit_code == 10


def test_the_summary_counts_a_schedules_occurrences_apart(
    store: Store, fake_clock: FakeClock
) -> None:
    """An occurrence that died is in the summary, not hidden behind "0 dead" of the jobs the
    simulator added."""
    from actors import schedules
    from simulations.crash import report

    store.configure_topic("reports", TopicConfig(retry_ms=(0,)))
    spec = schedules.spec(
        "hourly", "reports", cron=None, every=3600, tz="UTC", body=None,
        start_at_ms=None, misfire_policy="run_once",
    )  # fmt: skip
    _, first = store.schedule(spec)
    assert first is not None
    fake_clock.advance(3_600_000)
    store.carry()
    for _ in range(2):  # one retry step: the second failure is its death
        (lease,) = store.lease("reports", 1, "w1.1")
        assert lease.id == first
        store.fail("reports", first, lease.token, "boom", 0)
    ledger = LedgerData({}, [], [], [])
    verdict = check_all(Evidence(ledger, store.audit_entries(), store.snapshot()))
    assert verdict.occurrences == {"made": 2, "acked": 0, "dead": 1, "cancelled": 0}
    summary = report.build("chaos", 1, "redelay simulate", {}, verdict, ledger, {})
    assert summary["jobs"]["dead"] == 0 and summary["occurrences"]["dead"] == 1
    assert "schedule occurrences: 2 made; 0 acked, 1 dead, 0 cancelled" in report.text(summary)


def test_a_drain_names_the_jobs_it_waits_for(store: Store, fake_clock: FakeClock) -> None:
    """'draining: 1 pending' said nothing to act on: which job, waiting for what, until when."""
    from actors import schedules
    from simulations.crash.chaos import pending_jobs

    spec = schedules.spec(
        "hourly", "reports", cron=None, every=3600, tz="UTC", body=None,
        start_at_ms=None, misfire_policy="run_once",
    )  # fmt: skip
    store.schedule(spec)  # its next occurrence is never waited for
    store.add(store.new_job(T, "later", delay_ms=12_000))
    store.add(store.new_job(T, "held"))
    (lease,) = store.lease(T, 1, "w1.1")
    assert lease.id == "held"
    assert pending_jobs(store, 3) == [
        "orders/later delayed, due in 12.0s (attempt 1)",
        f"orders/held leased, lease ends in {(lease.deadline_ms - fake_clock.now_ms()) / 1000:.1f}s"
        " (attempt 1)",
    ]
    assert len(pending_jobs(store, 1)) == 1


def test_lateness_is_split_by_the_faults_before_it() -> None:
    runs = [
        RunRow(1, T, "calm", "t1", 1, 10_000, 10_050, "w"),
        RunRow(2, T, "hit", "t2", 1, 100_000, 104_000, "w"),
        RunRow(3, T, "hang", "t3", 1, 200_000, 200_010, "w"),
    ]
    faults = [
        FaultRow(1, 99_000, "worker_sigkill", "w1.1:1"),
        FaultRow(2, 199_000, "handler_hang", "orders/x #1"),  # touches its own job only
    ]
    ledger = LedgerData({}, [], runs, faults)
    late = lateness(Evidence(ledger, [], Snapshot(), early_tolerance_ms=0, fault_window_ms=5_000))
    assert late.calm.count == 2 and late.calm.max_ms == 50
    assert late.after_fault.count == 1 and late.after_fault.max_ms == 4_000


# -- the parts the drivers share --------------------------------------------------------------


def test_the_ledger_keeps_rows_across_connections(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    first = Ledger(path)
    first.add_jobs([JobRow(T, "a", 5, 1)])
    seq = first.run_started(T, "a", "tok", 1, 5, 6, "w1")
    second = Ledger(path)  # another process would open it like this
    second.run_ended(seq, "ok", 7)
    second.fault(8, "worker_sigkill", "w1")
    first.cancel(T, "a", 9, "missing")
    data = Ledger(path).read()
    assert data.jobs == {(T, "a"): JobRow(T, "a", 5, 1)}
    assert data.runs == [RunRow(seq, T, "a", "tok", 1, 5, 6, "w1", "ok", 7)]
    assert [f.kind for f in data.faults] == ["worker_sigkill"]
    assert [c.result for c in data.cancels] == ["missing"]
    assert first.counts() == {"jobs": 1, "runs": 1, "runs_ok": 1, "faults": 1}


def test_a_handler_decision_depends_only_on_seed_job_and_attempt() -> None:
    mix = HandlerMix(error=0.3, retry=0.1, hang=0.1, hang_ms=(10, 20), work_ms=(1, 5))
    decisions = [mix.decide(7, T, f"j{n}", 1) for n in range(300)]
    assert decisions == [mix.decide(7, T, f"j{n}", 1) for n in range(300)]
    kinds = {d.kind for d in decisions}
    assert kinds == {"ok", "error", "retry", "hang"}
    assert decisions != [mix.decide(8, T, f"j{n}", 1) for n in range(300)]


def test_faults_fire_only_in_storms_and_every_kind_at_least_once() -> None:
    import random

    rng = random.Random(1)
    periods = storms(rng, 100.0, (5.0, 10.0), (10.0, 20.0))
    assert periods[0][0] == 0.0
    times = fault_times(rng, periods, 1_000.0)  # far rarer than one per run
    assert len(times) == 1
    assert any(start <= times[0] <= end for start, end in periods)
    dense = fault_times(rng, periods, 0.5)
    assert all(any(s <= t <= e for s, e in periods) for t in dense)


def test_one_seed_gives_one_plan() -> None:
    from simulations.crash.det_settings import derive
    from simulations.crash.deterministic import plan

    first, again, other = derive(5, "ci"), derive(5, "ci"), derive(6, "ci")
    assert first == again and first != other
    events = sorted(plan(first, 0))
    assert events == sorted(plan(again, 0))
    assert events != sorted(plan(other, 0))
    kinds = {e.kind for e in events}
    assert {"add", "cancel", *first.fault_interval_ms} <= kinds
    added = sum(len(e.data) for e in events if e.kind == "add")
    assert added >= first.jobs + 10 * first.bursts


def test_the_audit_index_finds_each_lease(store: Store, fake_clock: FakeClock) -> None:
    _add(store, "a")
    token = _lease_one(store, fake_clock, fake_clock.now_ms())
    index = AuditIndex(store.audit_entries())
    assert index.lease_by[((T, "a"), token)] == "w1.1"
    assert index.first((T, "a"), ["leased"]) == index.lease_pos[((T, "a"), token)]


def test_two_shards_may_give_two_jobs_the_same_token(
    redis_client: redis.Redis, fake_clock: FakeClock
) -> None:
    """A token is unique per shard (``<now_ms>-<seq>``, the shard's counter): two shards
    leasing in the same millisecond give their jobs equal tokens. That is no reuse, and each
    run is matched with its own job's lease."""
    store = Store(redis_client, "sim", fake_clock, shards=3)
    assert shard_of(T, "j0", 3) != shard_of(T, "j1", 3)  # each job in its own shard
    jobs, runs, tokens = [], [], []
    for n in range(2):
        jobs.append(_add(store, f"j{n}"))
        (lease,) = store.lease(T, 1, "w1.1")
        store.ack(T, lease.id, lease.token)
        tokens.append(lease.token)
        runs.append(_run(n + 1, jobs[-1], lease.token, fake_clock.now_ms(), "ok"))
    assert tokens[0] == tokens[1]
    audit = list(store.iter_audit())
    live = store.snapshot()
    ledger = LedgerData({j.key: j for j in jobs}, [], runs, [])
    verdict = check_all(Evidence(ledger, audit, live))
    assert verdict.failures == []
    assert verdict.outcomes == {"acked": 2, "jobs": 2}
    index = AuditIndex(audit)
    assert index.reused_tokens == []
    assert index.lease_pos[((T, "j0"), tokens[0])] != index.lease_pos[((T, "j1"), tokens[1])]


# -- both simulators, CI-sized ----------------------------------------------------------------


def _simulate(args: list[str], out: Path) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", *args, "--json", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SIMULATOR_TIMEOUT_S,
    )
    summary: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, summary, done.stderr


def _check_summary(summary: dict[str, Any], kinds: set[str]) -> None:
    jobs = summary["jobs"]
    assert isinstance(jobs, dict)
    assert jobs["added"] > 100
    assert jobs["lost"] == 0 and jobs["stuck"] == 0
    assert jobs["acked"] + jobs["dead"] + jobs["cancelled"] == jobs["added"]
    faults = summary["faults"]
    assert isinstance(faults, dict)
    assert kinds <= {k for k, n in faults.items() if n > 0}, faults
    lateness_ms = summary["lateness_ms"]
    assert isinstance(lateness_ms, dict)
    assert lateness_ms["calm"]["count"] > 0 and lateness_ms["after_fault"]["count"] > 0


@pytest.mark.slow
def test_deterministic_simulation_ci_run(tmp_path: Path) -> None:
    code, summary, stderr = _simulate(
        ["simulations.crash.deterministic", "--seed", "1", "--ci"], tmp_path
    )
    assert code == 0, stderr[-3000:] + json.dumps(summary.get("violations"))
    assert summary["reproduce"] == "python -m simulations.crash.deterministic --seed 1 --ci"
    assert "seed 1, mode ci" in stderr  # the settings, printed at the start
    _check_summary(
        summary,
        {
            "actor_crash",
            "connection_drop",
            "worker_abandon",
            "worker_stop",
            "clock_jump",
        },
    )
    assert (tmp_path / "deterministic-1" / "lateness.png").stat().st_size > 10_000


@pytest.mark.slow
def test_chaos_simulation_ci_run(tmp_path: Path) -> None:
    code, summary, stderr = _simulate(
        ["simulations.crash.chaos", "--seed", "5", "--duration", "30"], tmp_path
    )
    assert code == 0, stderr[-3000:] + json.dumps(summary.get("violations"))
    _check_summary(
        summary, {"worker_sigkill", "worker_sigterm", "connection_kill", "redis_restart"}
    )
    assert (tmp_path / "chaos-5" / "lateness.png").stat().st_size > 10_000


@pytest.mark.slow
def test_chaos_simulation_backlog_ci_run(tmp_path: Path) -> None:
    """A backlog and pools of more than 64 slots, under the same faults: the pools lease with
    their acks and keep several ack-and-lease pipelines out while workers and Redis die."""
    args = ["simulations.crash.chaos", "--seed", "5", "--duration", "25", "--backlog"]
    code, summary, stderr = _simulate(args, tmp_path)
    assert code == 0, stderr[-3000:] + json.dumps(summary.get("violations"))
    assert (
        summary["reproduce"] == "python -m simulations.crash.chaos --seed 5 --duration 25 --backlog"
    )
    settings = summary["settings"]
    assert settings["rate_per_s"] == 250.0
    assert all(t["concurrency"] + t["prefetch"] >= 64 for t in settings["topics"])
    _check_summary(summary, {"worker_sigkill", "worker_sigterm", "connection_kill"})
    assert summary["jobs"]["added"] > 4_000  # far more than the default workload's ~800


@pytest.mark.slow
def test_chaos_simulation_cluster_ci_run(tmp_path: Path) -> None:
    """Workers and producer on a 3 + 3 Redis Cluster with 3 shards; masters killed and slots
    migrated besides the usual faults. About 35 s on a quiet 2-core machine."""
    args = ["simulations.crash.chaos", "--seed", "5", "--duration", "25", "--cluster"]
    code, summary, stderr = _simulate(args, tmp_path)
    if code == EXIT_NO_REDIS and "cannot start a local Redis Cluster here" in stderr:
        pytest.skip(stderr.strip().splitlines()[-1])
    assert code == 0, stderr[-3000:] + json.dumps(summary.get("violations"))
    assert summary["reproduce"] == (
        "python -m simulations.crash.chaos --seed 5 --duration 25 --cluster --shards 3"
    )
    assert "Redis Cluster of 3 masters + 3 replicas" in stderr  # the settings, at the start
    assert summary["settings"]["cluster"] is True and summary["settings"]["shards"] == 3
    _check_summary(
        summary,
        {"worker_sigkill", "worker_sigterm", "connection_kill", "master_kill", "slot_migration"},
    )
    assert "redis_restart" not in summary["faults"]
    notes = summary["notes"]
    killed = summary["faults"]["master_kill"]
    assert notes["failovers"].startswith(f"{killed} masters killed; replica promoted after ")
    promoted = notes["failovers"].split("promoted after ")[1].split(";")[0].split(", ")
    healed = notes["failovers"].split("back in sync after ")[1].split(", ")
    assert len(promoted) == len(healed) == killed  # every kill healed before the drain
    assert notes["lateness of runs due during a failover (kill to promotion)"].startswith("n=")


def test_cluster_settings_keep_the_workload_and_reach_the_workers() -> None:
    from simulations.crash.chaos_settings import ChaosSettings, derive

    plain, clustered = derive(5, 30), derive(5, 30, cluster_shards=4)
    assert (clustered.topics, clustered.rate_per_s, clustered.delays, clustered.handler) == (
        plain.topics,
        plain.rate_per_s,
        plain.delays,
        plain.handler,
    )
    assert clustered.cluster and clustered.shards == 4 and not plain.cluster
    assert set(clustered.fault_interval_s) == {
        "worker_sigkill",
        "worker_sigterm",
        "connection_kill",
        "master_kill",
        "slot_migration",
    }
    assert "redis_restart" in plain.fault_interval_s
    for settings in (plain, clustered):
        assert ChaosSettings.from_json(settings.to_json()) == settings


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shards", "3"], "--shards needs --cluster"),
        (["--cluster", "--shards", "0"], "--shards must be from 1 to 64"),
    ],
)
def test_bad_cluster_arguments_are_a_usage_error(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simulations.crash.chaos", "--seed", "1", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize("flag", ["--seed=x", "--bogus"])
def test_bad_arguments_are_a_usage_error(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simulations.crash.deterministic", flag],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "usage:" in done.stderr


@pytest.mark.slow
def test_your_own_handlers_run_in_the_deterministic_simulator(tmp_path: Path) -> None:
    args = ["simulations.crash.deterministic", "--seed", "3", "--ci", "--hours", "0.5"]
    args += ["--app", "simulations.examples.app:register"]
    args += ["--bodies", "simulations.examples.app:body"]
    code, summary, stderr = _simulate(args, tmp_path)
    assert code == 0, stderr[-3000:]
    assert "order.timeout (concurrency 4, timeout 10000ms" in stderr
    assert summary["jobs"]["added"] > 50
    assert summary["reproduce"].endswith(
        "--hours 0.5 --app simulations.examples.app:register --bodies simulations.examples.app:body"
    )


def test_the_guide_lists_every_exit_code_check_and_fault_kind() -> None:
    from simulations.crash import chaos_settings, det_settings

    text = (ROOT / "docs" / "simulations.md").read_text()
    for failure, code in EXIT_CODES.items():
        assert f"| {code} | `{failure.value}` |" in text, failure
    for kind in det_settings.FAULT_KINDS + chaos_settings.FAULT_KINDS:
        assert f"| `{kind}` |" in text, kind
    for command in ("make simulate", "make soak", "--app", "--bodies", "--check", "reproduce with"):
        assert command in text


# -- your own invariants (--check) and `redelay simulate` ---------------------------------------


def _refund_ledger() -> LedgerData:
    jobs = [JobRow("refund", f"j{n:06d}", 1_000, 0) for n in range(3)]
    runs = [
        RunRow(1, "refund", "j000001", "t1", 1, 1_000, 1_000, "w1.1", "ok", 2_000),
        RunRow(2, "refund", "j000001", "t2", 2, 1_000, 70_000, "w1.2", "ok", 71_000),
        RunRow(3, "refund", "j000002", "t3", 1, 1_000, 1_000, "w1.1", "ok", 1_500),
    ]
    faults = [
        FaultRow(1, 500, "clock_jump", "+1 ms"),  # before the window
        FaultRow(2, 2_500, "worker_abandon", "w1.1"),
        FaultRow(3, 80_000, "actor_crash", "w1.2 carrier"),  # after the last run
    ]
    return LedgerData({j.key: j for j in jobs}, [], runs, faults)


def test_a_user_check_that_raises_names_its_jobs_runs_and_the_faults_around_them() -> None:
    from simulations.crash import user_check

    def check() -> None:
        raise AssertionError("refund-j000001 sent 2 times (job refund/j000001)")

    result = user_check.run_check("app:check", check, _refund_ledger(), window_ms=400)
    assert not result.passed
    assert result.jobs == [("refund", "j000001")]  # j000002 is not named
    assert [r.seq for r in result.runs] == [1, 2]
    assert [f.kind for f in result.faults] == ["worker_abandon"]
    (violation,) = result.violations()
    assert violation.failure is Failure.USER_CHECK and EXIT_CODES[Failure.USER_CHECK] == 18
    assert "AssertionError: refund-j000001 sent 2 times" in violation.message
    lines = user_check.describe({**result.as_dict(), "start_ms": 0})
    assert "  run refund/j000001 attempt 2 on w1.2: started +70.000s, ended +71.000s, ok" in lines
    assert "    +2.500s worker_abandon w1.1" in lines


def test_a_user_check_that_passes_or_names_no_job() -> None:
    from simulations.crash import user_check

    passed = user_check.run_check("app:check", lambda: None, _refund_ledger(), 1_000)
    assert passed.passed and passed.violations() == []

    def vague() -> None:
        raise ValueError("a refund went out twice")

    found = user_check.run_check("app:check", vague, _refund_ledger(), 1_000)
    assert found.jobs == [] and found.faults == [] and len(found.violations()) == 1
    assert "name the job ids" in user_check.describe(found.as_dict())[1]


def _redelay_simulate(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", "simulate", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=SIMULATOR_TIMEOUT_S,
    )


@pytest.mark.slow
def test_redelay_simulate_fails_a_non_idempotent_handler_with_exit_18(tmp_path: Path) -> None:
    args = ["--seed", "2", "--ci", "--hours", "0.5", "--json", "--out", str(tmp_path)]
    args += ["--app", "simulations.examples.refunds:register"]
    args += ["--check", "simulations.examples.refunds:check"]
    done = _redelay_simulate(args, ROOT)
    assert done.returncode == 18, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["result"] == "user_check" and summary["exit_code"] == 18
    assert summary["user_check"]["result"] == "failed"
    assert "sent 2 times" in summary["user_check"]["error"]
    assert summary["user_check"]["runs"], "the named job's runs are listed"
    assert summary["reproduce"] == (
        "redelay simulate --seed 2 --ci --hours 0.5 --app simulations.examples.refunds:register "
        "--check simulations.examples.refunds:check"
    )
    refunds = tmp_path / "deterministic-2" / "app" / "refunds.sqlite"
    assert refunds.is_file()  # the handlers' records are kept with the run


CHATTY_APP = """
from actors import DelayQueue

def register(queue: DelayQueue) -> None:
    @queue.handler("chatty")
    def handle(job):
        print("handled", job.id)

def body(topic, job_id):
    print("body for", job_id)
    return {"id": job_id}

def check():
    print("checking")
"""


@pytest.mark.slow
def test_a_print_in_your_code_does_not_reach_the_json_summary(tmp_path: Path) -> None:
    """--json promises one document on stdout: the user's prints go to stderr."""
    (tmp_path / "chatty.py").write_text(CHATTY_APP)
    args = ["--seed", "3", "--ci", "--hours", "0.02", "--json", "--out", str(tmp_path / "out")]
    args += ["--app", "chatty:register", "--bodies", "chatty:body", "--check", "chatty:check"]
    done = _redelay_simulate(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # the summary alone
    assert summary["user_check"]["result"] == "ok" and summary["jobs"]["acked"] > 0
    assert "checking" in done.stderr and "handled" in done.stderr and "body for" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--duration", "5"], "--duration needs --chaos"),
        (["--chaos", "--ci"], "--ci is not for --chaos"),
        (["--check", "nowhere_at_all:check"], "--check: cannot import nowhere_at_all"),
        (["--check", "simulations.examples.refunds:nothing"], "has no attribute 'nothing'"),
    ],
)
def test_redelay_simulate_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    done = _redelay_simulate([*args, "--out", str(tmp_path)], ROOT)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_the_cli_page_lists_every_simulator_exit_code() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## redelay simulate", 1)[1]
    for failure, code in EXIT_CODES.items():
        assert f"| {code} | `{failure.value}`" in section, failure


def test_the_chaos_drain_waits_for_your_longest_retry_schedule() -> None:
    from simulations.crash.chaos_settings import derive
    from simulations.crash.det_settings import TopicPlan

    settings = derive(1, 40)
    own = max(sum(t.retry_ms) for t in settings.topics)
    slow = TopicPlan("t", 4, 10_000, settings.topics[0].lease_ms, (5_000, 60_000, 600_000))
    longer = settings.with_topics((slow,))
    assert longer.drain_limit_s == settings.drain_limit_s + (665_000 - own) / 1000
    fast = TopicPlan("t", 4, 10_000, settings.topics[0].lease_ms, (0,))
    assert settings.with_topics((fast,)).drain_limit_s == settings.drain_limit_s


@pytest.mark.parametrize("simulator", ["deterministic", "chaos"])
def test_each_simulators_help_names_every_failure_exit_code(simulator: str) -> None:
    module = importlib.import_module(f"simulations.crash.{simulator}")
    epilog = module.build_parser().epilog
    for failure, code in EXIT_CODES.items():
        assert f"{code} {failure.value}" in epilog
    assert epilog.startswith("Exit codes: 0 ok, 10 early, ")
    for own in ("1 simulator error", "2 usage", "3 no redis-server"):
        assert epilog.count(own) == 1, own


def test_a_cancel_whose_reply_was_lost_is_recorded_as_asked(
    reply_cut: ReplyCut, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The connection dies after the cancel ran: the chaos producer must not drop it from the
    ledger, or the checker calls the job it cancelled "lost" (seen on redis-py 5.3.1, whose
    held connections do not retry)."""
    from simulations.crash.chaos import CANCEL_UNKNOWN, Producer
    from simulations.crash.chaos_settings import derive

    ledger = Ledger(tmp_path / "ledger.sqlite")
    producer = Producer(derive(5, 30), reply_cut.url, ledger, {"n": 1}, "cut")
    try:
        producer.queue.add(T, "victim", delay=60)
        reply_cut.arm_script("cancel")
        heapq.heappush(producer.cancels, (0.0, T, "victim"))
        producer._cancel_due()
        assert reply_cut.cuts == 1
        assert producer.queue.get(T, "victim") is None  # the cancel ran
        (cancel,) = ledger.read().cancels
        assert cancel.key == (T, "victim")
        assert cancel.result in (CANCEL_UNKNOWN, "missing")  # raised, or retried after it ran
    finally:
        producer.queue.close()
