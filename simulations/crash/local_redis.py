"""Private Redis Cluster and Sentinel deployments on loopback, for tests and benchmarks.

Both listen on TCP ports of 127.0.0.1 chosen free at start (a cluster node also needs its bus
port, port + 10000). Every process is started and killed by the object that started it, with
persistence off. Cluster and Sentinel timeouts are short (about a second) so failovers finish in
a few seconds; production values are larger (see docs/scaling.md).
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from actors.server.embedded import find_redis_server

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
_BUS_OFFSET = 10_000  # Redis 6.2 puts the cluster bus at port + 10000 (7.0 can choose it)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


# The lowest port tried. Every port chosen is also under the kernel's ephemeral range, from which
# outgoing connections (the suite's clients, the cluster nodes' links to each other) take their
# local ports: a chosen port could be taken that way between the check and the server's bind.
_LOWEST_PORT = 12_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_ports(count: int, *, with_bus: bool = False, taken: set[int] | None = None) -> list[int]:
    """Ports free right now (and their bus ports), under the ephemeral range; another process
    may still bind one first."""
    rng = random.Random()
    chosen: list[int] = []
    avoid = set(taken or ())
    highest = _ephemeral_low() - (_BUS_OFFSET if with_bus else 0)
    if highest - _LOWEST_PORT < 10 * count:  # a range moved down this far: above it, as before
        highest = 55_000 - _BUS_OFFSET if with_bus else 60_000
    for _ in range(10_000):
        port = rng.randrange(_LOWEST_PORT, highest)
        wanted = [port, port + _BUS_OFFSET] if with_bus else [port]
        if any(p in avoid for p in wanted) or not all(_port_is_free(p) for p in wanted):
            continue
        chosen.append(port)
        avoid.update(wanted)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"could not find {count} free loopback ports")


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Polls ``check`` until it holds; raises TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(0.05)  # polling a condition with a deadline; not a race fix
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what} (last error: {last})")


@dataclass
class ServerProcess:
    """One redis-server (or sentinel) on a loopback TCP port."""

    port: int
    directory: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.args, cwd=self.directory, stdin=subprocess.DEVNULL, start_new_session=True
        )
        wait_until(self.responds, 10, f"redis on port {self.port} to start")
        return self

    def client(self, **kwargs: object) -> redis.Redis:
        options: dict[str, object] = {"socket_timeout": 5, **kwargs}
        return redis.Redis(host=HOST, port=self.port, **options)  # type: ignore[arg-type]

    def responds(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"redis on port {self.port} exited: {self.log_tail()}")
        # One try a check (redis-py's own retries would sit out the deadline): a port another
        # process listens on answers nothing, and the next check sees this server exited.
        client = self.client(socket_timeout=1, retry=Retry(NoBackoff(), 0))
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        finally:
            client.close()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash, losing whatever was not yet replicated."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.directory / "redis.log").read_text()[-1500:]
        return "(no log)"


def _server_args(binary: str, port: int, directory: Path, *extra: str) -> list[str]:
    return [
        binary,
        "--port", str(port),
        "--bind", HOST,
        "--dir", str(directory),
        "--save", "",
        "--appendonly", "no",
        "--maxmemory-policy", "noeviction",
        "--logfile", str(directory / "redis.log"),
        *extra,
    ]  # fmt: skip


def _redis_cli(binary: str) -> str:
    sibling = Path(binary).with_name("redis-cli")
    found = str(sibling) if sibling.exists() else shutil.which("redis-cli")
    if found is None:
        raise RuntimeError("redis-cli is needed to create a cluster and was not found")
    return found


@dataclass
class LocalCluster:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each, on loopback."""

    directory: Path
    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1_500
    binary: str = field(default_factory=find_redis_server)
    nodes: list[ServerProcess] = field(default_factory=list)

    def start(self) -> LocalCluster:
        """Starts the nodes and creates the cluster. A node that exits at start (another
        process bound its port first), a create that fails or a cluster not healthy in time (a
        loaded machine) starts everything again once, on new ports: the second failure is
        raised."""
        try:
            return self._start_once()
        except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as exc:
            log.warning("local cluster did not start (%s); trying again on new ports", exc)
            return self._start_once()

    def _start_once(self) -> LocalCluster:
        self.nodes = []
        total = self.masters * (1 + self.replicas)
        for port in free_ports(total, with_bus=True):
            directory = self.directory / f"node-{port}"
            directory.mkdir(parents=True, exist_ok=True)
            args = _server_args(
                self.binary,
                port,
                directory,
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                # Replicas always try to take over, however stale: failover tests want them to.
                "--cluster-replica-validity-factor", "0",
                "--repl-diskless-sync-delay", "0",
            )  # fmt: skip
            self.nodes.append(ServerProcess(port, directory, args))
        try:
            for node in self.nodes:
                node.start()
            subprocess.run(
                [
                    _redis_cli(self.binary),
                    "--cluster", "create",
                    *(f"{HOST}:{n.port}" for n in self.nodes),
                    "--cluster-replicas", str(self.replicas),
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )  # fmt: skip
            self.wait_healthy()
        except BaseException:
            self.kill()
            raise
        return self

    @property
    def redis_cli(self) -> str:
        return _redis_cli(self.binary)

    @property
    def startup_nodes(self) -> list[ClusterNode]:
        return [ClusterNode(HOST, n.port) for n in self.nodes if n.alive]  # type: ignore[no-untyped-call]

    def client(self, **kwargs: object) -> RedisCluster:
        return RedisCluster(startup_nodes=self.startup_nodes, **kwargs)  # type: ignore[arg-type]

    def url(self) -> str:
        """A URL naming one live node; redelay discovers the others."""
        return f"redis://{HOST}:{next(n.port for n in self.nodes if n.alive)}"

    def node_by_port(self, port: int) -> ServerProcess:
        return next(n for n in self.nodes if n.port == port)

    def wait_healthy(self, timeout_s: float = 30) -> None:
        """Every live node says the cluster is ok, every slot is on a live master, and every
        live replica is in sync with its master."""

        def healthy() -> bool:
            for node in self.nodes:
                if not node.alive:
                    continue
                with contextlib.closing(node.client(socket_timeout=1)) as client:
                    info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
                    text = info.decode() if isinstance(info, bytes) else str(info)
                    if "cluster_state:ok" not in text:
                        return False
                    replication = client.info("replication")
                    if replication.get("role") == "slave" and (
                        replication.get("master_link_status") != "up"
                    ):
                        return False  # a replica still syncing would lose everything on a kill
            masters = self.master_ports()
            return len(masters) == self.masters

        wait_until(healthy, timeout_s, "the cluster to be healthy")

    def _nodes_view(self) -> list[list[str]]:
        live = next(n for n in self.nodes if n.alive)
        with contextlib.closing(live.client(socket_timeout=2)) as client:
            raw = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return [line.split() for line in text.strip().splitlines()]

    def master_ports(self) -> list[int]:
        """Ports of live masters that own slots, as a live node sees them."""
        ports = []
        for parts in self._nodes_view():
            flags = parts[2].split(",")
            if "master" in flags and "fail" not in flags and len(parts) > 8:
                port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
                if self.node_by_port(port).alive:
                    ports.append(port)
        return sorted(ports)

    def node_id(self, port: int) -> str:
        for parts in self._nodes_view():
            if int(parts[1].split("@")[0].rsplit(":", 1)[1]) == port:
                return parts[0]
        raise KeyError(port)

    def master_of_slot(self, slot: int) -> int:
        for parts in self._nodes_view():
            flags = parts[2].split(",")
            if "master" not in flags or "fail" in flags:
                continue
            for spec in parts[8:]:
                if spec.startswith("["):
                    continue  # a migrating/importing marker
                low, _, high = spec.partition("-")
                if int(low) <= slot <= int(high or low):
                    return int(parts[1].split("@")[0].rsplit(":", 1)[1])
        raise KeyError(slot)

    def migrate_slot(self, slot: int, to_port: int, *, pause_s: float = 0.0) -> None:
        """Moves ``slot`` to the master on ``to_port`` the way ``redis-cli --cluster reshard``
        does, one slot: IMPORTING/MIGRATING, MIGRATE the keys in batches, then SETSLOT NODE.
        ``pause_s`` widens the window in which the slot is migrating but its keys not yet moved.
        """
        from_port = self.master_of_slot(slot)
        if from_port == to_port:
            return
        source_id, target_id = self.node_id(from_port), self.node_id(to_port)
        source = self.node_by_port(from_port).client()
        target = self.node_by_port(to_port).client()
        try:
            target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)  # type: ignore[no-untyped-call]
            source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)  # type: ignore[no-untyped-call]
            time.sleep(pause_s)  # the window under test, not a race fix
            while True:
                keys = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)  # type: ignore[no-untyped-call]
                if not keys:
                    break
                source.execute_command("MIGRATE", HOST, to_port, "", 0, 5000, "KEYS", *keys)  # type: ignore[no-untyped-call]
            # The target first, so the slot always has an owner that accepts it.
            for port in [to_port, from_port, *self.master_ports()]:
                with contextlib.closing(self.node_by_port(port).client()) as client:
                    client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)  # type: ignore[no-untyped-call]
        finally:
            source.close()
            target.close()

    def flushall(self) -> None:
        for port in self.master_ports():
            with contextlib.closing(self.node_by_port(port).client()) as client:
                client.flushall()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


