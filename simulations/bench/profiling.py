"""Where redelay's worker spends its time: py-spy attached to it during an immediate run.

py-spy samples the thread holding the GIL 1,000 times a second, from the worker's go to its end
(``--nonblocking``: the process is not paused, so the overhead is small). The raw output is one
line per distinct stack (outermost frame first) with a sample count; we sum it per function
(self: the innermost frame; total: anywhere on the stack) and per area (the innermost frame that
belongs to redis-py, pykka, redelay or the standard library's threading), and keep the top
entries for the docs.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runner import RunContext, run_scenario
from .scenarios import Scenario
from .systems import BY_NAME

SAMPLE_RATE_HZ = 1_000  # as passed to py-spy by runner.attach_profiler
_FRAME_RE = re.compile(r"^(?P<function>.*) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")

# py-spy prints paths relative to their sys.path entry ("redis/client.py",
# "actors/runtime/pool.py").
AREAS = (
    ("redis-py (commands, socket, parsing)", ("redis/",)),
    ("pykka (mailboxes, messages)", ("pykka/",)),
    ("redelay store and scripts", ("actors/storage/",)),
    ("redelay actors", ("actors/",)),
    ("benchmark handler", ("simulations/bench/",)),
    ("msgpack and JSON", ("msgpack/", "orjson", "json/")),
    ("threads and queues (stdlib)", ("threading.py", "queue.py", "concurrent/futures")),
)


@dataclass
class Profile:
    samples: int = 0
    self_by_function: Counter[str] = field(default_factory=Counter)
    callers: Counter[tuple[str, str]] = field(default_factory=Counter)
    total_by_function: Counter[str] = field(default_factory=Counter)
    by_area: Counter[str] = field(default_factory=Counter)

    def top(self, counter: Counter[str], count: int) -> list[dict[str, Any]]:
        return [
            {"name": name, "samples": n, "percent": round(100 * n / max(1, self.samples), 1)}
            for name, n in counter.most_common(count)
        ]

    def caller_of(self, name: str) -> str | None:
        """The most frequent caller of a function, over the samples where it was innermost."""
        found = [(n, caller) for (callee, caller), n in self.callers.items() if callee == name]
        return max(found)[1] if found else None

    def to_json(self, count: int = 15) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "self": [
                {**entry, "via": self.caller_of(entry["name"])}
                for entry in self.top(self.self_by_function, count)
            ],
            "total": self.top(self.total_by_function, count),
            "areas": self.top(self.by_area, len(AREAS) + 1),
        }


def _short(frame: str) -> tuple[str, str]:
    """(function label "file:function", file path) of one py-spy frame."""
    match = _FRAME_RE.match(frame.strip())
    if match is None:
        return frame.strip(), ""
    path = match["file"]
    short_path = re.sub(r"^.*/(site-packages|lib/python3\.\d+)/", "", path)
    short_path = re.sub(r"^.*/work/[^/]+/", "", short_path)
    return f"{short_path}:{match['function']}", path


def _area(paths: list[str]) -> str:
    """The area of the innermost frame that falls in one (so time inside redis-py counts
    as redis-py even when redelay called it)."""
    for path in reversed(paths):
        for name, needles in AREAS:
            if any(_match_path(path, needle) for needle in needles):
                return name
    return "other"


def parse_raw(text: str) -> Profile:
    profile = Profile()
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";") if frame]
        if not frames:
            continue
        profile.samples += count
        profile.self_by_function[frames[-1][0]] += count
        if len(frames) > 1:
            profile.callers[(frames[-1][0], frames[-2][0])] += count
        for label in {label for label, _ in frames}:
            profile.total_by_function[label] += count
        profile.by_area[_area([path for _, path in frames])] += count
    return profile


def py_spy_missing() -> str | None:
    if shutil.which("py-spy") or Path(sys.executable).with_name("py-spy").exists():
        return None
    return "py-spy is not installed (pip install -e '.[bench]')"


def _match_path(path: str, needle: str) -> bool:
    return path.startswith(needle) or f"/{needle}" in path


def profile_redelay(context: RunContext, jobs: int, concurrency: int) -> dict[str, Any]:
    """Runs redelay's immediate scenario with the worker under py-spy; returns the summary."""
    missing = py_spy_missing()
    if missing is not None:
        return {"skipped": missing, "concurrency": concurrency}
    workdir = context.workdir / f"profile-{concurrency}"
    workdir.mkdir(parents=True, exist_ok=True)
    raw_path = workdir / "redelay-profile.txt"
    env = {**context.extra_env, "BENCH_REDELAY_CONCURRENCY": str(concurrency)}
    profiled = RunContext(
        workdir, context.seed, profile_to=raw_path, extra_env=env, code_dir=context.code_dir
    )
    scenario = Scenario("profile-immediate", "immediate", jobs, "batch", deliver=True, wait_s=300)
    record = run_scenario(BY_NAME["redelay"], scenario, profiled)
    if not raw_path.exists():
        return {"skipped": "py-spy wrote no profile (ptrace not permitted here?)"}
    summary = parse_raw(raw_path.read_text()).to_json()
    summary["jobs"] = jobs
    summary["concurrency"] = concurrency
    rate = record.get("delivered_jobs_per_s")
    summary["delivered_jobs_per_s_under_profiler"] = rate
    if rate:
        # Samples taken vs. samples possible while delivering (the GIL thread is sampled only
        # when some thread holds the GIL).
        possible = SAMPLE_RATE_HZ * jobs / rate
        summary["gil_busy_percent"] = round(min(100.0, 100 * summary["samples"] / possible), 1)
    return summary
