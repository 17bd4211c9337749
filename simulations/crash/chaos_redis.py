"""The Redis a process-chaos run uses, and the faults that hit it there.

- :class:`OneServer`: one redis-server on a Unix socket with an append-only file; ``redis_restart``
  SIGKILLs it and starts it again on that file.
- :class:`ClusterDeployment` (``--cluster``): a Redis Cluster of 3 masters + 3 replicas on
  loopback (``simulations.crash.local_redis``), every node append-only. ``master_kill`` SIGKILLs a
  master; its replica is promoted, and the killed node is started again a little later, on its
  append-only file, and rejoins as the new master's replica. ``slot_migration`` moves the slot of
  one shard to another master the way ``redis-cli --cluster reshard`` does, while jobs flow.

Both answer the driver the same way: ``url`` (what workers and the producer connect with),
``store`` (the driver's view of the namespace: stats while draining, audit and live state at the
end), ``ready(kind)``, ``fire(kind)`` (returns the fault's detail for the ledger), ``tend()``
(called every tick), ``settle()`` (before the drain: every node back and healthy), ``state()``
for the progress line, ``notes(ledger)`` for the summary, and ``close()``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import redis
from redis.crc import key_slot

from actors.clock import SystemClock
from actors.server.embedded import RedisProcess
from actors.storage.keys import ShardKeys, shard_of
from actors.storage.store import Store, open_store
from actors.storage.topology import connect

from . import faults
from .chaos_settings import ChaosSettings
from .checkers import Percentiles
from .ledger import LedgerData
from .local_redis import HOST, LocalCluster, wait_until

log = logging.getLogger("simulations.crash.chaos")

# How often the driver asks the cluster how a failover is going (it is a few CLUSTER INFO calls).
_CHECK_EVERY_S = 0.1
# A failover or a rejoin that takes longer than this is a failure of the run, not a slow machine.
_RECOVERY_LIMIT_S = 60.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Deployment(Protocol):
    url: str
    store: Store

    def ready(self, kind: str) -> bool:
        """False while the fault ``kind`` must wait (the cluster is healing)."""
        ...

    def fire(self, kind: str) -> str | None: ...

    def tend(self) -> None: ...

    def settle(self) -> None: ...

    def state(self) -> str: ...

    def notes(self, ledger: LedgerData) -> dict[str, Any]: ...

    def close(self) -> None: ...


class OneServer:
    """One redis-server, append-only; the ``redis_restart`` fault kills and restarts it."""

    def __init__(
        self, settings: ChaosSettings, directory: Path, rng: random.Random, namespace: str
    ) -> None:
        self.settings = settings
        self.rng = rng
        self.process = RedisProcess(
            directory, appendonly=True, appendfsync=settings.appendfsync
        ).start()
        self.admin = self.process.client()
        self.url = self.process.url
        self.store: Store = Store(self.admin, namespace, SystemClock())
        self.down = False

    def ready(self, kind: str) -> bool:
        return True

    def fire(self, kind: str) -> str | None:
        if kind == "connection_kill":
            variant = self.rng.choice(["normal", "pubsub", "one"])
            try:
                return faults.kill_connections(self.admin, variant, self.rng)
            except redis.RedisError as exc:
                log.warning("CLIENT KILL failed: %s", exc)
                return None
        if kind == "redis_restart":
            down_s = self.rng.uniform(*self.settings.redis_down_s)
            self.down = True
            self.process.kill()
            time.sleep(down_s)  # Redis stays down this long: part of the fault
            self.process.start()
            self.down = False
            # Logged when Redis is back, so jobs due while it was down count as after it.
            return f"SIGKILL, down {down_s:.2f}s"
        raise ValueError(f"one server has no fault {kind!r}")

    def tend(self) -> None:
        pass

    def settle(self) -> None:
        pass

    def state(self) -> str:
        return f"redis {'down' if self.down else 'up'}"

    def notes(self, ledger: LedgerData) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.admin.close()
        self.process.kill()


@dataclass
class Failover:
    """One master kill, from the SIGKILL to the killed node being back as an in-sync replica."""

    port: int
    shards: list[int]  # the namespace's shards the killed master held
    rejoin_after_s: float  # drawn when the fault fired, so the seed fixes it
    killed_ms: int
    promoted_ms: int | None = None  # every node says cluster_state:ok with 3 masters again
    restart_at: float | None = None  # monotonic
    rejoined_ms: int | None = None  # the killed node replicates its old replica, in sync


@dataclass(frozen=True)
class Migration:
    shard: int
    slot: int
    source: int
    target: int
    took_s: float


def _s(ms: int) -> str:
    return f"{ms / 1000:.2f}s"


class ClusterDeployment:
    """3 masters + 3 replicas on loopback, append-only; masters killed, slots migrated."""

    MASTERS = 3

    def __init__(
        self, settings: ChaosSettings, directory: Path, rng: random.Random, namespace: str
    ) -> None:
        self.settings = settings
        self.rng = rng
        self.namespace = namespace
        self.cluster = LocalCluster(
            directory, masters=self.MASTERS, replicas=1, node_timeout_ms=settings.node_timeout_ms
        ).start()
        try:
            _append_only(self.cluster, settings.appendfsync)
            # Every node is a startup node: a worker (re)started while one is dead still connects.
            self.url = "redis+cluster://" + ",".join(f"{HOST}:{n.port}" for n in self.cluster.nodes)
            self.client = connect(self.url)
            # Records the namespace's shard count before any worker starts.
            self.store = open_store(self.client, namespace, SystemClock(), shards=settings.shards)
        except BaseException:
            self.cluster.kill()
            raise
        self.failovers: list[Failover] = []
        self.migrations: list[Migration] = []
        self._next_check = 0.0

    @property
    def current(self) -> Failover | None:
        """The failover still under way, if any (one at a time)."""
        if self.failovers and self.failovers[-1].rejoined_ms is None:
            return self.failovers[-1]
        return None

    def ready(self, kind: str) -> bool:
        # A master kill or a migration waits until the last kill is healed: killing the
        # promoted replica before its node rejoined would leave slots with no copy at all.
        # A kill also waits a while after that, so each failover's cost can be read alone.
        if kind not in ("master_kill", "slot_migration"):
            return True
        if self.current is not None:
            return False
        if kind == "master_kill" and self.failovers:
            healed_ms = self.failovers[-1].rejoined_ms
            assert healed_ms is not None
            return now_ms() - healed_ms >= self.settings.kill_spacing_s * 1000
        return True

    def fire(self, kind: str) -> str | None:
        if kind == "connection_kill":
            return self._kill_connections()
        if kind == "master_kill":
            return self._kill_master()
        if kind == "slot_migration":
            return self._migrate()
        raise ValueError(f"the cluster has no fault {kind!r}")

    def _slot(self, shard: int) -> int:
        return key_slot(ShardKeys(self.namespace, shard).jobs.encode())

    def _kill_connections(self) -> str | None:
        variant = self.rng.choice(["normal", "pubsub", "one"])
        nodes = [n for n in self.cluster.nodes if n.alive]
        if variant == "one":
            nodes = [self.rng.choice(nodes)]
        done = []
        for node in nodes:
            with contextlib.closing(node.client(socket_timeout=2)) as client:
                try:
                    killed = faults.kill_connections(client, variant, self.rng)
                    done.append(f":{node.port} {killed}")
                except redis.RedisError as exc:
                    log.warning("CLIENT KILL on %s failed: %s", node.port, exc)
        return "; ".join(done) or None

    def _kill_master(self) -> str:
        masters = self.cluster.master_ports()
        port = self.rng.choice(masters)
        rejoin_after_s = self.rng.uniform(*self.settings.rejoin_after_s)
        shards = [
            s
            for s in range(self.settings.shards)
            if self.cluster.master_of_slot(self._slot(s)) == port
        ]
        self.cluster.node_by_port(port).kill()
        self.failovers.append(Failover(port, shards, rejoin_after_s, now_ms()))
        log.info("master %s SIGKILLed (shards %s)", port, shards)
        return f"SIGKILL master {HOST}:{port}, shards {shards}"

    def _migrate(self) -> str:
        shard = self.rng.randrange(self.settings.shards)
        slot = self._slot(shard)
        source = self.cluster.master_of_slot(slot)
        target = self.rng.choice([p for p in self.cluster.master_ports() if p != source])
        pause_s = self.rng.uniform(*self.settings.migration_pause_s)
        started = time.monotonic()
        self.cluster.migrate_slot(slot, target, pause_s=pause_s)
        took_s = time.monotonic() - started
        self.migrations.append(Migration(shard, slot, source, target, took_s))
        return f"shard {shard} (slot {slot}) from :{source} to :{target}, took {took_s:.2f}s"

    def tend(self) -> None:
        """Moves a failover along without blocking the driver: notes the promotion, restarts
        the killed node when its time comes, notes when it is back in sync."""
        failover = self.current
        if failover is None or time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + _CHECK_EVERY_S
        node = self.cluster.node_by_port(failover.port)
        try:
            if failover.promoted_ms is None:
                if self._healthy(replicas_in_sync=False):
                    failover.promoted_ms = now_ms()
                    failover.restart_at = time.monotonic() + failover.rejoin_after_s
                    log.info("failover of %s done", failover.port)
            elif not node.alive:
                assert failover.restart_at is not None
                if time.monotonic() >= failover.restart_at:
                    node.start()
                    log.info("%s restarted", failover.port)
            elif self._healthy(replicas_in_sync=True):
                failover.rejoined_ms = now_ms()
                log.info("%s back as a replica", failover.port)
        except (redis.RedisError, OSError) as exc:
            log.info("cluster check: %s", exc)  # a node busy with the failover; next tick
        elapsed_s = (now_ms() - failover.killed_ms) / 1000
        if elapsed_s > _RECOVERY_LIMIT_S + failover.rejoin_after_s:
            raise RuntimeError(f"the cluster did not recover in {elapsed_s:.0f}s: {failover}")

    def _healthy(self, *, replicas_in_sync: bool) -> bool:
        """Every live node says cluster_state:ok and 3 live masters hold the slots; with
        ``replicas_in_sync`` every node is up and every replica's link to its master too."""
        for node in self.cluster.nodes:
            if not node.alive:
                if replicas_in_sync:
                    return False
                continue
            with contextlib.closing(node.client(socket_timeout=1)) as client:
                info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
                if replicas_in_sync:
                    replication = client.info("replication")
                    if replication.get("role") == "slave" and (
                        replication.get("master_link_status") != "up"
                    ):
                        return False
        return len(self.cluster.master_ports()) == self.MASTERS

    def settle(self) -> None:
        """Finishes a failover under way (restarting the killed node now) before the drain."""
        failover = self.current
        if failover is None:
            return
        deadline = time.monotonic() + _RECOVERY_LIMIT_S
        while failover.rejoined_ms is None and time.monotonic() < deadline:
            if failover.restart_at is not None:
                failover.restart_at = min(failover.restart_at, time.monotonic())
            self._next_check = 0.0
            self.tend()
            time.sleep(_CHECK_EVERY_S)  # polling the cluster's recovery, bounded by the deadline
        if failover.rejoined_ms is None:
            raise RuntimeError(f"the cluster did not recover before the drain: {failover}")

    def state(self) -> str:
        failover = self.current
        if failover is None:
            return "cluster ok"
        if failover.promoted_ms is None:
            return f"cluster failing over :{failover.port}"
        if not self.cluster.node_by_port(failover.port).alive:
            return f"cluster :{failover.port} down"
        return f"cluster :{failover.port} rejoining"

    def notes(self, ledger: LedgerData) -> dict[str, Any]:
        """What the summary says about the cluster: each failover's timings, how late the jobs
        due during one ran, and the migrations."""
        notes: dict[str, Any] = {
            "cluster": f"3 masters + 3 replicas, {self.settings.shards} shards, "
            f"cluster-node-timeout {self.settings.node_timeout_ms}ms, url {self.url}",
        }
        promoted, resumed, rejoined = [], [], []
        for f in self.failovers:
            if f.promoted_ms is None:
                continue
            promoted.append(_s(f.promoted_ms - f.killed_ms))
            # The actors' backoff (50 ms doubling to 5 s) has grown during the outage: their
            # next try, not the promotion, is when deliveries start again.
            after = [r.started_ms for r in ledger.runs if r.started_ms >= f.promoted_ms]
            resumed.append(f"+{_s(min(after) - f.promoted_ms)}" if after else "-")
            if f.rejoined_ms is not None:
                rejoined.append(_s(f.rejoined_ms - f.killed_ms))
        notes["failovers"] = (
            f"{len(self.failovers)} masters killed; replica promoted after "
            f"{', '.join(promoted) or '-'}; first handler start after the promotion "
            f"{', '.join(resumed) or '-'}; killed node back in sync after "
            f"{', '.join(rejoined) or '-'}"
        )
        all_due, on_shards = failover_lateness(ledger, self.failovers, self.settings.shards)
        notes["lateness of runs due during a failover (kill to promotion)"] = _describe(all_due)
        notes["... of those, on the killed master's shards"] = _describe(on_shards)
        took = [m.took_s for m in self.migrations]
        notes["slot migrations"] = (
            f"{len(took)}, each took {min(took):.2f}-{max(took):.2f}s" if took else "0"
        )
        return notes

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        self.cluster.kill()


