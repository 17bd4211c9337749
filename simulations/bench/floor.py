"""The floor every figure is held to, measured in the same run: a loop of no-op EVALSHA calls.

A job's life in redelay is a few script calls, so the least any such system can cost is what an
empty script call costs on this host, now: on the path redelay sends its calls by (a connection
held out of redis-py's pool, actors/storage/held_connections.py) and the same kind of socket (a
Unix socket to a private, pinned redis-server), one call at a time. The loop runs in
the runner's own process, pinned to the client core as the agents are. Client CPU is this
process's; Redis CPU is the server's own count (INFO's used_cpu_user + used_cpu_sys), so a figure
divided by the floor says how many empty calls' worth a job cost, whatever the host's speed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from actors.storage.held_connections import HeldConnections

from .server import BenchServer

NOOP_SCRIPT = "return 0"
WARM_CALLS = 200  # the first calls load the script and grow redis-py's buffers


def _redis_cpu_s(server: BenchServer) -> float:
    info = server.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(directory: Path, calls: int) -> dict[str, Any]:
    """One floor point: ``calls`` no-op EVALSHA calls on a fresh server, one at a time."""
    server = BenchServer(directory)
    try:
        client = server.process.client()
        sha = str(client.script_load(NOOP_SCRIPT))
        held = HeldConnections(client)
        for _ in range(WARM_CALLS):
            held.call("EVALSHA", sha, 0)
        redis_before = _redis_cpu_s(server)
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        for _ in range(calls):
            held.call("EVALSHA", sha, 0)
        cpu_s, wall_s = time.process_time() - cpu_before, time.perf_counter() - wall_before
        redis_s = _redis_cpu_s(server) - redis_before
        held.close()
        client.close()
    finally:
        server.stop()
    return {
        "calls": calls,
        "calls_per_s": round(calls / wall_s, 1),
        "client_us_per_call": round(cpu_s * 1e6 / calls, 2),
        "redis_us_per_call": round(redis_s * 1e6 / calls, 2),
    }
