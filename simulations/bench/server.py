"""A private redis-server per run, pinned to its own core, and what we read from it.

Redis runs on core 1 and every client (runner, producers, workers) on core 0, the split
``taskset`` would make; we call sched_setaffinity, the system call taskset uses, on every thread
of the server. CPU time is read from /proc, so no extra dependency is needed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from actors.server.embedded import RedisProcess

REDIS_CORE = 1
CLIENT_CORE = 0
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def can_pin() -> bool:
    return hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2


def pinning_text(pinned: bool, clients: str = "clients") -> str:
    """How a run was pinned, in the words its report prints and its JSON keeps."""
    if pinned:
        return f"Redis pinned to core {REDIS_CORE}, {clients} to core {CLIENT_CORE}"
    return "not pinned" if can_pin() else "not pinned (fewer than 2 cores)"


def pin_clients() -> None:
    """Pins this process (and so every child it starts later) to the client core."""
    if can_pin():
        os.sched_setaffinity(0, {CLIENT_CORE})


def pin_process(pid: int, core: int) -> None:
    pin_threads(pid, core)


def pin_threads(pid: int, core: int, named: str | None = None) -> int:
    """Pins the threads of ``pid`` to ``core``, or only those whose name (/proc/<pid>/task/
    <tid>/comm) is ``named``; returns how many. Redis names its background threads
    (``bio_lazy_free`` frees what UNLINK dropped), as its ``bio_cpulist`` setting would place
    them."""
    if not can_pin():
        return 0
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if named is None or (task / "comm").read_text().strip() == named:
                os.sched_setaffinity(int(task.name), {core})
                pinned += 1
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pinned


def cpu_ms_of(pid: int) -> float:
    """User plus system CPU of one process (all its threads), from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    # After the command name: state is field 3 of stat(5); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) * 1000 / _TICKS_PER_S


def tree_pids(root: int) -> list[int]:
    """root and all its descendants (a Celery or RQ worker may run helper processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu_ms(root: int) -> float:
    return sum(cpu_ms_of(pid) for pid in tree_pids(root))


@dataclass(slots=True)
class ServerStats:
    commands: int  # total_commands_processed: every command, including those inside scripts
    calls: dict[str, int]  # per command, from INFO commandstats
    used_memory: int
    scripts_memory: int
    cpu_ms: float


@dataclass
class BenchServer:
    """A RedisProcess on a Unix socket, pinned, plus a client for the runner's own reads: the
    one way the bench and its probes start a private redis-server (a probe that measures a
    server of its own making says why in its docstring).

    ``own_commands`` counts the commands the runner itself sends, so they can be subtracted.
    ``pin`` False leaves the server where the kernel puts it (a probe's ``--no-pin``).
    """

    directory: Path
    pin: bool = True
    process: RedisProcess = field(init=False)
    client: redis.Redis = field(init=False)
    own_commands: int = 0

    def __post_init__(self) -> None:
        self.process = RedisProcess(self.directory).start()
        assert self.process.process is not None
        self.pid = self.process.process.pid
        if self.pin:
            pin_process(self.pid, REDIS_CORE)
        self.client = self.process.client()

    def __enter__(self) -> BenchServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def socket_path(self) -> str:
        return self.process.socket_path

    @property
    def url(self) -> str:
        return self.process.url

    def stats(self) -> ServerStats:
        info = self._info("all")
        calls = {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in info.items()
            if name.startswith("cmdstat_") and isinstance(value, dict)
        }
        return ServerStats(
            commands=int(info["total_commands_processed"]),
            calls=calls,
            used_memory=int(info["used_memory"]),
            scripts_memory=int(info.get("used_memory_scripts_eval", 0)),
            cpu_ms=cpu_ms_of(self.pid),
        )

    def settled_stats(self, timeout_s: float = 30.0) -> ServerStats:
        """stats() once no lazily freed objects are pending, so used_memory is final."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = self._info("memory")
            pending = int(info.get("lazyfree_pending_objects", 0))
            if pending == 0 or time.monotonic() > deadline:
                return self.stats()
            time.sleep(0.05)

    def memory_usage(self, key: str) -> int:
        """MEMORY USAGE with every element sampled (exact, O(n))."""
        self.own_commands += 1
        usage: Any = self.client.memory_usage(key, samples=0)  # redis-py's reply types vary
        return int(usage or 0)

    def version(self) -> str:
        return str(self._info("server")["redis_version"])

    def _info(self, section: str) -> dict[str, Any]:
        self.own_commands += 1
        info: Any = self.client.info(section)  # typed as maybe-awaitable in some redis-py versions
        return dict(info)

    def stop(self) -> None:
        self.client.close()
        self.process.kill()
