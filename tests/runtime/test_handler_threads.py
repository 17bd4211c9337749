"""Handler threads (actors/runtime/_workers.py): a task runs once, or is withdrawn and never runs,
never both, however the pool's withdraw and a thread's begin interleave."""

from __future__ import annotations

import threading
from functools import partial

from actors.runtime._workers import Task, WorkerThreads

WAIT_S = 10.0


def test_a_task_begun_cannot_be_withdrawn_and_a_withdrawn_one_cannot_begin() -> None:
    begun, withdrawn = Task(lambda: None), Task(lambda: None)
    assert begun.begin() and not begun.withdraw() and not begun.begin()
    assert withdrawn.withdraw() and not withdrawn.begin() and not withdrawn.withdraw()


def test_begin_and_withdraw_racing_on_two_threads_have_exactly_one_winner() -> None:
    rounds = 2_000
    tasks = [Task(lambda: None) for _ in range(rounds)]
    won: dict[str, list[bool]] = {"begin": [], "withdraw": []}
    start = threading.Barrier(2)

    def claim(side: str) -> None:
        start.wait()
        call = Task.begin if side == "begin" else Task.withdraw
        won[side] = [call(task) for task in tasks]

    threads = [threading.Thread(target=claim, args=(side,)) for side in won]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert all(b != w for b, w in zip(won["begin"], won["withdraw"], strict=True))


def test_a_withdrawn_task_never_runs_and_the_rest_run_once() -> None:
    threads = WorkerThreads(1, "test-handlers")
    ran: list[int] = []
    blocker_started, release = threading.Event(), threading.Event()
    last_ran = threading.Event()

    def blocker() -> None:
        blocker_started.set()
        release.wait(WAIT_S)

    try:
        threads.submit(blocker)
        assert blocker_started.wait(WAIT_S)  # the only thread is busy: the rest wait
        queued = [threads.submit(partial(ran.append, n)) for n in range(4)]
        last = threads.submit(last_ran.set)
        assert queued[1].withdraw() and queued[3].withdraw()
        release.set()
        assert last_ran.wait(WAIT_S)
        assert ran == [0, 2]
        assert not last.withdraw()  # it ran
    finally:
        threads.shutdown()


def test_slow_tasks_spread_over_every_thread_though_threads_are_woken_one_at_a_time() -> None:
    size = 8
    threads = WorkerThreads(size, "test-handlers")
    # Each task waits until all of them run at once: they finish only on eight threads.
    together = threading.Barrier(size, timeout=WAIT_S)
    names: set[str] = set()
    done = threading.Semaphore(0)

    def task() -> None:
        names.add(threading.current_thread().name)
        together.wait()
        done.release()

    try:
        for _ in range(size):
            threads.submit(task)
        for _ in range(size):
            assert done.acquire(timeout=WAIT_S)
        assert len(names) == size
    finally:
        threads.shutdown()


def test_a_burst_of_quick_tasks_all_run_once() -> None:
    threads = WorkerThreads(4, "test-handlers")
    ran: list[int] = []
    finished = threading.Semaphore(0)

    def task(n: int) -> None:
        ran.append(n)
        finished.release()

    try:
        for n in range(5_000):
            threads.submit(partial(task, n))
        for _ in range(5_000):
            assert finished.acquire(timeout=WAIT_S)
        assert sorted(ran) == list(range(5_000))
    finally:
        threads.shutdown()


def test_after_shutdown_idle_threads_end_and_a_busy_one_when_its_task_returns() -> None:
    threads = WorkerThreads(3, "test-handlers-end")
    started, release = threading.Event(), threading.Event()
    busy: list[str] = []

    def task() -> None:
        busy.append(threading.current_thread().name)
        started.set()
        release.wait(WAIT_S)

    threads.submit(task)
    assert started.wait(WAIT_S)
    threads.shutdown()
    idle = [t for t in threads._threads if t.name not in busy]
    for thread in idle:
        thread.join(WAIT_S)
    assert [t.is_alive() for t in idle] == [False, False]
    busy_thread = next(t for t in threads._threads if t.name in busy)
    assert busy_thread.is_alive()
    release.set()
    busy_thread.join(WAIT_S)
    assert not busy_thread.is_alive()
