"""The benchmark's Recorder counts deliveries made in child processes forked from the worker
(Celery's prefork pool, RQ's worker pool) into the same figures as the worker's own."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from simulations.bench.jobs import now_ms
from simulations.bench.recorder import Recorder


def deliver(recorder: Recorder, *seqs: int) -> None:
    for seq in seqs:
        recorder.delivered({"seq": seq, "due_ms": now_ms()})


def test_deliveries_in_forked_children_count_once_and_the_last_one_writes(tmp_path: Path) -> None:
    out = tmp_path / "deliveries.json"
    recorder = Recorder(6, out, tmp_path / "ready.json")
    fork = multiprocessing.get_context("fork")
    # Two children, as a pool has: each delivers its share and one job the other also got.
    children = [
        fork.Process(target=deliver, args=(recorder, 0, 1, 2)),
        fork.Process(target=deliver, args=(recorder, 2, 3)),
    ]
    for child in children:
        child.start()
        child.join(timeout=30)
        assert child.exitcode == 0
    assert not out.exists()  # four of six so far
    deliver(recorder, 4, 5)  # the worker process itself completes the set
    data = json.loads(out.read_text())
    assert data["delivered"] == 6
    assert data["duplicates"] == 1
    assert len(data["lateness_ms"]) == 6
    # Each lateness says whose it is, whichever process delivered it (the first of seq 2 counts).
    assert sorted(data["seqs"]) == [0, 1, 2, 3, 4, 5]
    assert data["seqs"][-2:] == [4, 5]
    assert data["first_ms"] <= data["last_ms"]


def test_a_child_completing_the_set_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "deliveries.json"
    recorder = Recorder(2, out, tmp_path / "ready.json")
    deliver(recorder, 0, 7)  # 7 is not a job of this run
    child = multiprocessing.get_context("fork").Process(target=deliver, args=(recorder, 1))
    child.start()
    child.join(timeout=30)
    data = json.loads(out.read_text())
    assert (data["delivered"], data["unknown"]) == (2, 1)


def test_each_lateness_is_written_beside_its_job_s_seq(tmp_path: Path) -> None:
    out = tmp_path / "deliveries.json"
    recorder = Recorder(3, out, tmp_path / "ready.json")
    for seq in (2, 0, 1):  # job seq was due seq seconds ago
        recorder.delivered({"seq": seq, "due_ms": now_ms() - 1000 * seq})
    data = json.loads(out.read_text())
    assert data["seqs"] == [2, 0, 1]
    for seq, lateness in zip(data["seqs"], data["lateness_ms"], strict=True):
        assert 1000 * seq <= lateness < 1000 * seq + 500
