"""Where a command's Redis comes from: --redis / REDELAY_REDIS_URL, else the embedded default.

redis-py, the store and the embedded server are imported when a command first connects, not
here: every subcommand module imports this one, and ``redelay --help`` (or a usage error) should
not pay for them (tests/cli/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actors import _validation as validation
from actors.cli.output import CliError, Exit, command_line
from actors.errors import ConfigError, RedisServerNotFound

if TYPE_CHECKING:
    from actors.clock import RedisSyncedClock
    from actors.server.embedded_default import EmbeddedServer
    from actors.storage.store import Store
    from actors.storage.topology import RedisClient

ENV_URL = "REDELAY_REDIS_URL"
ENV_NAMESPACE = "REDELAY_NAMESPACE"
ENV_DATA_DIR = "REDELAY_DATA_DIR"
DEFAULT_NAMESPACE = "default"
CONNECT_TIMEOUT_S = 5.0


def redis_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "redis", None) or os.environ.get(ENV_URL) or None


def namespace(args: argparse.Namespace) -> str:
    given = getattr(args, "namespace", None)
    if given is not None:  # even "": validation refuses it rather than quietly using the default
        return str(given)
    return os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE


def data_dir(args: argparse.Namespace) -> str:
    from actors.server.embedded_default import DEFAULT_DATA_DIR

    return getattr(args, "data_dir", None) or os.environ.get(ENV_DATA_DIR) or DEFAULT_DATA_DIR


def no_redis(message: str) -> CliError:
    return CliError(Exit.NO_REDIS, "no_redis", message)


def not_redis(where: str, exc: Exception) -> CliError:
    """Something answered, but not in Redis's protocol (an HTTP server, a database, ...)."""
    return no_redis(f"{where} is not a Redis server (its reply did not parse: {exc})")


@dataclass
class Context:
    """One command's connection, opened on first use and closed by :meth:`close`."""

    args: argparse.Namespace
    json: bool = False
    progress: bool = False
    embedded: EmbeddedServer | None = None
    _client: RedisClient | None = None
    _store: Store | None = None
    _clock: RedisSyncedClock | None = None
    _recorded: bool = False

    def client(self) -> RedisClient:
        if self._client is not None:
            return self._client
        import redis

        from actors.server.embedded_default import start_embedded
        from actors.storage.topology import connect

        url = redis_url(self.args)
        if url is None:
            try:
                self.embedded = start_embedded(data_dir(self.args))
            except RedisServerNotFound as exc:
                raise no_redis(f"no --redis URL given and {exc}") from None
            except (OSError, RuntimeError) as exc:
                raise no_redis(f"could not start the embedded redis-server: {exc}") from None
            client: RedisClient = self.embedded.client(socket_connect_timeout=CONNECT_TIMEOUT_S)
        where = url or (self.embedded.url if self.embedded else "?")
        try:
            if url is not None:
                # One server, Redis Cluster or Sentinel, as the URL says (actors.storage.topology).
                client = connect(url, socket_connect_timeout=CONNECT_TIMEOUT_S)
            client.ping()
        except (ValueError, ConfigError) as exc:
            raise CliError(Exit.USAGE, "usage", f"--redis: {exc}") from None
        except redis.TimeoutError as exc:
            if "connecting" in str(exc).lower():
                raise no_redis(f"cannot connect to Redis at {where}: {exc}") from None
            # Connected, and then silence: what an HTTP or TLS server does with a Redis PING.
            raise no_redis(
                f"cannot connect to Redis at {where}: it accepted the connection but did not "
                f"answer PING ({exc}); is it a Redis server, and the right port?"
            ) from None
        except (redis.ConnectionError, OSError) as exc:
            raise no_redis(f"cannot connect to Redis at {where}: {exc}") from None
        except redis.exceptions.InvalidResponse as exc:
            raise not_redis(where, exc) from None
        self._client = client
        return client

    def store(self) -> Store:
        """The namespace's store: one shard, or every shard when it was created sharded."""
        if self._store is None:
            from actors.clock import RedisSyncedClock
            from actors.storage.namespace_config import stored_shards
            from actors.storage.store import open_store

            # A bad name exits 2 before connecting, with Redis down too.
            name = validation.namespace(namespace(self.args))
            client = self.client()
            # Jobs are due on the Redis server's clock, whatever this machine's clock says.
            self._clock = RedisSyncedClock(client, refresh_ms=3_600_000)  # type: ignore[arg-type]
            self._recorded = stored_shards(client, name) is not None
            # Read, never record: inspecting a namespace must not create its configuration. The
            # recorded retention is used, or a CLI write would trim away the workers' history.
            self._store = open_store(client, name, self._clock, record=False)
        return self._store

    def namespace_used(self, counts: dict[str, dict[str, int]], audit_entries: int) -> bool:
        """Whether anything ever used the namespace: a process recorded its configuration, or
        it has topics or history (the CLI's own adds record nothing)."""
        self.store()
        return self._recorded or bool(counts) or audit_entries > 0

    def close(self) -> None:
        if self._clock is not None:
            self._clock.close()
        if self._client is not None:
            self._client.close()
        if self.embedded is not None:
            self.embedded.stop()

    def suggest(self, *words: str) -> str:
        """A ``redelay`` command to run next, with the --redis, --namespace and --data-dir this
        one was given, quoted so that it works as printed."""
        where: list[str] = []
        for option in ("redis", "namespace", "data_dir"):
            value = getattr(self.args, option, None)
            if value:
                where += [f"--{option.replace('_', '-')}", value]
        return command_line(["redelay", *words, *where])

    def note(self, text: str) -> None:
        """A remark for people, kept off stdout so --json output stays parseable."""
        print(text, file=sys.stderr)
