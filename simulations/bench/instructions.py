"""Redis's instructions per job, counted by callgrind: the one figure host speed cannot move.

valgrind's callgrind runs a private redis-server and counts the instructions it executes while the
Store drives a delayed job's life (simulations/bench/probes/script_instructions.py): in the batches
the worker uses under load, and one job per call as a light load pays. Beside them, an empty script
call's instructions: the floor a job's life is divided by."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from typing import Any

from actors.server.embedded import find_redis_server
from actors.storage.scripts import lua_dir

from .probes import script_instructions as si

# label -> (add_batch, batch, due_order). callgrind runs Redis some 50 times
# slower, so the sizes are small; the counts are per job and steady from a few hundred jobs on.
SHAPES = {
    "batched": (200, 100, "same"),
    "one per call": (1, 1, "ascending"),
}
JOBS = {"long": 5_000, "full": 1_000, "quick": 300, "tiny": 100}
NOOP_CALLS = {"long": 2_000, "full": 1_000, "quick": 300, "tiny": 100}


def missing() -> str | None:
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (Debian's valgrind package)"
    return None


def measure(mode: str) -> dict[str, Any]:
    """Instructions per job of each phase for each shape, and per empty call; or why not."""
    why = missing()
    if why is not None:
        return {"skipped": why}
    redis_server = find_redis_server()
    jobs = JOBS[mode]
    noop = si.count_noop(NOOP_CALLS[mode], redis_server)
    shapes = {}
    for label, (add_batch, batch, due_order) in SHAPES.items():
        # One job per call is as many calls as jobs: a third of the jobs keeps it as short.
        shape_jobs = jobs if batch > 1 else max(100, jobs // 3)
        counted = si.count(lua_dir(), label, shape_jobs, add_batch, batch, redis_server, due_order)
        shapes[label] = {
            **asdict(counted),
            "add_batch": add_batch,
            "batch": batch,
            "due_order": due_order,
            "life": round(counted.total),
            "life_in_noop_calls": round(counted.total / noop, 2),
        }
    return {"noop_call": round(noop), "shapes": shapes, "command": command(mode)}


def command(mode: str) -> str:
    add_batch, batch, _ = SHAPES["batched"]
    return (
        f"python -m simulations.bench probe script_instructions --jobs {JOBS[mode]} "
        f"--add-batch {add_batch} --batch {batch}"
    )
