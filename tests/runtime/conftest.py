"""Fixtures of the runtime layer's tests: every test here may start actors, so every test stops
whatever actors are still running when it ends, and none leaks into the next test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pykka
import pytest
from _wait import WAIT_S

# The cluster and Sentinel fixtures, for the actors on a sharded or failed-over namespace.
from cluster import cluster as cluster
from cluster import fresh_cluster as fresh_cluster
from cluster import sentinel_setup as sentinel_setup

from actors.runtime.notifier import ShardNotifier, notifier_for
from actors.storage.store import Store


@pytest.fixture(autouse=True)
def stop_actors() -> Iterator[None]:
    """Stops every actor still running when the test ends."""
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
