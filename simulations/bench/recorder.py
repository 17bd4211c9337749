"""What a worker writes down per delivery, and how it talks to the runner (files, not signals).

Peers install their own signal handlers (Celery uses SIGUSR1, arq and Dramatiq SIGTERM), so the
runner and a worker talk through files next to ``out_path``:
- the worker writes ``ready_path`` and waits for ``<out>.go``, so the runner can read the worker's
  CPU time before any job is consumed;
- ``<out>.expect`` holds a smaller number of jobs to wait for (a paced producer that could not
  keep up added fewer than planned);
- ``<out>.dump`` asks for the results so far (when not every job arrived in time);
- ``<out>.stop`` ends the process at once (so a profiler wrapped around it writes its output).
The dump watcher starts in the process that delivers the first job: Celery's prefork pool runs
handlers in a child process, whose recorder is a copy made at fork time.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .jobs import cpu_ms, now_ms

WATCH_INTERVAL_S = 0.02


def write_json_atomic(path: Path, data: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


class Recorder:
    """Called by a system's handler on every delivery (from any thread).

    Lateness is delivery time minus the due time in the body, in ms, on this machine's clock.
    """

    def __init__(self, expected: int, out_path: Path, ready_path: Path) -> None:
        self.expected = expected
        self.out_path = out_path
        self.ready_path = ready_path
        self._lock = threading.Lock()
        self._seen = bytearray(expected)
        self._lateness_ms: list[float] = []
        self.duplicates = 0
        self.unknown = 0
        self.first_ms: float | None = None
        self.last_ms: float | None = None
        self._written = False
        self._dump_watcher_pid: int | None = None

    def _sibling(self, suffix: str) -> Path:
        return self.out_path.with_name(self.out_path.name + suffix)

    def ready(self, **details: Any) -> None:
        """The worker is connected and about to consume: tell the runner, wait for its go."""
        write_json_atomic(
            self.ready_path, {"pid": os.getpid(), "cpu_ms": cpu_ms(), "at_ms": now_ms(), **details}
        )
        threading.Thread(target=self._watch_stop, name="bench-stop", daemon=True).start()
        go = self._sibling(".go")
        while not go.exists():
            time.sleep(WATCH_INTERVAL_S / 4)

    def delivered(self, body: Mapping[str, Any]) -> None:
        at_ms = now_ms()
        seq, due_ms = int(body["seq"]), int(body["due_ms"])
        with self._lock:
            if not 0 <= seq < len(self._seen):
                self.unknown += 1
                return
            if self._seen[seq]:
                self.duplicates += 1
                return
            self._seen[seq] = 1
            if self._dump_watcher_pid != os.getpid():
                self._dump_watcher_pid = os.getpid()
                threading.Thread(target=self._watch_dump, name="bench-dump", daemon=True).start()
            self._lateness_ms.append(at_ms - due_ms)
            if self.first_ms is None:
                self.first_ms = at_ms
            self.last_ms = at_ms
            done = len(self._lateness_ms) >= self.expected
        if done:
            self.write()

    def write(self) -> None:
        with self._lock:
            if self._written:
                return
            self._written = True
            data = {
                "delivered": len(self._lateness_ms),
                "expected": self.expected,
                "duplicates": self.duplicates,
                "unknown": self.unknown,
                "first_ms": self.first_ms,
                "last_ms": self.last_ms,
                "cpu_ms": cpu_ms(),
                "lateness_ms": [round(x, 3) for x in self._lateness_ms],
            }
        write_json_atomic(self.out_path, data)

    def _watch_dump(self) -> None:
        dump, expect = self._sibling(".dump"), self._sibling(".expect")
        while not dump.exists():
            if expect.exists() and self.expected > int(expect.read_text() or self.expected):
                with self._lock:
                    self.expected = int(expect.read_text())
                    done = len(self._lateness_ms) >= self.expected
                if done:
                    break
            time.sleep(WATCH_INTERVAL_S)
        self.write()

    def _watch_stop(self) -> None:
        stop = self._sibling(".stop")
        while not stop.exists():
            time.sleep(WATCH_INTERVAL_S)
        os._exit(0)  # not sys.exit: the peers' worker threads would keep the process alive
