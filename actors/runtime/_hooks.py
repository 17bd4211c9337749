"""The facade's failure hooks: functions called with ``(job, exc)`` after a failed attempt.

One ``FailureHooks`` per queue, shared by its pools, so a hook registered after the worker started
applies from the next failure on. Each pool calls them on its own hook thread, never on its actor
thread: a slow hook delays other hooks, not acks; a hook that raises is logged and forgotten.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from actors.job import Job
from actors.values import Lease

FailureHook = Callable[[Job, BaseException], Any]

log = logging.getLogger("actors.hooks")


class FailureHooks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._on_failure: tuple[FailureHook, ...] = ()
        self._on_dead: tuple[FailureHook, ...] = ()

    def add_on_failure(self, hook: FailureHook) -> None:
        with self._lock:
            self._on_failure = (*self._on_failure, hook)

    def add_on_dead(self, hook: FailureHook) -> None:
        with self._lock:
            self._on_dead = (*self._on_dead, hook)

    def chosen(self, dead: bool) -> tuple[FailureHook, ...]:
        """What to call for one failed attempt: every on_failure hook, then (the job is dead)
        every on_dead hook."""
        return self._on_failure + (self._on_dead if dead else ())


def call_hooks(hooks: tuple[FailureHook, ...], lease: Lease, exc: BaseException) -> None:
    """Runs on a pool's hook thread. Nothing a hook raises leaves this function."""
    job = job_of(lease)
    for hook in hooks:
        try:
            hook(job, exc)
        except BaseException:
            log.exception(
                "hook %s raised for %s/%s attempt %d; ignored",
                getattr(hook, "__qualname__", repr(hook)),
                job.topic,
                job.id,
                job.attempt,
            )


def job_of(lease: Lease) -> Job:
    """The job as its handler saw it; a body that is not JSON (which failed the attempt) is
    passed as None, with the bytes in ``body_bytes``."""
    return Job.from_lease(lease, undecodable_as_none=True)
