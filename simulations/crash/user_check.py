"""The user's own invariants: ``--check MODULE:FUNC`` names a function that reads what the user's
handlers recorded during the run and raises when one of their promises broke ("a refund is never
sent twice"). redelay's checkers prove the queue kept its promises; this proves the handlers kept
theirs under at-least-once delivery.

Handlers record into the directory named by ``REDELAY_SIM_DIR`` (set before the app is imported,
inherited by the chaos workers, kept with the run's artefacts). After the run the driver calls the
function once; whatever it raises is the violation (exit 18 ``user_check``). Job ids named in the
message tie it to jobs of the ledger, and the report lists those jobs' runs and the faults that
fired around them: what to read first when reproducing with the printed seed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._user_app import resolve
from .checkers import Failure, Violation
from .ledger import FaultRow, Key, LedgerData, RunRow

APP_DIR_ENV = "REDELAY_SIM_DIR"
# A message naming more jobs than this is about the run, not about a few jobs.
JOBS_SHOWN = 5
FAULTS_SHOWN = 20

CheckFn = Callable[[], object]


def prepare_app_dir(path: Path) -> Path:
    """An empty directory for the handlers' records, announced in ``REDELAY_SIM_DIR`` (so every
    process started from here on sees it). Emptied first: a seed's artefacts are rewritten."""
    path = path.resolve()  # chaos workers run in another directory
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ[APP_DIR_ENV] = str(path)
    return path


def load_check(target: str) -> CheckFn:
    fn = resolve(target, "--check")
    if not callable(fn):
        raise SystemExit(f"--check: {target} is a {type(fn).__name__}, not a function")
    check: CheckFn = fn
    return check


@dataclass(frozen=True)
class UserCheckResult:
    target: str
    error: str | None  # "ExcType: message" when the check raised
    jobs: list[Key] = field(default_factory=list)  # the ledger's jobs the message names
    runs: list[RunRow] = field(default_factory=list)  # their runs
    faults: list[FaultRow] = field(default_factory=list)  # faults around those runs

    @property
    def passed(self) -> bool:
        return self.error is None

    def violations(self) -> list[Violation]:
        if self.error is None:
            return []
        key = self.jobs[0] if len(self.jobs) == 1 else None
        return [Violation(Failure.USER_CHECK, key, f"{self.target}: {self.error}")]

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.target,
            "result": "ok" if self.passed else "failed",
            "error": self.error,
            "jobs": ["/".join(k) for k in self.jobs],
            "runs": [
                {
                    "job": f"{r.topic}/{r.id}",
                    "attempt": r.attempt,
                    "worker": r.worker,
                    "started_ms": r.started_ms,
                    "ended_ms": r.ended_ms,
                    "outcome": r.outcome or "never_returned",
                }
                for r in self.runs
            ],
            "preceding_faults": [
                {"at_ms": f.at_ms, "kind": f.kind, "detail": f.detail} for f in self.faults
            ],
        }


def named_jobs(message: str, ledger: LedgerData) -> list[Key]:
    """The ledger's jobs whose id appears in ``message`` as a whole word."""
    found = []
    for key in sorted(ledger.jobs):
        if re.search(rf"(?<![\w-]){re.escape(key[1])}(?![\w-])", message):
            found.append(key)
    return found


def faults_around(runs: list[RunRow], ledger: LedgerData, window_ms: int) -> list[FaultRow]:
    """Faults from ``window_ms`` before the first of these runs to the end of the last: what
    could have made a handler run twice, or stop half-way."""
    if not runs:
        return []
    start = min(r.started_ms for r in runs) - window_ms
    end = max(r.ended_ms if r.ended_ms is not None else r.started_ms for r in runs)
    return [f for f in ledger.faults if start <= f.at_ms <= end][-FAULTS_SHOWN:]


def run_check(target: str, check: CheckFn, ledger: LedgerData, window_ms: int) -> UserCheckResult:
    """Calls the user's check once; any exception it raises is the finding."""
    try:
        check()
    except Exception as exc:  # the user's code: whatever it raises is a violation
        error = f"{type(exc).__name__}: {exc}"
    else:
        return UserCheckResult(target, None)
    jobs = named_jobs(str(error), ledger)
    if len(jobs) > JOBS_SHOWN:
        jobs = jobs[:JOBS_SHOWN]
    wanted = set(jobs)
    runs = [r for r in ledger.runs if (r.topic, r.id) in wanted]
    return UserCheckResult(target, error, jobs, runs, faults_around(runs, ledger, window_ms))


def describe(result: dict[str, Any]) -> list[str]:
    """The summary's lines about a failed check (``result`` is :meth:`UserCheckResult.as_dict`
    plus the run's ``start_ms``): times relative to the start, as the chart shows them."""
    start_ms: int | None = result.get("start_ms")

    def at(ms: int | None) -> str:
        if ms is None:
            return "-"
        return f"+{(ms - start_ms) / 1000:.3f}s" if start_ms is not None else str(ms)

    lines = [f"your check {result['check']} failed: {result['error']}"]
    if not result["jobs"]:
        lines.append(
            "  (name the job ids in the message to see their runs and the faults around them)"
        )
        return lines
    for run in result["runs"]:
        lines.append(
            f"  run {run['job']} attempt {run['attempt']} on {run['worker']}: started "
            f"{at(run['started_ms'])}, ended {at(run['ended_ms'])}, {run['outcome']}"
        )
    faults = result["preceding_faults"]
    lines.append(f"  faults around those runs: {len(faults)}")
    for fault in faults:
        lines.append(f"    {at(fault['at_ms'])} {fault['kind']} {fault['detail']}")
    return lines
