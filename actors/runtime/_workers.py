"""Where handlers run: a fixed set of daemon threads, and an asyncio loop for async handlers.

Not concurrent.futures.ThreadPoolExecutor: its threads are joined at interpreter exit, so one hung
handler would keep a stopped worker process alive forever. Ours are daemon threads, and a task
that has not started can be withdrawn (to release its job at shutdown).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
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
    """``size`` daemon threads that run submitted tasks in the order they came.

    Threads are woken one at a time: a submit wakes an idle thread only when no wake is already
    on its way, and a thread that takes a task while more wait wakes the next one before it runs
    its own. So a burst of short tasks is run by the few threads that are awake (each takes the
    next as soon as it is done), while slow ones still spread over every thread, one wake-up
    apart. Waking a thread per task cost a futex call and a context switch each, and the threads
    woken for nothing fought the pool's thread for the GIL just as Redis's reply came back.
    """

    def __init__(self, size: int, name: str) -> None:
        self._tasks: deque[Task] = deque()
        self._wakes: queue.SimpleQueue[None] = queue.SimpleQueue()
        # A wake is posted and no thread has taken it yet. Read and set without a lock: the
        # worst a race does is post a second wake (see _work for why none is ever missed).
        self._waking = False
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{n}", daemon=True)
            for n in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, run: Callable[[], None]) -> Task:
        task = Task(run)
        self._tasks.append(task)
        self._wake_one()
        return task

    def shutdown(self) -> None:
        """Idle threads exit; busy ones exit when their handler returns (they are daemons).
        Tasks submitted before run first, as they would have."""
        self._closed = True
        self._wakes.put(None)  # each thread that sees the close passes the wake on

    def _wake_one(self) -> None:
        if not self._waking:
            self._waking = True
            self._wakes.put(None)

    def _work(self) -> None:
        tasks = self._tasks
        while True:
            self._wakes.get()
            # Cleared before looking at the tasks: a submit that this look misses appended its
            # task after the clear, so it finds no wake on its way and posts one.
            self._waking = False
            while True:
                try:
                    task = tasks.popleft()
                except IndexError:
                    break
                if tasks:
                    self._wake_one()  # more are waiting: another thread runs the next
                if task.begin():
                    task.thread_id = threading.get_ident()
                    task.run()
            if self._closed:
                self._wakes.put(None)
                return


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
