"""Helpers for the actor tests: wait for a condition with a deadline, read Redis command counts,
ask an actor for its stats, start the process's notifier, and stop every actor a test started."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest
import redis
from _wait import WAIT_S, wait_until

from actors.runtime.messages import Stats
from actors.runtime.notifier import ShardNotifier, notifier_for
from actors.storage.calls import decoded as _s
from actors.storage.store import Store


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """``wait_until`` with the actor tests' positional ``what``."""
    return wait_until(condition, what=what, timeout_s=timeout_s)


def stats(ref: pykka.ActorRef[Any]) -> dict[str, Any]:
    """The actor's counters. The ask queues behind every message already sent to it, so what
    it answers reflects them."""
    answer: dict[str, Any] = ref.ask(Stats(), block=True, timeout=WAIT_S)
    return answer


def command_calls(client: redis.Redis, *commands: str) -> int:
    """How many times the server ran these commands (INFO commandstats), e.g. "evalsha"."""
    info = client.info("commandstats")
    return sum(int(info.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in commands)


def blocked_clients(client: redis.Redis) -> int:
    return int(client.info("clients")["blocked_clients"])


def ready_ids(store: Store, topic: str = "t") -> list[str]:
    return [_s(m).split("|", 1)[1] for m in store.client.lrange(store.keys.ready(topic), 0, -1)]


def events(store: Store, job_id: str, topic: str = "t") -> list[dict[str, str]]:
    """The audit entries of one job, oldest first."""
    return [f for _, f in store.audit_entries() if f["t"] == topic and f["i"] == job_id]


@pytest.fixture
def stop_actors() -> Iterator[None]:
    """Stops every actor still running when the test ends, so none leaks into the next test."""
    yield
    pykka.ActorRegistry.stop_all(block=True, timeout=WAIT_S)


@pytest.fixture(name="notifiers")
def notifiers_fixture() -> Iterator[Callable[[Store], ShardNotifier]]:
    """Starts the notifier a process would have for a store (subscribed when it returns); the
    carriers and listeners a test starts get their wake and ready signals from it."""
    started: list[ShardNotifier] = []

    def start(store: Store) -> ShardNotifier:
        notifier = notifier_for(store).start()
        started.append(notifier)
        return notifier

    yield start
    for notifier in started:
        notifier.stop()
