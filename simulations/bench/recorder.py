"""What a worker writes down per delivery, and how it talks to the runner (files, not signals).

Peers install their own signal handlers (Celery uses SIGUSR1, arq and Dramatiq SIGTERM), so the
runner and a worker talk through files next to ``out_path``:
- the worker writes ``ready_path`` and waits for ``<out>.go``, so the runner can read the worker's
  CPU time before any job is consumed;
- ``<out>.expect`` holds a smaller number of jobs to wait for (a paced producer that could not
  keep up added fewer than planned);
- ``<out>.dump`` asks for the results so far (when not every job arrived in time);
- ``<out>.stop`` ends the process at once (so a profiler wrapped around it writes its output).
Celery's prefork pool and RQ's worker pool run handlers in child processes forked from the worker:
the recorder keeps its state in shared memory so every child counts into the same figures, a dump
watcher starts in every process that delivers, and a stop watcher in every process forked after
``ready()``.
"""

from __future__ import annotations

import json
import mmap
import multiprocessing
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


# Slots of the shared counters (doubles): what every process that delivers adds to.
_DELIVERED, _DUPLICATES, _UNKNOWN, _FIRST_MS, _LAST_MS, _EXPECTED, _WRITTEN = range(7)


class Recorder:
    """Called by a system's handler on every delivery (from any thread, and from any process
    forked from the worker after the recorder was made).

    Lateness is delivery time minus the due time in the body, in ms, on this machine's clock.
    Its state lives in anonymous shared memory (``mmap``, inherited across ``fork``) under a
    process-shared lock, so a system whose handlers run in several child processes (Celery's
    prefork pool, RQ's worker pool) counts every delivery once, in one place, whichever child
    made it.
    """

    def __init__(self, expected: int, out_path: Path, ready_path: Path) -> None:
        self.out_path = out_path
        self.ready_path = ready_path
        self._lock = multiprocessing.get_context("fork").Lock()
        self._seen_map = mmap.mmap(-1, max(expected, 1))
        self._lateness_map = mmap.mmap(-1, 8 * max(expected, 1))
        self._seq_map = mmap.mmap(-1, 8 * max(expected, 1))  # beside each lateness: whose
        self._counters_map = mmap.mmap(-1, 8 * 7)
        self._seen = memoryview(self._seen_map)
        self._lateness_ms = memoryview(self._lateness_map).cast("d")
        self._seqs = memoryview(self._seq_map).cast("q")
        self._counters = memoryview(self._counters_map).cast("d")
        self._capacity = expected
        self._counters[_EXPECTED] = expected
        self._dump_watcher_pid: int | None = None

    @property
    def expected(self) -> int:
        return int(self._counters[_EXPECTED])

    def _sibling(self, suffix: str) -> Path:
        return self.out_path.with_name(self.out_path.name + suffix)

    def ready(self, **details: Any) -> None:
        """The worker is connected and about to consume: tell the runner, wait for its go."""
        write_json_atomic(
            self.ready_path, {"pid": os.getpid(), "cpu_ms": cpu_ms(), "at_ms": now_ms(), **details}
        )
        self._start_stop_watcher()
        # A child forked later (a pool's worker process) ends on the same request: threads do
        # not survive fork, and a child left running would keep working after the runner moved on.
        os.register_at_fork(after_in_child=self._start_stop_watcher)
        go = self._sibling(".go")
        while not go.exists():
            time.sleep(WATCH_INTERVAL_S / 4)

    def delivered(self, body: Mapping[str, Any]) -> None:
        at_ms = now_ms()
        seq, due_ms = int(body["seq"]), int(body["due_ms"])
        counters = self._counters
        with self._lock:
            if not 0 <= seq < self._capacity:
                counters[_UNKNOWN] += 1
                return
            if self._seen[seq]:
                counters[_DUPLICATES] += 1
                return
            self._seen[seq] = 1
            if self._dump_watcher_pid != os.getpid():
                self._dump_watcher_pid = os.getpid()
                threading.Thread(target=self._watch_dump, name="bench-dump", daemon=True).start()
            count = int(counters[_DELIVERED])
            self._lateness_ms[count] = at_ms - due_ms
            self._seqs[count] = seq
            counters[_DELIVERED] = count + 1
            if count == 0:
                counters[_FIRST_MS] = at_ms
            counters[_LAST_MS] = at_ms
            done = count + 1 >= counters[_EXPECTED]
        if done:
            self.write()

    def write(self) -> None:
        counters = self._counters
        with self._lock:
            if counters[_WRITTEN]:
                return
            counters[_WRITTEN] = 1
            count = int(counters[_DELIVERED])
            data = {
                "delivered": count,
                "expected": self.expected,
                "duplicates": int(counters[_DUPLICATES]),
                "unknown": int(counters[_UNKNOWN]),
                "first_ms": counters[_FIRST_MS] if count else None,
                "last_ms": counters[_LAST_MS] if count else None,
                "cpu_ms": cpu_ms(),
                "lateness_ms": [round(x, 3) for x in self._lateness_ms[:count]],
                # Whose lateness each is (its job's seq), so a reader can join it with what
                # else it knows of the job: simulations.bench.probes.lateness_hops, with the audit
                # stream.
                "seqs": list(self._seqs[:count]),
            }
        write_json_atomic(self.out_path, data)

    def _watch_dump(self) -> None:
        dump, expect = self._sibling(".dump"), self._sibling(".expect")
        while not dump.exists() and not self._counters[_WRITTEN]:
            if expect.exists() and self.expected > int(expect.read_text() or self.expected):
                with self._lock:
                    self._counters[_EXPECTED] = int(expect.read_text())
                    done = self._counters[_DELIVERED] >= self._counters[_EXPECTED]
                if done:
                    break
            time.sleep(WATCH_INTERVAL_S)
        self.write()

    def _start_stop_watcher(self) -> None:
        threading.Thread(target=self._watch_stop, name="bench-stop", daemon=True).start()

    def _watch_stop(self) -> None:
        stop = self._sibling(".stop")
        while not stop.exists():
            time.sleep(WATCH_INTERVAL_S)
        os._exit(0)  # not sys.exit: the peers' worker threads would keep the process alive
