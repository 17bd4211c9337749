"""Helpers for the actor tests: read Redis command counts, ask an actor for its stats, read a
topic's ready list and a job's audit entries. Their fixtures live in tests/runtime/conftest.py."""

from __future__ import annotations

from typing import Any

import pykka
import redis
from _wait import WAIT_S

from actors.runtime.messages import Stats
from actors.storage.calls import decoded as _s
from actors.storage.store import Store


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