@dataclass
class LocalSentinel:
    """One master, ``replicas`` replicas and ``sentinels`` sentinels (quorum 2), on loopback."""

    directory: Path
    replicas: int = 1
    sentinels: int = 3
    service: str = "redelay"
    down_after_ms: int = 1_000
    binary: str = field(default_factory=find_redis_server)
    servers: list[ServerProcess] = field(default_factory=list)
    sentinel_processes: list[ServerProcess] = field(default_factory=list)

    def start(self) -> LocalSentinel:
        ports = free_ports(1 + self.replicas + self.sentinels)
        data_ports, sentinel_ports = ports[: 1 + self.replicas], ports[1 + self.replicas :]
        master_port = data_ports[0]
        try:
            for n, port in enumerate(data_ports):
                directory = self.directory / f"redis-{port}"
                directory.mkdir(parents=True, exist_ok=True)
                extra: tuple[str, ...] = ()
                if n > 0:
                    extra = ("--replicaof", HOST, str(master_port))
                server = ServerProcess(
                    port,
                    directory,
                    _server_args(
                        self.binary, port, directory, "--repl-diskless-sync-delay", "0", *extra
                    ),
                )
                self.servers.append(server.start())
            wait_until(self._replicas_in_sync, 30, "replicas to sync with the master")
            # Each sentinel is told its id and its peers up front: found by hello messages they
            # take seconds, and a failover needs the quorum to know each other.
            ids = {port: f"{port:040x}" for port in sentinel_ports}
            for port in sentinel_ports:
                directory = self.directory / f"sentinel-{port}"
                directory.mkdir(parents=True, exist_ok=True)
                lines = [
                    f"port {port}",
                    f"bind {HOST}",
                    f"dir {directory}",
                    f"logfile {directory / 'redis.log'}",
                    f"sentinel myid {ids[port]}",
                    f"sentinel monitor {self.service} {HOST} {master_port} 2",
                    f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
                    f"sentinel failover-timeout {self.service} 10000",
                    f"sentinel parallel-syncs {self.service} 1",
                ]
                lines += [
                    f"sentinel known-replica {self.service} {HOST} {replica}"
                    for replica in data_ports[1:]
                ]
                lines += [
                    f"sentinel known-sentinel {self.service} {HOST} {other} {ids[other]}"
                    for other in sentinel_ports
                    if other != port
                ]
                conf = directory / "sentinel.conf"
                conf.write_text("\n".join(lines) + "\n")
                sentinel = ServerProcess(port, directory, [self.binary, str(conf), "--sentinel"])
                self.sentinel_processes.append(sentinel.start())
            wait_until(self._sentinels_agree, 30, "sentinels to see the master and replicas")
        except BaseException:
            self.kill()
            raise
        return self

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(HOST, s.port) for s in self.sentinel_processes]

    def url(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinel_addresses)
        return f"redis+sentinel://{hosts}/{self.service}"

    def sentinel(self) -> Sentinel:
        return Sentinel(self.sentinel_addresses, socket_timeout=2)

    def master_port(self) -> int:
        _, port = self.sentinel().discover_master(self.service)
        return int(port)

    def server_by_port(self, port: int) -> ServerProcess:
        return next(s for s in self.servers if s.port == port)

    def wait_for_new_master(self, old_port: int, timeout_s: float = 30) -> int:
        """Waits until the sentinels name a master other than ``old_port`` that says it is one."""
        found: list[int] = []

        def promoted() -> bool:
            port = self.master_port()
            if port == old_port:
                return False
            with contextlib.closing(self.server_by_port(port).client(socket_timeout=1)) as client:
                if client.info("replication").get("role") != "master":
                    return False
            found.append(port)
            return True

        wait_until(promoted, timeout_s, f"a master other than {old_port}")
        return found[-1]

    def wait_for_replica(self, port: int, timeout_s: float = 30) -> None:
        """Waits until the server on ``port`` replicates the current master, in sync."""

        def in_sync() -> bool:
            with contextlib.closing(self.server_by_port(port).client(socket_timeout=1)) as client:
                info = client.info("replication")
            return bool(
                info.get("role") == "slave"
                and info.get("master_port") == self.master_port()
                and info.get("master_link_status") == "up"
            )

        wait_until(in_sync, timeout_s, f"{port} to replicate the new master")

    def _replicas_in_sync(self) -> bool:
        for replica in self.servers[1:]:
            with contextlib.closing(replica.client(socket_timeout=1)) as client:
                if client.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _sentinels_agree(self) -> bool:
        for process in self.sentinel_processes:
            with contextlib.closing(process.client(socket_timeout=1)) as client:
                master: Any = client.sentinel_master(self.service)
                if master.get("num-slaves", 0) < self.replicas:
                    return False
                if master.get("num-other-sentinels", 0) < self.sentinels - 1:
                    return False
        return True

    def kill(self) -> None:
        for process in [*self.sentinel_processes, *self.servers]:
            process.kill()

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
