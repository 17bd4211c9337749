"""Runs script calls on ``redis.asyncio``: by SHA, loading a script again on ``NOSCRIPT``.

One server (or a Sentinel-managed master): the calls of one operation go out in one pipeline,
with ``WAIT`` at its end for a durable add (WAIT covers only the writes made on its own
connection). Single calls from concurrent tasks are *coalesced*: a call made while another
pipeline is on the wire waits for it, then goes out with every call queued meanwhile, in one
pipeline. A hundred tasks adding at once thus cost a few writes and reads instead of a hundred
of each; a lone call goes out at once. Each call keeps its own reply or error: coalescing joins
no scripts, only their trip over the network. On a plain client (not Sentinel's) the pipelines
go out on connections held out of the client's pool (async_held_connections.py).

Redis Cluster: each call goes through the cluster client, which routes it by its first key and
follows MOVED and ASK; the calls of one operation run concurrently.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aredis
from redis.exceptions import NoScriptError

from actors.errors import ConfigError
from actors.storage.async_held_connections import (
    AsyncHeldConnections,
    AsyncPipelineStream,
    async_holdable,
)
from actors.storage.async_topology import AsyncClient, is_cluster
from actors.storage.calls import ScriptCall
from actors.storage.script_batch import WaitFor
from actors.storage.scripts import shas, sources

# NOSCRIPT (a restarted or promoted server forgot the scripts) is answered by loading them and
# sending the calls again; twice is enough unless the server is restarting in a loop.
_SCRIPT_ATTEMPTS = 3
# At most this many coalesced calls per pipeline: bounds one write and the reply read at once.
COALESCE_MAX = 1_000

Queued = tuple[ScriptCall, "asyncio.Future[Any]"]


class AsyncScriptBatch:
    """Runs script calls for one event loop; see the module docstring."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._sources = sources()
        self._shas = shas()
        self._queued: list[Queued] = []
        self._sender: asyncio.Task[None] | None = None
        # Pipelines on a client of one server go out on connections held out of its pool.
        self._held = (
            AsyncHeldConnections(client)
            if isinstance(client, aredis.Redis) and async_holdable(client)
            else None
        )

    async def run(
        self, script_calls: Sequence[ScriptCall], wait: WaitFor | None = None
    ) -> tuple[list[Any], int | None]:
        """Replies in call order, and with ``wait`` the fewest replicas that acknowledged the
        writes (None without). Raises the first error once every call was tried."""
        for call in script_calls:
            expected = self._sources[call.name][0]
            if len(call.keys) != expected:
                raise TypeError(f"script {call.name} takes {expected} keys, got {len(call.keys)}")
        if is_cluster(self.client):
            if wait is not None:  # open_async_store refuses this; kept for direct users
                raise ConfigError("durability needs one server (or Sentinel), not a cluster")
            replies = await asyncio.gather(*(self._one(c) for c in script_calls))
            return list(replies), None
        if len(script_calls) == 1 and wait is None:
            return [await self._coalesced(script_calls[0])], None
        replies, acked = await self._pipelined(script_calls, wait)
        _raise_first_error(replies)
        return replies, acked

    async def _coalesced(self, call: ScriptCall) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued.append((call, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_queued())
        return await future

    async def _send_queued(self) -> None:
        """Sends the queued calls, a pipeline at a time, until none is left."""
        while self._queued:
            taken = self._queued[:COALESCE_MAX]
            del self._queued[:COALESCE_MAX]
            try:
                replies, _ = await self._pipelined([call for call, _ in taken], None)
            except asyncio.CancelledError:  # the loop is closing: nobody will get a reply
                for _, future in [*taken, *self._queued]:
                    future.cancel()
                self._queued.clear()
                raise
            except Exception as exc:  # the connection failed: any of the calls may have run
                replies = [exc] * len(taken)
            for (_, future), reply in zip(taken, replies, strict=True):
                if future.done():  # its caller gave up waiting (the call was sent all the same)
                    continue
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)

    async def _one(self, call: ScriptCall) -> Any:
        for _ in range(_SCRIPT_ATTEMPTS - 1):
            try:
                return await self._evalsha(call)
            except NoScriptError:
                await self.client.script_load(self._sources[call.name][1])
        return await self._evalsha(call)

    async def _evalsha(self, call: ScriptCall) -> Any:
        return await self.client.execute_command(*self._evalsha_command(call))

    def _evalsha_command(self, call: ScriptCall) -> tuple[Any, ...]:
        return ("EVALSHA", self._shas[call.name], len(call.keys), *call.keys, *call.args)

    async def _send(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The commands' replies, error replies in place, sent together in one write."""
        if self._held is not None:
            return await self._held.pipeline(commands)
        async with self.client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))

    async def _load(self, names: set[str]) -> None:
        """Loads the scripts again: on held connections in one pipeline (the pool would open a
        connection beside the held one), else one at a time through the client."""
        if self._held is None:
            for name in names:
                await self.client.script_load(self._sources[name][1])
            return
        _raise_first_error(
            await self._send([("SCRIPT", "LOAD", self._sources[n][1]) for n in names])
        )

    async def stream(self) -> AsyncScriptStream | None:
        """Script-call pipelines sent one after another on one held connection (see
        AsyncScriptStream); None on a client whose connections are not held (a cluster,
        Sentinel), whose calls go through ``run``."""
        if self._held is None:
            return None
        return AsyncScriptStream(self, await self._held.stream())

    async def close(self) -> None:
        """Gives the held connections back to the client's pool (the client stays open)."""
        if self._held is not None:
            await self._held.close()

    async def _pipelined(
        self, script_calls: Sequence[ScriptCall], wait: WaitFor | None
    ) -> tuple[list[Any], int | None]:
        """Replies (errors in place) in call order, and the replicas that acknowledged."""
        replies: list[Any] = [None] * len(script_calls)
        pending = list(range(len(script_calls)))
        acked: int | None = None
        for _ in range(_SCRIPT_ATTEMPTS):
            commands = [self._evalsha_command(script_calls[n]) for n in pending]
            if wait is not None:
                commands.append(("WAIT", wait.replicas, wait.timeout_ms))
            results = await self._send(commands)
            replicas = None if wait is None else results.pop()
            if isinstance(replicas, Exception):
                raise replicas
            retry: list[int] = []
            for n, result in zip(pending, results, strict=True):
                if isinstance(result, NoScriptError):
                    retry.append(n)
                else:
                    replies[n] = result
            if replicas is not None and len(retry) < len(pending):
                acked = int(replicas) if acked is None else min(acked, int(replicas))
            if not retry:
                return replies, acked
            await self._load({script_calls[n].name for n in retry})
            pending = retry
        raise NoScriptError(f"{len(pending)} script calls were refused NOSCRIPT after loading")


class AsyncScriptStream:
    """The async twin of script_batch.ScriptStream: ``read()`` gives the oldest unread
    pipeline's replies, errors in place; calls answered NOSCRIPT (they did not run) are run
    again through the batch, which loads their scripts first."""

    __slots__ = ("_batch", "_calls", "_stream")

    def __init__(self, batch: AsyncScriptBatch, stream: AsyncPipelineStream) -> None:
        self._batch, self._stream = batch, stream
        self._calls: deque[Sequence[ScriptCall]] = deque()

    async def send(self, script_calls: Sequence[ScriptCall]) -> None:
        await self._stream.send([self._batch._evalsha_command(call) for call in script_calls])
        self._calls.append(script_calls)

    async def read(self) -> list[Any]:
        replies = await self._stream.read()
        script_calls = self._calls.popleft()
        again = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if again:
            rerun, _ = await self._batch._pipelined([script_calls[n] for n in again], None)
            for n, reply in zip(again, rerun, strict=True):
                replies[n] = reply
        return replies

    async def close(self) -> None:
        await self._stream.close()


def _raise_first_error(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
