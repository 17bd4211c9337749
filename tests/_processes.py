"""Worker and producer subprocesses for the integration tests (tests/workers/*, run with -m)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from _wait import WAIT_S

from actors.storage.calls import decoded as _s

ROOT = Path(__file__).resolve().parent.parent
START_S = WAIT_S  # importing redelay in a fresh interpreter on a loaded 2-core machine


class WorkerProcess:
    """``python -m tests.workers.delay_worker`` (or ``module``) with the given options; ``send``
    writes a line to its stdin."""

    def __init__(
        self, url: str, namespace: str, *options: str, module: str = "tests.workers.delay_worker"
    ) -> None:
        args = ["--url", url, "--namespace", namespace, *options]
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()
        self.pid = self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def expect(self, event: str, timeout_s: float = START_S) -> dict[str, Any]:
        try:
            message: dict[str, Any] = json.loads(self.lines.get(timeout=timeout_s))
        except queue.Empty:
            pytest.fail(f"worker {self.pid} did not report {event!r} within {timeout_s}s")
        assert message["event"] == event, message
        return message

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


def produce(url: str, namespace: str, job_id: str, delay_s: float) -> dict[str, Any]:
    """Adds one job from a producer-only process; returns what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.workers.produce", "--url", url, "--namespace", namespace,
         "--id", job_id, "--delay", str(delay_s)],
        cwd=ROOT, capture_output=True, text=True, timeout=START_S, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def deliveries(client: redis.Redis, namespace: str) -> list[tuple[str, int, int]]:
    """What the worker processes recorded: (job id, attempt, pid), in order."""
    found = []
    for raw in client.lrange(f"{namespace}:deliveries", 0, -1):
        job_id, attempt, pid = _s(raw).rsplit(":", 2)
        found.append((job_id, int(attempt), int(pid)))
    return found
