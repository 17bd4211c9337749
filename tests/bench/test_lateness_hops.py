"""simulations/bench/probes/lateness_hops.py: the hops are read off the audit stream the real
scripts write (on the fake clock, so each is known exactly), and the tool runs end to end on a tiny
steady run. No speed is asserted: the figures come from running the tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from actors.clock import FakeClock
from actors.storage.store import Store
from simulations.bench.probes.lateness_hops import (
    TRUNCATION_MS,
    JobTimes,
    hops,
    job_times,
    parse_args,
)

ROOT = Path(__file__).resolve().parents[2]


def test_each_hop_is_read_from_the_job_s_own_events(store: Store, fake_clock: FakeClock) -> None:
    start = fake_clock.now_ms()
    store.add(store.new_job("t", "a", delay_ms=100))
    store.add(store.new_job("t", "b", delay_ms=100))
    store.add(store.new_job("t", "now"))  # due at once: never carried, so left out
    fake_clock.advance(103)
    assert store.carry() == (2, None)  # both carried 3 ms after their due time
    fake_clock.advance(2)
    assert [x.id for x in store.lease("t", 2)] == ["now", "a"]  # "a" leased 2 ms after its carry
    fake_clock.advance(5)
    assert [x.id for x in store.lease("t", 1)] == ["b"]  # "b" 7 ms after

    times = job_times(store.iter_audit())
    assert (times[("t", "a")].due_ms, times[("t", "a")].ready_ms) == (start + 100, start + 103)
    assert times[("t", "b")].leased_ms == start + 110
    found = hops(times)
    assert (found.jobs_seen, found.jobs_not_carried) == (2, 1)
    assert found.carry is not None and found.lease is not None and found.due_to_lease is not None
    assert (found.carry.mean_ms, found.carry.max_ms) == (3 + TRUNCATION_MS, 3)
    assert (found.lease.mean_ms, found.lease.p50_ms, found.lease.max_ms) == (4.5, 2, 7)
    assert found.due_to_lease.mean_ms == 7.5 + TRUNCATION_MS


def test_each_job_s_lateness_gives_its_hand_off_and_the_tail_s_split() -> None:
    def times(due: int, ready: int, leased: int) -> JobTimes:
        return JobTimes(due_ms=due, ready_ms=ready, leased_ms=leased)

    jobs = {("t", f"job-{n}"): times(1000, 1001, 1002) for n in range(99)}
    jobs[("t", "job-99")] = times(1000, 1009, 1011)  # the slow one: late in the carry
    jobs[("t", "never-delivered")] = times(1000, 1001, 1002)
    jobs[("t", "not-carried")] = JobTimes(due_ms=1000)
    lateness = {f"job-{n}": 3.0 for n in range(99)} | {"job-99": 20.0}
    found = hops(jobs, lateness)
    assert (found.jobs_seen, found.jobs_not_carried, found.jobs_without_lateness) == (101, 1, 1)
    assert found.hand_off is not None and found.tail is not None
    # Hand-off: lateness less due-to-lease, 1 ms for 99 jobs and 9 for the slow one.
    assert (found.hand_off.jobs, found.hand_off.p50_ms, found.hand_off.max_ms) == (100, 1, 9)
    assert found.hand_off.mean_ms == pytest.approx(1.08 - TRUNCATION_MS)
    # The tail is the jobs from the p99's rank up: of 100, the 99th (3 ms, a fast one, since
    # 99 tie at 3 ms) and the 100th, the slow one; each hop's mean is over the two.
    tail = found.tail
    assert (tail.jobs, tail.lateness_from_ms) == (2, 3.0)
    assert tail.carry_mean_ms == (1 + 9) / 2 + TRUNCATION_MS
    assert tail.lease_mean_ms == (1 + 2) / 2
    assert tail.hand_off_mean_ms == (1 + 9) / 2 - TRUNCATION_MS


def test_without_lateness_there_is_no_hand_off(store: Store, fake_clock: FakeClock) -> None:
    store.add(store.new_job("t", "a", delay_ms=10))
    fake_clock.advance(10)
    store.carry()
    store.lease("t", 1)
    found = hops(job_times(store.iter_audit()))
    assert found.jobs_seen == 1 and found.hand_off is None and found.tail is None


def test_a_second_lease_does_not_move_the_first(store: Store, fake_clock: FakeClock) -> None:
    store.add(store.new_job("t", "a", delay_ms=10))
    fake_clock.advance(10)
    store.carry()
    first = store.lease("t", 1)[0]
    store.release_many([(first.topic, first.id, first.token)])
    fake_clock.advance(50)
    store.lease("t", 1)
    found = hops(job_times(store.iter_audit()))
    assert found.lease is not None and found.lease.max_ms == 0


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--systems", "celery"], "--systems"),
        (["--rates", "0"], "--rates"),
        (["--seconds", "0"], "--seconds"),
        (["--delay-ms", "50", "10"], "--delay-ms"),
        (["--pending", "-1"], "--pending"),
    ],
)
def test_bad_arguments_name_the_option(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert named in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("pending", [0, 500])
def test_a_tiny_steady_run_splits_every_job_s_lateness(pending: int) -> None:
    done = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "simulations.bench.probes.lateness_hops",
                "--systems",
                "redelay-store",
            ),
            *("--rates", "200", "--seconds", "1", "--delay-ms", "100", "300", "--json"),
            *("--pending", str(pending)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (run,) = json.loads(done.stdout)["runs"]
    assert (run["system"], run["rate"], run["jobs"], run["delivered"]) == (
        "redelay-store",
        200,
        200,
        200,
    )
    assert run["pending"] == pending
    # Only the run's own jobs are read: the pending jobs' `added` entries came before it (read,
    # they would be left out, as jobs never carried).
    assert (run["jobs_with_every_hop"], run["jobs_left_out"]) == (200, 0)
    assert run["early_deliveries"] == 0
    assert run["carry"]["p50_ms"] >= 0 and run["lease"]["p50_ms"] >= 0
    # Every job's lateness was joined with its hops (by the seq the recorder wrote beside it),
    # and the hops add up to the handler's lateness: the truncation corrections cancel.
    assert run["jobs_without_lateness"] == 0
    assert run["hand_off"]["jobs"] == 200
    parts = run["due_to_lease"]["mean_ms"] + run["hand_off"]["mean_ms"]
    assert parts == pytest.approx(run["lateness_ms_mean"], abs=0.01)
    tail = run["tail"]
    assert tail["jobs"] == 3  # of 200: from the p99's rank (198) up
    assert tail["lateness_from_ms"] == run["lateness_ms_p99"]
    # Its hops add up to its jobs' lateness, which is at or past the p99.
    slowest = tail["carry_mean_ms"] + tail["lease_mean_ms"] + tail["hand_off_mean_ms"]
    assert slowest >= run["lateness_ms_p99"] - 0.01
