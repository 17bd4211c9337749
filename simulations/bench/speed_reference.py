"""A fixed piece of work timed before each system and at the end of a run: the machine's speed.

A full run takes about two hours on a shared virtual machine, and the machine's speed can move in
that time (session 14's run: every system's figures fell in its middle, and its last section
matched the previous run's). The load average cannot show that: a slower host core is not load.
So the run times the same work again and again, and the page shows how far its time moved:
- on the client core, a pure-Python loop in the runner's own (pinned) process;
- on the Redis core, a Lua loop EVALed on a fresh private redis-server pinned there.

Each is the best of a few rounds, so a single preemption does not count as a slower machine.
Neither depends on redelay's code, so two runs' references compare across commits too.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .server import BenchServer

ROUNDS = 5
# How much slower than the host of the page's run a host may be before a full run refuses to
# rewrite the page: on 2026-12-01 a host 2.9 times slower (client 145-151 ms against 47-53)
# delivered half the jobs/s and three times the lateness p99 in the first scenarios, so its page
# would have failed targets the code meets, on the host's speed alone.
SLOW_HOST_RATIO = 1.5
CLIENT_LOOP = 300_000  # about 55 ms of CPython on the bench machine
# About 35 ms of Redis's Lua interpreter; a script's own loop, so no command or reply is timed.
REDIS_LOOP_SCRIPT = "local s = 0 for i = 1, 4000000 do s = s + i % 7 end return s"


def _best_ms(work: Callable[[], object], rounds: int) -> float:
    """The shortest of ``rounds`` wall times of ``work()``, in ms."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        best = min(best, (time.perf_counter() - started) * 1000)
    return best


def _client_work() -> None:
    """Integer arithmetic, a dict and a list: what the runners and agents spend their time on."""
    seen: dict[int, int] = {}
    order: list[int] = []
    for n in range(CLIENT_LOOP):
        key = (n * 7919) % 1021
        seen[key] = seen.get(key, 0) + n
        order.append(key)
    order.sort()


def client_reference_ms(rounds: int = ROUNDS) -> float:
    """Best wall time, in ms, of a fixed CPython loop in this process."""
    return _best_ms(_client_work, rounds)


def redis_reference_ms(workdir: Path, rounds: int = ROUNDS) -> float:
    """Best wall time, in ms, of a fixed Lua loop on a fresh redis-server on the Redis core."""
    directory = workdir / "speed-reference"
    directory.mkdir(parents=True, exist_ok=True)
    server = BenchServer(directory)
    try:
        return _best_ms(lambda: server.client.eval(REDIS_LOOP_SCRIPT, 0), rounds)
    finally:
        server.stop()


def measure(workdir: Path, before: str) -> dict[str, Any]:
    """One reference point, labelled with what runs next (a system's name, or "end")."""
    return {
        "before": before,
        "client_ms": round(client_reference_ms(), 2),
        "redis_ms": round(redis_reference_ms(workdir), 2),
    }


def spread(points: list[dict[str, Any]], side: str) -> tuple[float, float] | None:
    """(fastest, slowest) of one side's times ("client_ms" or "redis_ms"); None without points."""
    times = [float(p[side]) for p in points if p.get(side)]
    if not times:
        return None
    return min(times), max(times)


def medians(run: dict[str, Any]) -> dict[str, float]:
    """Side ("client_ms", "redis_ms") -> the median of a run's (its JSON's) reference points."""
    points = run.get("load", {}).get("speed_reference", [])
    found = {}
    for side in ("client_ms", "redis_ms"):
        times = [float(p[side]) for p in points if p.get(side)]
        if times:
            found[side] = statistics.median(times)
    return found


def slower_by(point: dict[str, Any], previous: dict[str, Any]) -> float | None:
    """How many times slower ``point`` is than the median reference of ``previous`` (a run's
    JSON), the slower side of the two; None when ``previous`` holds no reference."""
    ratios = [float(point[side]) / m for side, m in medians(previous).items() if point.get(side)]
    return max(ratios) if ratios else None


