"""simulations/bench/probes/script_instructions.py counts Redis's instructions per job under
callgrind: the same scripts count the same twice, and scripts that do more count more in every
phase."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from actors.server.embedded import find_redis_server
from actors.storage.scripts import lua_dir
from simulations.bench.probes import script_instructions

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="valgrind (Debian's valgrind package) is not installed",
)

SIZES = {"jobs": 300, "add_batch": 100, "batch": 50}


def _count(lua: Path, label: str) -> script_instructions.Count:
    return script_instructions.count(
        lua, label, SIZES["jobs"], SIZES["add_batch"], SIZES["batch"], find_redis_server()
    )


def _with_every_entry_written_twice(into: Path) -> Path:
    """A copy of lua/ whose audit() appends each entry twice (only this test loads it)."""
    shutil.copytree(lua_dir(), into)
    lib = into / "_lib.lua"
    text = lib.read_text()
    once = "  local entry_id = rcall('XADD', unpack(a, 1, n))\n"
    assert text.count(once) == 1
    lib.write_text(text.replace(once, "  rcall('XADD', unpack(a, 1, n))\n" + once))
    return into


@pytest.mark.slow
@needs_valgrind
def test_counts_repeat_and_grow_with_the_work_the_scripts_do(tmp_path: Path) -> None:
    first = _count(lua_dir(), "this checkout")
    again = _count(lua_dir(), "again")
    doubled = _count(_with_every_entry_written_twice(tmp_path / "lua"), "twice")
    assert set(first.per_job) == set(script_instructions.PHASES)
    for phase in script_instructions.PHASES:
        assert first.per_job[phase] > 1_000
        # Instructions, not time: the same work counts the same to within about a percent.
        assert again.per_job[phase] == pytest.approx(first.per_job[phase], rel=0.02)
        # Every phase writes an audit entry per job, so a second XADD shows in each.
        assert doubled.per_job[phase] > first.per_job[phase] * 1.05
    text = script_instructions.report([first, doubled], 100, 50)
    assert "this checkout" in text and "twice" in text and "+" in text.splitlines()[-1]


def test_due_orders_give_each_job_its_offset() -> None:
    assert script_instructions._offsets("same", 4, 1_000, seed=1) == [0, 0, 0, 0]
    assert script_instructions._offsets("ascending", 4, 1_000, seed=1) == [0, 1, 2, 3]
    spread = script_instructions._offsets("random", 500, 1_000, seed=1)
    assert spread == script_instructions._offsets("random", 500, 1_000, seed=1)  # seeded
    assert all(0 <= x < 1_000 for x in spread) and len(set(spread)) > 300


def test_padded_ids_made_in_order_are_in_byte_order_and_unpadded_ones_are_not() -> None:
    made = range(1_200)
    padded = [script_instructions.ID_FORMATS["padded"] % n for n in made]
    unpadded = [script_instructions.ID_FORMATS["unpadded"] % n for n in made]
    assert sorted(padded) == padded
    assert sorted(unpadded) != unpadded and unpadded[12] == "job-12"


@needs_valgrind
def test_an_empty_call_counts_the_same_twice_and_far_less_than_a_jobs_life() -> None:
    """The floor a job's life is divided by in docs/benchmarks.md: EVALSHA of `return 0`."""
    redis_server = find_redis_server()
    first = script_instructions.count_noop(200, redis_server)
    again = script_instructions.count_noop(200, redis_server)
    assert first > 1_000
    # Not exact: the server's timer (serverCron, 10 ticks a second) runs inside the count, so a
    # run slowed by a loaded host counts a few more ticks per call (seen: 11,201 then 11,759).
    assert again == pytest.approx(first, rel=0.10)
    life = _count(lua_dir(), "this checkout").total
    assert life > 5 * first