def failover_lateness(
    ledger: LedgerData, failovers: list[Failover], shards: int
) -> tuple[Percentiles, Percentiles]:
    """Lateness of the runs whose job fell due between a master's kill and its replica's
    promotion: of every shard (with the default cluster-require-full-coverage the whole cluster
    refuses commands while a slot has no master), and of the killed master's shards only."""
    every: list[int] = []
    theirs: list[int] = []
    for run in ledger.runs:
        for f in failovers:
            if f.promoted_ms is not None and f.killed_ms <= run.due_ms <= f.promoted_ms:
                late_ms = run.started_ms - run.due_ms
                every.append(late_ms)
                if shard_of(run.topic, run.id, shards) in f.shards:
                    theirs.append(late_ms)
                break
    return Percentiles.of(every), Percentiles.of(theirs)


def _describe(p: Percentiles) -> str:
    if not p.count:
        return "n=0"
    return f"n={p.count} p50={p.p50_ms}ms p99={p.p99_ms}ms max={p.max_ms}ms"


def _append_only(cluster: LocalCluster, appendfsync: str) -> None:
    """Turns on the append-only file on every node, now and for restarts (local_redis starts
    nodes without persistence; a later ``--appendonly`` argument overrides the earlier one)."""
    for node in cluster.nodes:
        with contextlib.closing(node.client()) as client:
            client.config_set("appendfsync", appendfsync)
            client.config_set("appendonly", "yes")
        node.args += ["--appendonly", "yes", "--appendfsync", appendfsync]

    def written() -> bool:
        for node in cluster.nodes:
            with contextlib.closing(node.client()) as client:
                info = client.info("persistence")
                if not info.get("aof_enabled") or info.get("aof_rewrite_in_progress"):
                    return False
        return True

    wait_until(written, 30, "every node's append-only file")


def deployment(
    settings: ChaosSettings, directory: Path, rng: random.Random, namespace: str
) -> Deployment:
    if settings.cluster:
        return ClusterDeployment(settings, directory / "cluster", rng, namespace)
    return OneServer(settings, directory / "redis", rng, namespace)
