"""Measurements outside the benchmark's table, each run by hand on the bench's harness:

    python -m simulations.bench probe                      # the list
    python -m simulations.bench probe NAME [OPTIONS]       # one probe, its report on stdout
    python -m simulations.bench probe NAME --json [OPTIONS]
    python -m simulations.bench probe NAME --json-out PATH [OPTIONS]

One argument shape: the probe's name, its own options (``--help`` lists them), and ``--json`` (one
JSON object on stdout) or ``--json-out PATH`` (the same object, written to PATH instead). One JSON
shape: ``{"probe", "argv", "generated_at", "machine", "code", "result"}``, the result being the
probe's own. One way to a private redis-server: the bench's ``BenchServer``
(simulations/bench/server.py, a Unix socket, pinned to the Redis core), except where the probe's
subject is another setup (full_redis: every Redis binary; failover_loss: Sentinel; shard_bench: a
cluster; script_instructions: Redis under callgrind)."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# name -> what it measures. Each is a module here with ``main(argv) -> int`` and a ``--json``.
PROBES = {
    "dashboard_speed": "how fast the dashboard answers on a big namespace",
    "failover_loss": "what a Sentinel failover loses, with and without WAIT",
    "full_redis": "how a full Redis drains itself, on every Redis binary found",
    "history_speed": "one job's history on long audit streams",
    "lateness_hops": "where a delayed job's lateness goes, hop by hop",
    "limit_accuracy": "rate and in-flight limits shared by worker processes",
    "measure_memory": "Redis memory per pending job, by key",
    "pending_scale": "delivery and lateness with many delayed jobs pending (bench-long)",
    "pending_store_loop": "Redis CPU per job with many pending, on the Store alone",
    "producer_speed": "jobs/s of each producer, with each side's CPU (bench-long)",
    "script_instructions": "Redis instructions per job in each script, under callgrind",
    "shard_bench": "delivery and lateness with 1, 3 and 6 shards on a Redis Cluster",
    "worker_scale": "1, 2, 4 worker processes on one Redis (bench-long)",
}
USAGE = "python -m simulations.bench probe NAME [--json | --json-out PATH] [OPTIONS]"


def listing() -> str:
    width = max(map(len, PROBES))
    return "\n".join([USAGE, ""] + [f"  {name:<{width}}  {what}" for name, what in PROBES.items()])


def _split_json_out(argv: list[str]) -> tuple[list[str], Path | None]:
    """The probe's own options, and the path of ``--json-out PATH`` (or ``--json-out=PATH``)."""
    rest: list[str] = []
    found: Path | None = None
    items = iter(argv)
    for item in items:
        if item == "--json-out":
            value = next(items, None)
            if value is None:
                raise SystemExit("probe: --json-out needs a PATH")
            found = Path(value)
        elif item.startswith("--json-out="):
            found = Path(item.split("=", 1)[1])
        else:
            rest.append(item)
    return rest, found


def last_json(text: str) -> Any:
    """The JSON a probe printed with --json: from the first line on which the rest parses (some
    print progress lines first, some indent their JSON over many lines); None if none does."""
    lines = text.strip().splitlines()
    for start in range(len(lines)):
        with contextlib.suppress(ValueError):
            return json.loads("\n".join(lines[start:]))
    return None


def envelope(name: str, argv: Sequence[str], result: Any) -> dict[str, Any]:
    """The one JSON shape every probe's output is written in."""
    from ..report import machine
    from ..runner import _git

    return {
        "probe": name,
        "argv": list(argv),
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "code": {"commit": _git("rev-parse", "--short", "HEAD")},
        "result": result,
    }


def run(argv: Sequence[str]) -> int:
    """``python -m simulations.bench probe ...``: runs one probe; its exit status."""
    if not argv or argv[0] in ("-h", "--help"):
        print(listing())
        return 0 if argv else 2
    name, options = argv[0], list(argv[1:])
    if name not in PROBES:
        print(f"probe: unknown probe {name!r}\n\n{listing()}", file=sys.stderr)
        return 2
    main = importlib.import_module(f"{__name__}.{name}").main
    options, json_out = _split_json_out(options)
    as_json = "--json" in options
    if not as_json and json_out is None:
        return int(main(options) or 0)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        status = int(main(options if as_json else [*options, "--json"]) or 0)
    result = last_json(captured.getvalue())
    document = json.dumps(envelope(name, options, result))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(document + "\n")
    if as_json:
        print(document)
    else:
        print(f"probe {name}: wrote {json_out} (exit {status})")
    return status
