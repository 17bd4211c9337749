"""redelay's pytest plugin: fixtures a user's test suite gets by installing redelay.

Registered under the ``pytest11`` entry point (pyproject.toml), so pytest loads it in any
environment where redelay is installed; nothing to import or configure. See docs/testing.md.

- ``redelay_redis``: a private redis-server for the test (a Unix socket in a temporary
  directory; the binary from ``REDELAY_REDIS_SERVER``, ``PATH``, or the ``embedded`` extra), killed
  afterwards. Never a shared server: tests write and delete keys.
- ``redelay_clock``: a :class:`FakeClock` that moves only when the test moves it.
- ``redelay_queue``: a :class:`DelayQueue` on that server and clock, not started: register
  handlers, then ``start()``. Stopped at the end of the test, whatever happened to it.
- ``redelay_harness``: the faults and waits of :mod:`actors.testing`, bound to the above:
  advance time, crash a worker, drop connections, expire leases, start another worker.

The names all start with ``redelay_`` so they cannot clash with a suite's own fixtures.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors import DelayQueue, FakeClock, testing
from actors.server.embedded import RedisProcess
from actors.values import JobInfo

__all__ = [
    "RedelayHarness",
    "redelay_clock",
    "redelay_harness",
    "redelay_queue",
    "redelay_redis",
]

NAMESPACE = "test"
START_TIMEOUT_S = 10.0
# How often the queues' sweepers look for expired leases, in fake time: short, so that
# expire_leases() needs to move the clock only a little past the lease.
SWEEP_INTERVAL_S = 0.5
# Real time between steps of the clock while waiting for a sweep (see expire_leases).
SWEEP_POLL_S = 0.02


class RedelayHarness:
    """What a test does to a running queue: every method works on the fixtures' server and
    clock, and every queue it starts is stopped at the end of the test."""

    def __init__(self, server: RedisProcess, clock: FakeClock, first: DelayQueue) -> None:
        self.server = server
        self.clock = clock
        self.queues: list[DelayQueue] = [first]

    def new_queue(self) -> DelayQueue:
        """Another worker on the same server, namespace and clock (not started): the process
        that takes over after a crash."""
        queue = DelayQueue(
            self.server.url, NAMESPACE, clock=self.clock, sweep_interval_s=SWEEP_INTERVAL_S
        )
        self.queues.append(queue)
        return queue

    def advance(self, seconds: float) -> None:
        """Moves the fake clock forward; timers due on the way (delayed jobs falling due,
        retries, lease expiry, timeouts) run in due order, in this thread."""
        self.clock.advance(round(seconds * 1000))

    def crash_worker(self, queue: DelayQueue) -> list[str]:
        """The worker dies as after SIGKILL (:func:`actors.testing.kill_worker`): nothing is
        released or acked, its running handlers are abandoned, its jobs keep their leases.
        Returns the actors killed. Use :meth:`new_queue` for the process that replaces it."""
        return testing.kill_worker(queue)

    def drop_connections(self) -> int:
        """``CLIENT KILL`` of every client connection of the server (the queues reconnect, as
        after a network blip or a proxy restart). Returns how many were closed."""
        admin = self.server.client()
        try:
            killed = 0
            for kind in ("normal", "pubsub"):
                killed += int(admin.client_kill_filter(_type=kind, skipme=True))
            return killed
        finally:
            admin.close()

    def expire_leases(self, queue: DelayQueue, timeout_s: float = 10.0) -> bool:
        """Moves the clock past every lease held on ``queue``'s topics (a crashed worker's
        included) and on, a sweep at a time, until ``queue``'s sweeper has expired them all: their
        attempts count as failed and the jobs are retried on their schedule (``retry=[0]``: at
        once). ``queue`` must be running. False if leases were still held after ``timeout_s``."""
        last = max((j.lease_deadline_ms or 0 for j in self._leased(queue)), default=None)
        if last is None:
            return True
        if last >= self.clock.now_ms():
            self.clock.advance(last + 1 - self.clock.now_ms())

        def swept() -> bool:
            now = self.clock.now_ms()
            if all((j.lease_deadline_ms or 0) > now for j in self._leased(queue)):
                return True
            # The sweeper re-arms its timer on its own thread: keep moving until it ran.
            self.advance(SWEEP_INTERVAL_S)
            return False

        return testing.wait_until(swept, timeout_s, poll_s=SWEEP_POLL_S)

    @staticmethod
    def _leased(queue: DelayQueue) -> list[JobInfo]:
        leased: list[JobInfo] = []
        for topic in queue.handled_topics:
            after: str | None = None
            while True:
                page = queue.jobs(topic, "leased", after=after)
                leased += page.jobs
                if page.next_after is None:
                    break
                after = page.next_after
        return leased

    def wait_until(self, condition: Callable[[], Any], timeout_s: float = 10.0) -> bool:
        """Polls ``condition`` in real time until it is truthy (True) or ``timeout_s`` passes
        (False): the actors run on their own threads, so a test waits for them, never sleeps."""
        return testing.wait_until(condition, timeout_s)

    def stop_all(self) -> None:
        for queue in self.queues:
            with contextlib.suppress(Exception):  # a crashed queue's connections are gone
                queue.stop(grace=1)


@pytest.fixture
def redelay_redis() -> Iterator[RedisProcess]:
    """A private redis-server for this test; ``.url`` for a DelayQueue, ``.client()`` to look."""
    # A short path: a Unix socket's path is limited to about 100 bytes, tmp_path can be longer.
    directory = tempfile.mkdtemp(prefix="redelay-")
    server = RedisProcess(directory).start(timeout_s=START_TIMEOUT_S)
    try:
        yield server
    finally:
        server.kill()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redelay_clock() -> FakeClock:
    """The queues' clock: time passes only through ``advance``."""
    return FakeClock()


@pytest.fixture
def redelay_harness(
    redelay_redis: RedisProcess, redelay_clock: FakeClock
) -> Iterator[RedelayHarness]:
    first = DelayQueue(
        redelay_redis.url, NAMESPACE, clock=redelay_clock, sweep_interval_s=SWEEP_INTERVAL_S
    )
    harness = RedelayHarness(redelay_redis, redelay_clock, first)
    try:
        yield harness
    finally:
        harness.stop_all()


@pytest.fixture
def redelay_queue(redelay_harness: RedelayHarness) -> DelayQueue:
    """A DelayQueue on ``redelay_redis`` with ``redelay_clock``, namespace "test", not started."""
    return redelay_harness.queues[0]
