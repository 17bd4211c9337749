"""Runs the script calls of several shards in one round trip, optionally waiting for replicas.

A pipeline of EVALSHA: on a single server one connection carries them all; on Redis Cluster
redis-py's cluster pipeline writes each node's share to that node before reading any reply, so
the shards' scripts run on their masters in parallel, and ``MOVED``/``ASK``/``TRYAGAIN`` replies
are retried one by one by redis-py. A ``NOSCRIPT`` reply (a fresh or promoted master has an empty
script cache) means the script did not run: it is loaded and run again.

Durable calls end with ``WAIT numreplicas timeout`` on the connection that ran them, because WAIT
only covers the writes of its own connection. On a cluster that means one pipeline per node,
routed here rather than by redis-py, so redirections are handled here too.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, NoScriptError, TryAgainError

from ._scripts import ScriptRunner, sources

# Redirections and TRYAGAIN during a slot migration last milliseconds; a durable call retries
# this many times, 50 ms apart, before giving up.
_REDIRECT_ATTEMPTS = 40
_REDIRECT_PAUSE_S = 0.05


@dataclass(frozen=True, slots=True)
class ScriptCall:
    name: str
    keys: list[str]
    args: list[Any]


@dataclass(frozen=True, slots=True)
class WaitFor:
    """Replicas that must acknowledge a durable call, and how long to wait for them."""

    replicas: int
    timeout_ms: int


class ScriptBatch:
    """Thread-safe as far as the client is: every call takes its own pipeline."""

    def __init__(self, client: redis.Redis | RedisCluster) -> None:
        self.client = client
        self.runner = ScriptRunner(client)  # type: ignore[arg-type]  # works on RedisCluster too
        self._sources = {name: source for name, (_, source) in sources().items()}
        self._shas = {
            name: hashlib.sha1(source.encode()).hexdigest()
            for name, source in self._sources.items()
        }

    def _evalsha_args(self, call: ScriptCall) -> list[Any]:
        return ["EVALSHA", self._shas[call.name], len(call.keys), *call.keys, *call.args]

    def run(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Replies in call order; raises the first error after every call has been tried."""
        if len(calls) == 1:
            return [self.runner(calls[0].name, calls[0].keys, calls[0].args)]
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*self._evalsha_args(call))
        replies: list[Any] = list(pipe.execute(raise_on_error=False))
        for n, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):  # did not run: load it, run it again
                replies[n] = self.runner(calls[n].name, calls[n].keys, calls[n].args)
        _raise_first_error(replies)
        return replies

    def run_durable(self, calls: Sequence[ScriptCall], wait: WaitFor) -> tuple[list[Any], int]:
        """Replies in call order, and the fewest replicas that acknowledged any of them."""
        replies: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        acked = wait.replicas
        for attempt in range(_REDIRECT_ATTEMPTS):
            retry: list[int] = []
            for node_client, indexes in self._by_node(calls, pending):
                pipe = node_client.pipeline(transaction=False)
                for n in indexes:
                    pipe.execute_command(*self._evalsha_args(calls[n]))  # type: ignore[no-untyped-call]
                pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)  # type: ignore[no-untyped-call]
                *results, replicas = pipe.execute(raise_on_error=False)
                ran = False
                for n, result in zip(indexes, results, strict=True):
                    if isinstance(result, NoScriptError):
                        node_client.script_load(self._sources[calls[n].name])
                        retry.append(n)
                    elif isinstance(result, MovedError | AskError | TryAgainError):
                        retry.append(n)  # not run here; the slot is moving or has moved
                    else:
                        replies[n] = result
                        ran = True
                if ran:
                    if isinstance(replicas, Exception):
                        raise replicas
                    acked = min(acked, int(replicas))
            if not retry:
                _raise_first_error(replies)
                return replies, acked
            pending = retry
            self._refresh_slots()
            if attempt:
                time.sleep(_REDIRECT_PAUSE_S)  # a migration or failover is finishing
        raise TryAgainError(
            f"{len(pending)} durable script calls were redirected {_REDIRECT_ATTEMPTS} times"
        )

    def _by_node(
        self, calls: Sequence[ScriptCall], indexes: Sequence[int]
    ) -> list[tuple[redis.Redis, list[int]]]:
        if not isinstance(self.client, RedisCluster):
            return [(self.client, list(indexes))]
        groups: dict[str, tuple[redis.Redis, list[int]]] = {}
        for n in indexes:
            node = self.client.get_node_from_key(calls[n].keys[0])  # type: ignore[no-untyped-call]
            entry = groups.setdefault(node.name, (self.client.get_redis_connection(node), []))
            entry[1].append(n)
        return list(groups.values())

    def _refresh_slots(self) -> None:
        if isinstance(self.client, RedisCluster):
            self.client.nodes_manager.initialize()


def _raise_first_error(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
