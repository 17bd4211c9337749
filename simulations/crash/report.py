"""What a simulation prints: the settings at the start, a progress line on stderr while it runs,
and at the end a summary (text, or JSON with ``--json``) with the command that reproduces it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from . import user_check
from .checkers import EXIT_CODES, MEANINGS, Percentiles, Verdict, Violation
from .ledger import LedgerData

# How many violations the summary lists in full (all are counted).
VIOLATIONS_SHOWN = 20


class Progress:
    """One line on stderr, rewritten in place on a terminal, printed every ``every_s`` in logs."""

    def __init__(self, stream: TextIO | None = None, every_s: float = 1.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s if self.tty else max(every_s, 10.0)
        self._last = 0.0
        self._width = 0

    def update(self, line: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        if self.tty:
            padded = line.ljust(self._width)
            self._width = len(line)
            self.stream.write("\r" + padded)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0


def hms(ms: int) -> str:
    seconds = max(0, ms) // 1000
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _percentiles(p: Percentiles) -> dict[str, int | None]:
    return {"count": p.count, "p50": p.p50_ms, "p99": p.p99_ms, "max": p.max_ms}


def _violation(v: Violation) -> dict[str, str | None]:
    return {
        "check": v.failure.value,
        "job": None if v.key is None else "/".join(v.key),
        "message": v.message,
    }


def build(
    simulator: str,
    seed: int,
    reproduce: str,
    settings: dict[str, Any],
    verdict: Verdict,
    ledger: LedgerData,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The summary as one JSON-ready dict (``--json`` prints exactly this)."""
    outcomes = Counter(r.outcome or "never_returned" for r in ledger.runs)
    fault_counts = Counter(f.kind for f in ledger.faults)
    if outcomes.get("error"):
        fault_counts["handler_error"] = outcomes["error"]  # runs that raised (or asked to retry)
    failures = verdict.failures
    by_check = Counter(v.failure.value for v in verdict.violations)
    return {
        "simulator": simulator,
        "seed": seed,
        "result": failures[0].value if failures else "ok",
        "exit_code": verdict.exit_code,
        "meaning": MEANINGS[failures[0]] if failures else "every check passed",
        "reproduce": reproduce,
        "faults": dict(sorted(fault_counts.items())),
        "jobs": {
            "added": len(ledger.jobs),
            **{k: verdict.outcomes.get(k, 0) for k in ("acked", "dead", "cancelled")},
            "lost": verdict.outcomes.get("lost", 0),
            "stuck": verdict.outcomes.get("stuck", 0),
            "cancel_calls": len(ledger.cancels),
        },
        # A schedule's occurrences are jobs the simulator did not add: counted apart.
        "occurrences": verdict.occurrences,
        "runs": {
            "total": len(ledger.runs),
            "ok": outcomes.get("ok", 0),
            "error": outcomes.get("error", 0),
            "never_returned": outcomes.get("never_returned", 0),
        },
        "duplicates": {
            "count": verdict.duplicates.count,
            "by_cause": verdict.duplicates.by_cause,
            "jobs_run_ok_twice": verdict.duplicates.ran_ok_twice,
        },
        "lateness_ms": {
            "calm": _percentiles(verdict.lateness.calm),
            "after_fault": _percentiles(verdict.lateness.after_fault),
        },
        "violation_counts": dict(sorted(by_check.items())),
        "violations": [_violation(v) for v in verdict.violations[:VIOLATIONS_SHOWN]],
        "settings": settings,
        **extra,
    }


def text(summary: dict[str, Any]) -> str:
    """The summary for people."""
    lines = [f"== {summary['simulator']} simulation, seed {summary['seed']} =="]
    faults = summary["faults"]
    total = sum(faults.values())
    lines.append(
        f"faults injected: {total}"
        + (" (" + ", ".join(f"{k} {n}" for k, n in faults.items()) + ")" if faults else "")
    )
    j = summary["jobs"]
    lines.append(
        f"jobs: {j['added']} added; {j['acked']} acked, {j['dead']} dead, {j['cancelled']} "
        f"cancelled; {j['lost']} lost, {j['stuck']} stuck ({j['cancel_calls']} cancel calls)"
    )
    o = summary.get("occurrences") or {}
    if o.get("made"):
        lines.append(
            f"schedule occurrences: {o['made']} made; {o['acked']} acked, {o['dead']} dead, "
            f"{o['cancelled']} cancelled"
        )
    r = summary["runs"]
    lines.append(
        f"handler runs: {r['total']} (ok {r['ok']}, raised {r['error']}, never returned "
        f"{r['never_returned']})"
    )
    d = summary["duplicates"]
    causes = ", ".join(f"{k} {n}" for k, n in d["by_cause"].items())
    lines.append(f"duplicates: {d['count']}" + (f" ({causes})" if causes else ""))
    lines.append(f"jobs whose handler returned ok more than once: {d['jobs_run_ok_twice']}")
    for period in ("calm", "after_fault"):
        p = summary["lateness_ms"][period]
        label = "lateness calm:       " if period == "calm" else "lateness after fault:"
        if p["count"]:
            lines.append(
                f"{label} n={p['count']} p50={p['p50']}ms p99={p['p99']}ms max={p['max']}ms"
            )
        else:
            lines.append(f"{label} n=0")
    for key, value in summary.get("notes", {}).items():
        lines.append(f"{key}: {value}")
    if summary.get("user_check"):
        lines.append(
            f"your check {summary['user_check']['check']}: {summary['user_check']['result']}"
        )
    if summary["exit_code"] == 0:
        lines.append("RESULT: OK, every check passed")
    else:
        lines.append(
            f"RESULT: FAILED {summary['result']} (exit {summary['exit_code']}): "
            f"{summary['meaning']}"
        )
        for check, count in summary["violation_counts"].items():
            lines.append(f"  {check} (exit {EXIT_CODES_BY_NAME[check]}): {count} violations")
        for v in summary["violations"]:
            where = f"{v['job']}: " if v["job"] else ""
            lines.append(f"  - [{v['check']}] {where}{v['message']}")
        if summary.get("user_check") and summary["user_check"]["result"] != "ok":
            lines += ["  " + line for line in user_check.describe(summary["user_check"])[1:]]
        shown = len(summary["violations"])
        hidden = sum(summary["violation_counts"].values()) - shown
        if hidden > 0:
            lines.append(f"  ... and {hidden} more (the JSON summary lists the first {shown})")
        lines.append(f"reproduce with: {summary['reproduce']}")
    return "\n".join(lines)


EXIT_CODES_BY_NAME = {f.value: code for f, code in EXIT_CODES.items()}


def save(summary: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")


def save_audit(entries: list[tuple[str, dict[str, str]]], path: Path) -> None:
    """The audit stream as it was at the end, one JSON object per line (id first)."""
    with path.open("w") as out:
        for entry_id, fields in entries:
            out.write(json.dumps({"id": entry_id, **fields}) + "\n")


@contextlib.contextmanager
def user_prints_to_stderr() -> Iterator[TextIO]:
    """While a simulation runs, ``sys.stdout`` is stderr: a ``print()`` in the user's handlers,
    body function or check lands there, not in the summary (``--json`` promises one document
    on stdout). Yields the real stdout, for :func:`emit`."""
    summary_out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        yield summary_out


def emit(summary: dict[str, Any], as_json: bool, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    if as_json:
        out.write(json.dumps(summary, indent=2, sort_keys=False, default=str) + "\n")
    else:
        out.write(text(summary) + "\n")
    out.flush()
