"""Worker processes of the chaos simulator: started, signalled, restarted, reaped.

A worker is ``redelay worker simulations.crash.chaos_worker:make_queue`` (``python -m actors.cli``,
so it runs on this interpreter), or ``python -m simulations.crash.chaos_worker`` when the CLI has no
worker command. Installed from the wheel the package is ``actors.simulate``, not
``simulations``: the module names are this package's own. Each slot keeps one log file, appended
to by every process started in it.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# The directory on sys.path that holds this package (simulations/ in a checkout,
# actors/simulate/ in site-packages): workers import the worker module from there.
_PACKAGE_ROOT = Path(__file__).resolve().parents[(__package__ or "simulations").count(".") + 1]
_WORKER_MODULE = f"{__package__ or 'simulations'}.chaos_worker"


def worker_command(grace_s: float) -> list[str]:
    if importlib.util.find_spec("actors.cli.worker") is not None:
        return [
            sys.executable,
            "-m",
            "actors.cli",
            "worker",
            f"{_WORKER_MODULE}:make_queue",
            "--grace",
            str(grace_s),
            "--log-level",
            "WARNING",
        ]
    return [sys.executable, "-m", _WORKER_MODULE]


@dataclass
class Slot:
    name: str
    process: subprocess.Popen[bytes] | None = None
    generation: int = 0
    restart_at: float | None = None  # monotonic time of a planned restart
    expected_exit: bool = False  # we signalled it; its exit is no surprise
    started_at: float = 0.0  # monotonic time its current process started
    stopping: list[subprocess.Popen[bytes]] = field(default_factory=list)


class Workers:
    def __init__(
        self,
        count: int,
        env: dict[str, str],
        log_dir: Path,
        grace_s: float,
        slot_env: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """``slot_env``: what differs per slot (its own way to Redis, its own clock)."""
        self.env = {
            **os.environ,
            **env,
            # The user's --app module is found from the directory the run started in, as it
            # was in this process (workers run in _PACKAGE_ROOT).
            "PYTHONPATH": os.pathsep.join(
                p for p in [str(_PACKAGE_ROOT), os.getcwd(), os.environ.get("PYTHONPATH", "")] if p
            ),
            "REDELAY_SIM_GRACE": str(grace_s),
        }
        self.command = worker_command(grace_s)
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.slots = {f"w{n + 1}": Slot(f"w{n + 1}") for n in range(count)}
        self.slot_env = slot_env or {}
        self.unexpected_exits = 0

    def start(self, name: str) -> None:
        slot = self.slots[name]
        slot.generation += 1
        slot.restart_at = None
        slot.expected_exit = False
        slot.started_at = time.monotonic()
        env = {
            **self.env,
            **self.slot_env.get(name, {}),
            "REDELAY_SIM_WORKER": f"{name}.{slot.generation}",
        }
        with (self.log_dir / f"{name}.log").open("ab") as log:
            log.write(f"--- {name}.{slot.generation} starts\n".encode())
            log.flush()
            slot.process = subprocess.Popen(
                self.command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(_PACKAGE_ROOT),
            )

    def alive(self) -> list[str]:
        return [n for n, s in sorted(self.slots.items()) if _running(s.process)]

    def running_for(self, at_least_s: float) -> list[str]:
        """The slots whose process has been running at least this long."""
        since = time.monotonic() - at_least_s
        return [n for n in self.alive() if self.slots[n].started_at <= since]

    def consumer(self, name: str) -> str | None:
        """The consumer name the slot's current process leases with (see chaos_worker)."""
        slot = self.slots[name]
        if slot.process is None:
            return None
        return f"{name}.{slot.generation}:{slot.process.pid}"

    def signal(self, name: str, signum: int, restart_in_s: float) -> int | None:
        """Sends ``signum`` to the slot's process and plans a new one. Returns the pid."""
        slot = self.slots[name]
        process = slot.process
        if process is None or process.poll() is not None:
            return None
        slot.expected_exit = True
        process.send_signal(signum)
        slot.stopping.append(process)
        slot.process = None
        slot.restart_at = time.monotonic() + restart_in_s
        return process.pid

    def tend(self) -> None:
        """Restarts what is due, and notices workers that exited by themselves (restarted in a
        second: a worker that cannot reach Redis at start exits, and that is no bug)."""
        now = time.monotonic()
        for name, slot in self.slots.items():
            slot.stopping = [p for p in slot.stopping if p.poll() is None]
            if slot.process is not None and slot.process.poll() is not None:
                self.unexpected_exits += 1
                slot.process = None
                slot.restart_at = now + 1.0
            if slot.process is None and slot.restart_at is not None and now >= slot.restart_at:
                self.start(name)

    def start_missing(self) -> None:
        for name, slot in self.slots.items():
            if slot.process is None or slot.process.poll() is not None:
                self.start(name)

    def stop_all(self, timeout_s: float) -> None:
        """SIGTERM everything, then SIGKILL what is still running after ``timeout_s``."""
        processes = [s.process for s in self.slots.values() if _running(s.process)]
        processes += [p for s in self.slots.values() for p in s.stopping if p.poll() is None]
        for p in processes:
            if p is not None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in processes:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for slot in self.slots.values():
            slot.process = None
            slot.stopping = []

    def kill_all(self) -> None:
        for slot in self.slots.values():
            for p in [slot.process, *slot.stopping]:
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)


def _running(process: subprocess.Popen[bytes] | None) -> bool:
    return process is not None and process.poll() is None
