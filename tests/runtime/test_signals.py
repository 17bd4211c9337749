"""SIGTERM always stops a waiting worker (actors._signals).

`redelay worker --log-level debug` now and then ignored SIGTERM for good: its main thread sat in
``Event.wait()`` with no timeout, and the Python handler, which only runs on the main thread
between bytecodes, never ran. Seen here in 1 of 2 to 1 of 14 start-and-stop cycles before the
fix (test_cli's lowercase-log-level test timed out the same way); 40 of 40 after it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from actors._signals import SignalFlag, wait_for_event
from actors.server.embedded import RedisProcess

CYCLES = 15
DEBUG = ("--log-level", "debug")
STOP_S = 30.0


def test_a_signal_flag_sees_a_real_signal_and_its_wait_times_out_without_one() -> None:
    flag = SignalFlag()
    previous = signal.signal(signal.SIGUSR1, flag.handler)
    try:
        started = time.monotonic()
        assert not flag.wait(timeout_s=0.3)
        assert time.monotonic() - started >= 0.3
        # From another thread, as a process-directed SIGTERM may land on any thread.
        sender = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
        sender.start()
        assert flag.wait(timeout_s=STOP_S)
        sender.join()
        assert flag.received == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_wait_for_event_returns_when_set_and_after_its_timeout() -> None:
    event = threading.Event()
    setter = threading.Timer(0.05, event.set)
    setter.start()
    assert wait_for_event(event, timeout_s=STOP_S)
    setter.join()
    unset = threading.Event()
    started = time.monotonic()
    assert not wait_for_event(unset, timeout_s=0.3)
    assert time.monotonic() - started >= 0.3


WORKER = textwrap.dedent(
    """
    import os
    from actors import DelayQueue, Job

    queue = DelayQueue(os.environ["SIGNALS_REDIS_URL"], namespace="signals")

    @queue.handler("mail.send")
    def send(job: Job) -> None:
        pass
    """
)


@pytest.mark.slow
def test_sigterm_right_after_start_stops_a_debug_logging_worker_every_time(
    tmp_path: Path, redis_factory: Callable[..., RedisProcess]
) -> None:
    server = redis_factory()
    (tmp_path / "signals_app.py").write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    env |= {"SIGNALS_REDIS_URL": server.url, "PYTHONPATH": str(tmp_path)}
    if "REDELAY_REDIS_SERVER" in os.environ:
        env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
    for cycle in range(CYCLES):
        worker = subprocess.Popen(
            [sys.executable, "-m", "actors.cli", "worker", "signals_app:queue", *DEBUG],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stderr is not None
            for line in worker.stderr:
                if "worker started" in line:
                    break
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
            raise AssertionError(f"cycle {cycle}: the worker ignored SIGTERM") from None
        assert worker.returncode == 0, err[-2000:]
