"""Where handlers run: a fixed set of daemon threads, and an asyncio loop for async handlers.

Not concurrent.futures.ThreadPoolExecutor: its threads are joined at interpreter exit, so one hung
handler would keep a stopped worker process alive forever. Ours are daemon threads, and a task
that has not started can be withdrawn (to release its job at shutdown).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any


class Task:
    """A handler call waiting for a thread. Exactly one of ``begin`` (a thread takes it) and
    ``withdraw`` (the pool releases its job) wins: each pops the task's one claim, and
    ``list.pop`` is a single atomic step. Not a lock per task: one is made for every job, and
    allocating a lock cost more than the rest of the hand-off to a thread."""

    __slots__ = ("_claim", "run", "thread_id")

    def __init__(self, run: Callable[[], None]) -> None:
        self.run = run
        self._claim = [True]
        self.thread_id: int | None = None  # the thread running it, to show where a hung one is

    def begin(self) -> bool:
        try:
            return self._claim.pop()
        except IndexError:
            return False

    def withdraw(self) -> bool:
        """True when the task had not started and now never will."""
        try:
            return self._claim.pop()
        except IndexError:
            return False


class WorkerThreads:
    def __init__(self, size: int, name: str) -> None:
        self._queue: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{n}", daemon=True)
            for n in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, run: Callable[[], None]) -> Task:
        task = Task(run)
        self._queue.put(task)
        return task

    def shutdown(self) -> None:
        """Idle threads exit; busy ones exit when their handler returns (they are daemons)."""
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                return
            if task.begin():
                task.thread_id = threading.get_ident()
                task.run()


class EventLoopThread:
    """An asyncio event loop on a daemon thread, owned by one pool."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def shutdown(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