def page_over_ratio(
    previous_json: Path, ratio_of: Callable[[dict[str, Any]], float | None]
) -> tuple[dict[str, Any], float] | None:
    """(the page's run JSON, ratio) when ``ratio_of`` it is over SLOW_HOST_RATIO; None when it is
    not, cannot be told, or there is no page to keep."""
    if not previous_json.is_file():
        return None
    previous = json.loads(previous_json.read_text())
    ratio = ratio_of(previous)
    if ratio is None or ratio <= SLOW_HOST_RATIO:
        return None
    return previous, ratio


def slow_host_refusal(point: dict[str, Any], previous_json: Path) -> str | None:
    """Why a full run on this host should not rewrite ``previous_json``'s page, or None: it is
    over SLOW_HOST_RATIO times slower than the host that made it (or there is nothing to keep)."""
    over = page_over_ratio(previous_json, lambda previous: slower_by(point, previous))
    if over is None:
        return None
    previous, ratio = over
    old = medians(previous)
    return (
        f"this host is {ratio:.1f} times slower than the one that made {previous_json.name} "
        f"({previous.get('generated_at', 'an earlier run')}): speed reference client "
        f"{point['client_ms']} ms against {old['client_ms']:.1f}, "
        f"Redis {point['redis_ms']} ms against {old['redis_ms']:.1f}. "
        "Its page would judge the targets on the host's speed, not the code's. Run on a host "
        "nearer that speed, or pass --slow-host to write the page anyway."
    )


# What a scenario's run costs per job on each core (a record's fields), compared by
# costly_run_refusal: the references above time loops that fit a core's caches, and on
# 2026-12-02 a host they put at 1.2-1.3 times the page's ran the same code's (5431f10's)
# immediate scenario at 1.6-1.9 times the page's CPU per job on both cores, and delivered half.
COST_FIELDS = ("client_cpu_ms_per_1k_jobs", "redis_cpu_ms_per_1k_jobs")


def same_run(record: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any] | None:
    """The page's record of ``record``'s system and scenario, or None."""
    wanted = (record["system"], record["scenario"])
    found = (
        r for r in previous.get("records", []) if (r.get("system"), r.get("scenario")) == wanted
    )
    return next(found, None)


def costlier_by(record: dict[str, Any], previous: dict[str, Any]) -> float | None:
    """How many times the CPU per job of the page's run of the same system and scenario
    ``record``'s costs, the costlier core of the two; None when the page has no such run."""
    old = same_run(record, previous)
    if old is None:
        return None
    ratios = [
        float(record[field]) / float(old[field])
        for field in COST_FIELDS
        if record.get(field) and old.get(field)
    ]
    return max(ratios) if ratios else None


def costly_run_refusal(record: dict[str, Any], previous_json: Path) -> str | None:
    """Why a full run should stop after ``record`` and not rewrite ``previous_json``'s page, or
    None: the run cost over SLOW_HOST_RATIO times the page's CPU per job. A slower host, or code
    that costs more per job than the page's: either way the page would not compare like with
    like, and the run says which numbers to compare side by side."""
    over = page_over_ratio(previous_json, lambda previous: costlier_by(record, previous))
    if over is None:
        return None
    previous, ratio = over
    old = same_run(record, previous) or {}
    spent = ", ".join(
        f"{field} {record[field]} against {old[field]}" for field in COST_FIELDS if old.get(field)
    )
    return (
        f"{record['system']}'s {record['scenario']} run cost {ratio:.1f} times the CPU per job "
        f"of {previous_json.name}'s ({previous.get('generated_at', 'an earlier run')}): "
        f"{spent}. Either this host is slower than the speed reference shows, or the code costs "
        f"more per job; run the page's commit ({previous.get('code', {}).get('commit', '?')}) "
        "here side by side to tell which, or pass --slow-host to write the page anyway."
    )
