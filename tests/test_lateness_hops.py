"""simulations/lateness_hops.py: the hops are read off the audit stream the real scripts write
(on the fake clock, so each is known exactly), and the tool runs end to end on a tiny steady run.
No speed is asserted: the figures come from running the tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from actors.clock import FakeClock
from actors.storage.store import Store
from simulations.lateness_hops import TRUNCATION_MS, hops, job_times, parse_args

ROOT = Path(__file__).parent.parent


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


@pytest.mark.parametrize("pending", [0, 500])
def test_a_tiny_steady_run_splits_every_job_s_lateness(pending: int) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "simulations.lateness_hops", "--systems", "redelay-store"),
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
    assert run["hand_off_mean_ms"] is not None
    # The hops add up to the handler's lateness (the hand-off is the rest, so its mean is what is
    # left once the two measured hops are taken away).
    parts = run["due_to_lease"]["mean_ms"] + run["hand_off_mean_ms"]
    assert parts == pytest.approx(run["lateness_ms_mean"], abs=0.01)
