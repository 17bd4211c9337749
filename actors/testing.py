"""Support for test suites: ours, the simulators in simulations/, and yours.

A running DelayQueue keeps its actors to itself. A test that wants to see them, break them or wait
for them uses these functions instead of private attributes, so it keeps working when the
internals move. See docs/testing.md.

- Looking: :func:`actor_refs`, :func:`ask_stats`, :func:`wait_until`.
- Breaking: :func:`crash` / :func:`crash_actor` (one actor dies as a bug would kill it; the
  watchdog restarts it), :func:`kill_worker` (every actor dies at once, as when the process is
  SIGKILLed: nothing is released and the jobs it held come back only when their leases expire).
- Waiting: :func:`wait_dead`.
- Handlers: :class:`HandlerRecorder` and :func:`handler_specs` read what a queue (or a
  ``register(queue)`` function) registers, converted exactly as :meth:`DelayQueue.handler` does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Final, TypeVar

import pykka
from pykka.messages import ProxyCall

from actors import _constants
from actors.queue import DelayQueue, checked_handler
from actors.runtime.messages import Stats
from actors.runtime.system import ActorSystem, HandlerSpec
from actors.values import TopicConfig

__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_RETRY_SCHEDULE_MS",
    "LEASE_MS_MAX",
    "HandlerRecorder",
    "HandlerSpec",
    "actor_refs",
    "actor_system",
    "ask_stats",
    "crash",
    "crash_actor",
    "default_topic_config",
    "handler_specs",
    "kill_worker",
    "wait_dead",
    "wait_until",
]

# The namespace defaults a queue stores when it is given none, and the longest lease.
DEFAULT_LEASE_MS: Final = _constants.DEFAULT_LEASE_MS
DEFAULT_RETRY_SCHEDULE_MS: Final = _constants.DEFAULT_RETRY_SCHEDULE_MS
LEASE_MS_MAX: Final = _constants.LEASE_MS_MAX

# A message naming a method no actor has: the AttributeError it raises inside a tell kills the
# actor exactly as a bug in its message handling would (on_failure runs, the watchdog restarts).
_CRASH = ProxyCall(attr_path=("simulated_crash",), args=(), kwargs={})
_WAIT_S = 10.0
_POLL_S = 0.002

F = TypeVar("F", bound=Callable[..., Any])


def actor_system(queue: DelayQueue) -> ActorSystem | None:
    """The queue's running actor system; None before start() and after stop()."""
    return queue._system


def actor_refs(queue: DelayQueue) -> dict[str, pykka.ActorRef[Any]]:
    """The queue's supervised actors by name: "carrier", "sweeper", "pool:<topic>",
    "listener:<topic>". Empty when it is not running (or its watchdog is gone)."""
    system = actor_system(queue)
    if system is None:
        return {}
    try:
        return system.refs()
    except (pykka.ActorDeadError, pykka.Timeout):
        return {}


def ask_stats(ref: pykka.ActorRef[Any]) -> pykka.Future[dict[str, Any]]:
    """Asks one actor for its counters without waiting; ``.get(timeout=...)`` the answer.
    Raises pykka.ActorDeadError when the actor is dead."""
    future: pykka.Future[dict[str, Any]] = ref.ask(Stats(), block=False)
    return future


def crash(ref: pykka.ActorRef[Any]) -> bool:
    """Kills the actor as a bug in it would. False when it was already dead."""
    try:
        ref.tell(_CRASH)
    except pykka.ActorDeadError:
        return False
    return True


def crash_actor(queue: DelayQueue, name: str) -> bool:
    """Kills the queue's actor ``name`` (see :func:`actor_refs`) and waits until it is dead.
    Its watchdog restarts it. False when there was no such actor alive."""
    ref = actor_refs(queue).get(name)
    if ref is None or not crash(ref):
        return False
    return wait_dead([ref])


def wait_dead(refs: Iterable[pykka.ActorRef[Any]], timeout_s: float = _WAIT_S) -> bool:
    """Waits until every actor's thread has ended. False at the deadline."""
    refs = list(refs)
    return wait_until(lambda: not any(ref.is_alive() for ref in refs), timeout_s)


def wait_until(
    condition: Callable[[], Any], timeout_s: float = _WAIT_S, poll_s: float = _POLL_S
) -> bool:
    """Polls ``condition`` until it is truthy (True) or ``timeout_s`` passes (False). For tests
    that wait on other threads: a deadline, not a sleep that hopes they were fast enough."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def kill_worker(queue: DelayQueue) -> list[str]:
    """Stops the queue's worker the way a SIGKILL stops its process: no drain, no release, no
    last ack. The watchdog dies first so nothing is restarted, then every other actor; the
    notifier stops and the queue's connections close. Jobs it held keep their leases until
    they expire, when a sweeper (of another worker) recovers them.

    Returns the names of the actors killed. The queue must not be used afterwards (make a new one
    to model the process restarting)."""
    system = actor_system(queue)
    if system is None:
        return []
    refs = actor_refs(queue)
    if system.watchdog is not None:
        crash(system.watchdog)
        wait_dead([system.watchdog])
    for ref in refs.values():
        crash(ref)
    wait_dead(refs.values())
    if system.coordinator is not None:
        with contextlib.suppress(pykka.ActorDeadError):
            system.coordinator.stop(block=False)
    system.notifier.stop()
    # A killed process beats no more; its heartbeat expires by itself. Left running, this
    # thread would go on writing to Redis for as long as the test process lives.
    system.heartbeat.stop(forget=False)
    queue._system = None
    system.store.drop_connections(in_use=True)  # the actors' own (actors/storage/fence.py)
    pool = getattr(queue.client, "connection_pool", None)
    if pool is not None:
        pool.disconnect()  # the process is gone: so are its connections
    else:
        queue.client.close()  # a cluster client holds one pool per node
    return sorted(refs)


def default_topic_config(spec: HandlerSpec) -> TopicConfig:
    """What a worker stores for the handler's topic at start in a namespace opened with the
    default retry schedule and lease."""
    return spec.topic_config(TopicConfig(DEFAULT_RETRY_SCHEDULE_MS, DEFAULT_LEASE_MS))


def handler_specs(queue: DelayQueue) -> list[HandlerSpec]:
    """The handlers registered on the queue, in registration order."""
    return list(queue._handlers.values())


class HandlerRecorder:
    """Stands in for the DelayQueue a ``register(queue)`` function is given and keeps what it
    registers, without a Redis connection. Takes :meth:`DelayQueue.handler`'s arguments and
    checks and converts them the same way."""

    def __init__(self) -> None:
        self.specs: list[HandlerSpec] = []

    def handler(
        self,
        topic: str,
        *,
        concurrency: int = 8,
        timeout: float | timedelta = 30.0,
        retry: Sequence[float | timedelta] | None = None,
        lease: float | timedelta | None = None,
        prefetch: int = 0,
        lost_max: int | None = None,
    ) -> Callable[[F], F]:
        spec_for = checked_handler(
            topic,
            concurrency=concurrency,
            timeout=timeout,
            retry=retry,
            lease=lease,
            prefetch=prefetch,
            lost_max=lost_max,
        )

        def register(fn: F) -> F:
            self.specs.append(spec_for(fn))
            return fn

        return register
