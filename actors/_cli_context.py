"""Where a command's Redis comes from: --redis / REDELAY_REDIS_URL, else the embedded default."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import redis

from ._cli_output import CliError, Exit
from .clock import RedisSyncedClock
from .embedded_default import DEFAULT_DATA_DIR, EmbeddedServer, start_embedded
from .errors import RedisServerNotFound
from .store import Store

ENV_URL = "REDELAY_REDIS_URL"
ENV_NAMESPACE = "REDELAY_NAMESPACE"
ENV_DATA_DIR = "REDELAY_DATA_DIR"
DEFAULT_NAMESPACE = "default"
CONNECT_TIMEOUT_S = 5.0


def redis_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "redis", None) or os.environ.get(ENV_URL) or None


def namespace(args: argparse.Namespace) -> str:
    return getattr(args, "namespace", None) or os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE


def data_dir(args: argparse.Namespace) -> str:
    return getattr(args, "data_dir", None) or os.environ.get(ENV_DATA_DIR) or DEFAULT_DATA_DIR


def no_redis(message: str) -> CliError:
    return CliError(Exit.NO_REDIS, "no_redis", message)


@dataclass
class Context:
    """One command's connection, opened on first use and closed by :meth:`close`."""

    args: argparse.Namespace
    json: bool = False
    progress: bool = False
    embedded: EmbeddedServer | None = None
    _client: redis.Redis | None = None
    _store: Store | None = None
    _clock: RedisSyncedClock | None = None

    def client(self) -> redis.Redis:
        if self._client is not None:
            return self._client
        url = redis_url(self.args)
        if url is None:
            try:
                self.embedded = start_embedded(data_dir(self.args))
            except RedisServerNotFound as exc:
                raise no_redis(f"no --redis URL given and {exc}") from None
            except (OSError, RuntimeError) as exc:
                raise no_redis(f"could not start the embedded redis-server: {exc}") from None
            client = self.embedded.client(socket_connect_timeout=CONNECT_TIMEOUT_S)
        else:
            try:
                client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S)
            except ValueError as exc:
                raise CliError(Exit.USAGE, "usage", f"--redis: {exc}") from None
        try:
            client.ping()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            client.close()
            where = url or (self.embedded.url if self.embedded else "?")
            raise no_redis(f"cannot connect to Redis at {where}: {exc}") from None
        self._client = client
        return client

    def store(self) -> Store:
        if self._store is None:
            client = self.client()
            # Jobs are due on the Redis server's clock, whatever this machine's clock says.
            self._clock = RedisSyncedClock(client, refresh_ms=3_600_000)
            self._store = Store(client, namespace(self.args), self._clock)
        return self._store

    def close(self) -> None:
        if self._clock is not None:
            self._clock.close()
        if self._client is not None:
            self._client.close()
        if self.embedded is not None:
            self.embedded.stop()

    def note(self, text: str) -> None:
        """A remark for people, kept off stdout so --json output stays parseable."""
        print(text, file=sys.stderr)
