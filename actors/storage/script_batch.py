"""Runs the script calls of several shards in few round trips, optionally waiting for replicas.

Calls are grouped by the node that serves their shard (a single server is one node) and each
group is one pipeline of EVALSHA on one connection of that node. Not redis-py's cluster pipeline:
for every EVALSHA it queues it first asks the cluster's default node for the command's keys
(``COMMAND GETKEYS``, one round trip each), and when that node dies it keeps asking it.

Replies that say the call did not run are retried: ``NOSCRIPT`` (a fresh or promoted master has
an empty script cache) after loading the script; ``MOVED``, ``ASK`` and ``TRYAGAIN`` (a slot
moving between nodes) after refreshing the slot map and a short pause. A connection error
refreshes the slot map (a failover may have moved the shard's master) and is raised: the calls
sent on that connection may or may not have run.

Durable calls end each group with ``WAIT numreplicas timeout`` on the same connection, because
WAIT only covers the writes made on its own connection.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)

from actors.storage.calls import ScriptCall
from actors.storage.held_connections import PipelineStream, SentPipeline
from actors.storage.scripts import ScriptRunner, shas, sources

# Redirections and TRYAGAIN during a slot migration last milliseconds; calls are retried this
# many times, 50 ms apart, before giving up.
_REDIRECT_ATTEMPTS = 40
_REDIRECT_PAUSE_S = 0.05


@dataclass(frozen=True, slots=True)
class WaitFor:
    """Replicas that must acknowledge a durable call, and how long to wait for them."""

    replicas: int
    timeout_ms: int


class ScriptBatch:
    """Thread-safe as far as the client is: every call takes its own pipelines."""

    def __init__(self, client: redis.Redis | RedisCluster) -> None:
        self.client = client
        self.runner = ScriptRunner(client)  # type: ignore[arg-type]  # works on RedisCluster too
        self._sources = {name: source for name, (_, source) in sources().items()}
        self._shas = shas()

    def run(self, calls: Sequence[ScriptCall], *, raise_errors: bool = True) -> list[Any]:
        """Replies in call order. Raises the first error after every call has been tried, or
        with ``raise_errors=False`` returns errors in place of replies (a node that cannot be
        reached gives each of its calls the connection error)."""
        if len(calls) == 1 and raise_errors:  # redis-py's own routing and retries suffice
            return [self.runner(calls[0].name, calls[0].keys, calls[0].args)]
        replies, _ = self._run(calls, None, raise_errors)
        return replies

    def send(self, calls: Sequence[ScriptCall]) -> SentCalls | None:
        """Sends ``calls`` in one pipeline and returns before the replies come (see SentCalls),
        on a client whose connections are held (one server); None on any other client, whose
        calls go through ``run``."""
        held = self.runner.held
        if held is None or isinstance(self.client, RedisCluster):
            return None
        return SentCalls(self, calls, held.send(self._evalshas(calls)))

    def stream(self) -> ScriptStream | None:
        """A stream of pipelines on one held connection (see ScriptStream), on a client whose
        connections are held (one server); None on any other client."""
        held = self.runner.held
        if held is None or isinstance(self.client, RedisCluster):
            return None
        return ScriptStream(self, held.stream())

    def run_durable(self, calls: Sequence[ScriptCall], wait: WaitFor) -> tuple[list[Any], int]:
        """Replies in call order, and the fewest replicas that acknowledged any of them."""
        replies, acked = self._run(calls, wait, True)
        return replies, wait.replicas if acked is None else acked

    def _run(
        self, calls: Sequence[ScriptCall], wait: WaitFor | None, raise_errors: bool
    ) -> tuple[list[Any], int | None]:
        replies: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        acked: int | None = None
        for attempt in range(_REDIRECT_ATTEMPTS):
            retry: list[int] = []
            for node_client, indexes in self._by_node(calls, pending):
                try:
                    results, replicas = self._send(node_client, [calls[n] for n in indexes], wait)
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    if raise_errors:
                        raise
                    results, replicas = [exc] * len(indexes), None
                ran = False
                for n, result in zip(indexes, results, strict=True):
                    if isinstance(result, NoScriptError):
                        node_client.script_load(self._sources[calls[n].name])
                        retry.append(n)
                    elif isinstance(result, MovedError | AskError | TryAgainError):
                        retry.append(n)  # not run here: the slot is moving or has moved
                    else:
                        replies[n] = result
                        ran = True
                if ran and replicas is not None:
                    acked = replicas if acked is None else min(acked, replicas)
            if not retry:
                if raise_errors:
                    _raise_first_error(replies)
                return replies, acked
            pending = retry
            self._refresh_slots()
            if attempt:
                time.sleep(_REDIRECT_PAUSE_S)  # a migration or failover is finishing
        raise TryAgainError(
            f"{len(pending)} script calls were still redirected after {_REDIRECT_ATTEMPTS} tries"
        )

    def _send(
        self, node_client: redis.Redis, calls: list[ScriptCall], wait: WaitFor | None
    ) -> tuple[list[Any], int | None]:
        commands = self._evalshas(calls)
        if wait is not None:
            commands.append(("WAIT", wait.replicas, wait.timeout_ms))
        try:
            if node_client is self.client and self.runner.held is not None:
                results = self.runner.held.pipeline(commands)
            else:
                pipe = node_client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)  # type: ignore[no-untyped-call]
                results = list(pipe.execute(raise_on_error=False))
        except (redis.ConnectionError, redis.TimeoutError):
            self._refresh_slots()
            raise
        if wait is None:
            return results, None
        replicas = results.pop()
        if isinstance(replicas, Exception):
            raise replicas
        return results, int(replicas)

    def _evalshas(self, calls: Sequence[ScriptCall]) -> list[tuple[Any, ...]]:
        return [
            ("EVALSHA", self._shas[call.name], len(call.keys), *call.keys, *call.args)
            for call in calls
        ]

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
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                self.client.nodes_manager.initialize()


class SentCalls:
    """Script calls sent by ``ScriptBatch.send``, replies not read yet."""

    __slots__ = ("_batch", "_calls", "_sent")

    def __init__(self, batch: ScriptBatch, calls: Sequence[ScriptCall], sent: SentPipeline) -> None:
        self._batch, self._calls, self._sent = batch, calls, sent

    def read(self) -> list[Any]:
        """Replies in call order, errors in place, as ``run(..., raise_errors=False)``. Calls
        answered NOSCRIPT (a restarted server's empty script cache) did not run: they are run
        again through ``run``, which loads their scripts first."""
        return _ran_again_if_unknown(self._batch, self._calls, self._sent.read())


class ScriptStream:
    """Script-call pipelines sent one after another on one connection (ScriptBatch.stream):
    ``read()`` gives the oldest unread pipeline's replies, errors in place, as SentCalls does,
    so the caller builds its next pipeline while the server runs the ones sent. The server runs
    them in the order sent. ``close()`` when done (also after an error)."""

    __slots__ = ("_batch", "_calls", "_stream")

    def __init__(self, batch: ScriptBatch, stream: PipelineStream) -> None:
        self._batch, self._stream = batch, stream
        self._calls: deque[Sequence[ScriptCall]] = deque()

    @property
    def unread(self) -> int:
        return self._stream.unread

    def send(self, calls: Sequence[ScriptCall]) -> None:
        self._stream.send(self._batch._evalshas(calls))
        self._calls.append(calls)

    def read(self) -> list[Any]:
        replies = self._stream.read()
        return _ran_again_if_unknown(self._batch, self._calls.popleft(), replies)

    def close(self) -> None:
        self._stream.close()


def _ran_again_if_unknown(
    batch: ScriptBatch, calls: Sequence[ScriptCall], replies: list[Any]
) -> list[Any]:
    """``replies`` with each call answered NOSCRIPT (a restarted server's empty script cache:
    the call did not run) run again through ``run``, which loads its script first."""
    again = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if again:
        rerun = batch.run([calls[n] for n in again], raise_errors=False)
        for n, reply in zip(again, rerun, strict=True):
            replies[n] = reply
    return replies


def _raise_first_error(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
