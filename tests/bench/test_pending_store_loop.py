"""The store-loop simulator runs end to end on a small N and reports what it measured.

Not a timed test: it checks counts and that each figure is there, never a speed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulations.bench.probes.pending_store_loop import FREE_THREAD, measure_one, parse_args, report
from simulations.bench.server import (
    CLIENT_CORE,
    REDIS_CORE,
    BenchServer,
    can_pin,
    pin_threads,
)


def test_the_store_loop_delivers_every_due_job_and_names_what_it_cost(tmp_path: Path) -> None:
    run = measure_one(pending=2_000, deliver_jobs=300, batch=50, seed=1, workdir=tmp_path)
    assert run.pending == 2_000 and run.delivered == 300
    assert run.jobs_per_s > 0 and run.redis_cpu_us_per_job_with_frees >= run.redis_cpu_us_per_job
    names = [cost.command for cost in run.commands]
    # The scripts' whole time is the costliest; the commands inside them follow.
    assert names[0] == "evalsha" and {"xadd", "hmget"} <= set(names)
    assert run.commands[0].usec_per_job > 0 and run.commands[0].calls >= 300 // 50
    # The add of the 300 jobs due now, 1,000 a call: one script call, measured on its own.
    added = run.add
    # Redis's CPU comes from /proc in 10 ms ticks, so a 300-job add may read 0; the scripts' own
    # time (commandstats, in µs) is never 0.
    assert added.jobs == 300 and added.jobs_per_s > 0 and added.redis_cpu_us_per_job >= 0
    add_names = {cost.command: cost for cost in added.commands}
    assert add_names["evalsha"].calls == 1 and add_names["evalsha"].usec_per_job > 0
    assert {"xadd", "hset", "hmget"} <= set(add_names)
    assert "lpop" not in add_names  # nothing leased while adding
    # The index so far became the previous generation at the first ack: the fields of the first
    # batch of 50, none of the 2,000 pending jobs' (their records keep their `added` ids). The
    # drop trimmed the stream past the current one's start, and one more ack dropped them.
    drop = run.drop
    assert drop is not None and 50 <= drop.fields < 2_000 and drop.pings >= 1
    assert drop.ack_ms > 0 and drop.free_ms >= drop.ack_ms
    text = report([run], "not pinned")
    assert "N=2,000: 300 delivered" in text and "evalsha" in text
    assert "added 300 jobs due now" in text
    assert f"dropping the previous index generation ({drop.fields:,} fields)" in text


def test_the_store_loop_refuses_arguments_that_measure_nothing() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--deliver-jobs", "0"])
    assert parse_args(["--pending", "0", "5"]).pending == [0, 5]


@pytest.mark.skipif(not can_pin(), reason="needs two cores to move a thread between them")
def test_free_core_moves_only_redis_s_freeing_thread_to_the_client_core(tmp_path: Path) -> None:
    server = BenchServer(tmp_path / "redis")
    try:
        assert pin_threads(server.pid, CLIENT_CORE, named=FREE_THREAD) == 1
        cores = {
            (task / "comm").read_text().strip(): os.sched_getaffinity(int(task.name))
            for task in Path(f"/proc/{server.pid}/task").iterdir()
        }
    finally:
        server.stop()
    assert cores[FREE_THREAD] == {CLIENT_CORE}
    assert cores["redis-server"] == {REDIS_CORE}  # the main thread keeps its core
    run = measure_one(200, 100, 50, 1, tmp_path / "loop", free_core=True)
    assert run.drop is not None and run.drop.free_thread_core == "the client core"
    assert "on the client core" in report([run], "pinned")
