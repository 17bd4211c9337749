"""Every setting of a process-chaos run, derived from its seed and duration (printed at start).

The worker processes receive the settings as JSON in an environment variable, so the driver and
the workers agree without deriving twice.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .det_settings import TopicPlan
from .workload import DelayMix, HandlerMix

# Fault kinds of the chaos simulator (handler faults happen inside the workers).
FAULT_KINDS = (
    "worker_sigkill",  # SIGKILL a worker process; restarted later
    "worker_sigterm",  # SIGTERM a worker process (graceful stop); restarted later
    "connection_kill",  # CLIENT KILL on the server: every normal connection, pub/sub, or one
    "redis_restart",  # SIGKILL redis-server and start it again on its append-only file
    "master_kill",  # --cluster: SIGKILL a master; its replica takes over; back later as a replica
    "slot_migration",  # --cluster: move one shard's slot to another master while jobs flow
    "handler_error",  # a handler raises (counted from the runs)
    "handler_hang",  # a handler sleeps past its timeout
    # --production-faults (one server only):
    "network_blackhole",  # a worker's proxy stops forwarding, sockets kept open; healed later
    "network_forget",  # a worker's proxy forgets its connections: dead, and nobody is told
    "clock_step",  # a worker's wall clock jumps forward or back (and stays so for its slot)
    "handler_crash",  # a poison job's handler kills its worker process, every time
)

# Every topic's lost_max in the chaos workers (redelay's default): the losses held against a job
# before it is quarantined, which the innocent_dead and quarantine checks hold the run to.
LOST_MAX = 3

# Fault kinds --production-faults adds, scheduled from a random source of their own.
PRODUCTION_FAULTS = ("clock_step", "network_blackhole", "network_forget")


@dataclass(frozen=True)
class ChaosSettings:
    seed: int
    duration_s: float  # jobs are added and faults fire for this long; then the drain
    workers: int
    topics: tuple[TopicPlan, ...]
    rate_per_s: float
    delays: DelayMix
    handler: HandlerMix
    cancel_share: float
    fault_interval_s: dict[str, float]  # scheduled fault kind -> mean seconds between
    restart_after_s: tuple[float, float]
    redis_down_s: tuple[float, float]
    sweep_interval_s: float
    watchdog_interval_s: float
    stop_grace_s: float
    appendfsync: str
    drain_limit_s: float
    burst_every_s: tuple[float, float] = (3.0, 8.0)  # 30-80 jobs due at once, some cancelled
    storm_s: tuple[float, float] = (4.0, 8.0)
    calm_s: tuple[float, float] = (10.0, 15.0)
    # --cluster: a local Redis Cluster (3 masters + 3 replicas) and a namespace of `shards`.
    cluster: bool = False
    shards: int = 1
    node_timeout_ms: int = 1_500  # cluster-node-timeout: a dead master is failed over after it
    rejoin_after_s: tuple[float, float] = (0.0, 0.0)  # a killed master restarts this long after
    migration_pause_s: tuple[float, float] = (0.0, 0.0)  # a slot stays MIGRATING this long
    add_wait_ms: int = 0  # adds wait (WAIT) this long for a replica; 0: they do not wait
    kill_spacing_s: float = 0.0  # a master kill waits this long after the last one healed
    # An operator pauses a topic this many times, each for a while (no lease may take from it).
    pauses: int = 0
    pause_s: tuple[float, float] = (0.5, 3.0)
    # --production-faults: a proxy between each worker and Redis that blackholes (for a while)
    # and forgets connections, steps of workers' wall clocks, and poison jobs whose handler
    # kills its worker process every time.
    production_faults: bool = False
    production_interval_s: dict[str, float] = field(default_factory=dict)
    blackhole_s: tuple[float, float] = (0.0, 0.0)
    clock_step_ms: tuple[int, int] = (0, 0)  # how far one step moves a clock, either way
    clock_offset_max_ms: int = 0  # a slot's clock stays within this of the true time
    poison_jobs: int = 0

    @property
    def fault_window_ms(self) -> int:
        """A delivery this long after a fault still counts as after it: a lease to expire and a
        sweep to find it, plus a second. (A Redis restart is logged when Redis is back.)"""
        lease = max(t.lease_ms for t in self.topics)
        return int(lease + 1000 * self.sweep_interval_s + 1_000)

    def to_json(self) -> str:
        return json.dumps(self.as_dict())

    @classmethod
    def from_json(cls, text: str) -> ChaosSettings:
        raw: dict[str, Any] = json.loads(text)
        h: dict[str, Any] = raw["handler"]
        return cls(
            seed=raw["seed"],
            duration_s=raw["duration_s"],
            workers=raw["workers"],
            topics=tuple(_topic_from(t) for t in raw["topics"]),
            rate_per_s=raw["rate_per_s"],
            delays=DelayMix(tuple((float(w), int(lo), int(hi)) for w, lo, hi in raw["delays"])),
            handler=HandlerMix(
                error=h["error"],
                retry=h["retry"],
                hang=h["hang"],
                hang_ms=_pair(h["hang_ms"]),
                retry_ms=_pair(h["retry_ms"]),
                work_ms=_pair(h["work_ms"]),
                work_share=h["work_share"],
            ),
            cancel_share=raw["cancel_share"],
            fault_interval_s=raw["fault_interval_s"],
            restart_after_s=(raw["restart_after_s"][0], raw["restart_after_s"][1]),
            redis_down_s=(raw["redis_down_s"][0], raw["redis_down_s"][1]),
            sweep_interval_s=raw["sweep_interval_s"],
            watchdog_interval_s=raw["watchdog_interval_s"],
            stop_grace_s=raw["stop_grace_s"],
            appendfsync=raw["appendfsync"],
            drain_limit_s=raw["drain_limit_s"],
            storm_s=(raw["storm_s"][0], raw["storm_s"][1]),
            calm_s=(raw["calm_s"][0], raw["calm_s"][1]),
            burst_every_s=(raw["burst_every_s"][0], raw["burst_every_s"][1]),
            cluster=raw["cluster"],
            shards=raw["shards"],
            node_timeout_ms=raw["node_timeout_ms"],
            rejoin_after_s=(raw["rejoin_after_s"][0], raw["rejoin_after_s"][1]),
            migration_pause_s=(raw["migration_pause_s"][0], raw["migration_pause_s"][1]),
            add_wait_ms=raw["add_wait_ms"],
            kill_spacing_s=raw["kill_spacing_s"],
            pauses=raw["pauses"],
            pause_s=(float(raw["pause_s"][0]), float(raw["pause_s"][1])),
            production_faults=raw["production_faults"],
            production_interval_s=raw["production_interval_s"],
            blackhole_s=(raw["blackhole_s"][0], raw["blackhole_s"][1]),
            clock_step_ms=(raw["clock_step_ms"][0], raw["clock_step_ms"][1]),
            clock_offset_max_ms=raw["clock_offset_max_ms"],
            poison_jobs=raw["poison_jobs"],
        )

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["delays"] = [list(r) for r in self.delays.ranges]
        found["handler"] = self.handler.as_dict()
        return found

    def with_topics(self, topics: tuple[TopicPlan, ...]) -> ChaosSettings:
        timeouts = [t.timeout_ms for t in topics]
        handler = replace(self.handler, hang_ms=(min(timeouts) + 200, min(timeouts) + 2_000))
        # The drain waits for every job, so for the longest retry schedule and lease: the
        # user's, not the built-in topics' the limit was derived from (else their jobs "stick").
        extra_ms = max(sum(t.retry_ms) for t in topics) - max(sum(t.retry_ms) for t in self.topics)
        extra_ms += 5 * (max(t.lease_ms for t in topics) - max(t.lease_ms for t in self.topics))
        drain_limit_s = self.drain_limit_s + max(0, extra_ms) / 1000
        return replace(self, topics=topics, handler=handler, drain_limit_s=drain_limit_s)

    def describe(self) -> str:
        topics = "; ".join(
            f"{t.name} (concurrency {t.concurrency}, prefetch {t.prefetch}, "
            f"timeout {t.timeout_ms}ms, lease {t.lease_ms}ms, retry {list(t.retry_ms)})"
            for t in self.topics
        )
        faults = ", ".join(f"{k} every ~{s:.1f}s" for k, s in self.fault_interval_s.items())
        h = self.handler
        if self.cluster:
            redis_line = (
                f"Redis Cluster of 3 masters + 3 replicas (cluster-node-timeout "
                f"{self.node_timeout_ms}ms, appendonly, appendfsync {self.appendfsync}), "
                f"{self.shards} shards; a killed master restarts {self.rejoin_after_s[0]:g}-"
                f"{self.rejoin_after_s[1]:.1f}s after its replica took over, and the next kill "
                f"waits until it is back in sync and {self.kill_spacing_s:g}s more; a "
                f"migrating slot waits {self.migration_pause_s[0]:g}-"
                f"{self.migration_pause_s[1]:.2f}s before its keys move; adds wait up to "
                f"{self.add_wait_ms}ms for a replica (WAIT 1)"
            )
        else:
            redis_line = (
                f"one redis-server (appendonly, appendfsync {self.appendfsync}), down "
                f"{self.redis_down_s[0]:g}-{self.redis_down_s[1]:.1f}s when restarted"
            )
        return "\n".join(
            [
                f"seed {self.seed}: {self.duration_s:g} s of chaos, {self.workers} worker "
                f"processes, {self.rate_per_s:.0f} jobs/s and a burst of 30-80 every "
                f"{self.burst_every_s[0]:g}-{self.burst_every_s[1]:g}s",
                f"topics: {topics}",
                f"delays: {self.delays.describe()}; cancel {self.cancel_share:.0%} of jobs",
                f"handlers: {h.work_ms[0]}-{h.work_ms[1]}ms of work, error {h.error:.0%}, retry "
                f"{h.retry:.0%}, hang {h.hang:.1%} ({h.hang_ms[0]}-{h.hang_ms[1]}ms)",
                f"faults: {faults}, in storms of {self.storm_s[0]:g}-{self.storm_s[1]:g}s "
                f"between calm periods of {self.calm_s[0]:g}-{self.calm_s[1]:g}s",
                redis_line,
                f"workers back after {self.restart_after_s[0]:g}-{self.restart_after_s[1]:.1f}s",
                f"sweep every {self.sweep_interval_s:g}s, watchdog every "
                f"{self.watchdog_interval_s:g}s, SIGTERM grace {self.stop_grace_s:g}s",
                f"pauses: {self.pauses} of a topic, {self.pause_s[0]:g}-{self.pause_s[1]:g}s each",
                *([self._describe_production()] if self.production_faults else []),
            ]
        )

    def _describe_production(self) -> str:
        faults = ", ".join(f"{k} every ~{s:.1f}s" for k, s in self.production_interval_s.items())
        return (
            f"production faults: {faults}; a blackhole lasts {self.blackhole_s[0]:g}-"
            f"{self.blackhole_s[1]:.1f}s; a clock steps {self.clock_step_ms[0]}-"
            f"{self.clock_step_ms[1]}ms either way, staying within {self.clock_offset_max_ms}ms; "
            f"{self.poison_jobs} poison jobs kill their worker on every run"
        )


def derive(
    seed: int,
    duration_s: float,
    appendfsync: str = "always",
    cluster_shards: int | None = None,
    backlog: bool = False,
    production_faults: bool = False,
) -> ChaosSettings:
    """The settings of a run; ``cluster_shards`` switches cluster mode on with that many shards,
    ``backlog`` the backlogged workload (``_backlogged``), ``production_faults`` the network,
    clock and poison faults (``_with_production_faults``; one server only).

    The cluster's own settings come from a random source of their own, so a seed gives the same
    workload with and without ``--cluster``."""
    rng = random.Random(f"{seed}:chaos")
    topics = tuple(_topic(rng, name) for name in ["orders", "emails"][: rng.randint(1, 2)])
    timeout = min(t.timeout_ms for t in topics)
    max_delay_ms = int(min(15_000, duration_s * 1000 / 3))
    handler = HandlerMix(
        error=rng.uniform(0.05, 0.15),
        retry=rng.uniform(0.0, 0.03),
        hang=rng.uniform(0.003, 0.01),
        hang_ms=(timeout + 200, timeout + 2_000),
        retry_ms=(0, 1_000),
        work_ms=(1, 40),
        work_share=0.8,
    )
    retry_total_ms = max(sum(t.retry_ms) for t in topics)
    lease_ms = max(t.lease_ms for t in topics)
    settings = ChaosSettings(
        seed=seed,
        duration_s=duration_s,
        workers=rng.randint(2, 3),
        topics=topics,
        rate_per_s=rng.uniform(15, 40),
        delays=DelayMix(
            (
                (rng.uniform(0.2, 0.4), 0, 0),
                (rng.uniform(0.3, 0.5), 10, 2_000),
                (rng.uniform(0.1, 0.3), 2_000, max(2_001, max_delay_ms)),
            )
        ),
        handler=handler,
        cancel_share=rng.uniform(0.03, 0.08),
        fault_interval_s={
            "worker_sigkill": rng.uniform(4, 8),
            "worker_sigterm": rng.uniform(4, 8),
            "connection_kill": rng.uniform(3, 6),
            "redis_restart": rng.uniform(10, 20),
        },
        restart_after_s=(0.2, rng.uniform(1.0, 3.0)),
        redis_down_s=(0.0, rng.uniform(0.5, 2.0)),
        sweep_interval_s=rng.choice([0.5, 1.0]),
        watchdog_interval_s=5.0,
        stop_grace_s=rng.choice([1.0, 3.0]),
        appendfsync=appendfsync,
        drain_limit_s=60 + (max_delay_ms + retry_total_ms + 5 * lease_ms) / 1000,
        # Not drawn from rng, so every other setting of a seed stays what it was.
        pauses=max(1, int(duration_s // 20)),
    )
    if backlog:
        settings = _backlogged(settings)
    if production_faults:
        settings = _with_production_faults(settings)
    return settings if cluster_shards is None else _clustered(settings, cluster_shards)


def _with_production_faults(settings: ChaosSettings) -> ChaosSettings:
    """The faults of docs/simulations.md#production-faults, from a random source of their own:
    the seed's workload and its other faults stay what they are."""
    rng = random.Random(f"{settings.seed}:production")
    lease_ms = max(t.lease_ms for t in settings.topics)
    retry_total_ms = max(sum(t.retry_ms) for t in settings.topics)
    return replace(
        settings,
        production_faults=True,
        production_interval_s={
            "clock_step": rng.uniform(4, 8),
            "network_blackhole": rng.uniform(6, 12),
            "network_forget": rng.uniform(5, 10),
        },
        # Long enough that a worker's leases expire and its subscription is found dead.
        blackhole_s=(1.0, rng.uniform(4.0, 9.0)),
        clock_step_ms=(1_000, rng.choice([30_000, 60_000])),
        clock_offset_max_ms=120_000,
        poison_jobs=rng.randint(2, 3),
        # Each poison job takes a worker down once per lease until it ends: a restart and a
        # lease each time.
        drain_limit_s=settings.drain_limit_s + 5 * (retry_total_ms + 2 * lease_ms) / 1000,
    )


# --backlog: jobs/s the producer adds, and each topic's prefetch.
BACKLOG_RATE_PER_S = 250.0
BACKLOG_PREFETCH = 120
BACKLOG_SUSPECT_DRAIN_S = 180.0


def _backlogged(settings: ChaosSettings) -> ChaosSettings:
    """More jobs than the handlers keep up with, and pools of more than 64 slots: leases come
    back full, so each pool leases the slots its acks free and keeps several ack-and-lease
    pipelines on their way (actors/runtime/_pipelines.py), a path the default workload (15-40
    jobs/s, at most 24 slots) never takes. Derived, not drawn: the seed's other settings and
    faults stay what they are. The handlers run about 270 jobs/s between them, so a run of 30 s
    drains in about as long again."""
    topics = tuple(replace(t, prefetch=max(t.prefetch, BACKLOG_PREFETCH)) for t in settings.topics)
    # A killed worker's leases come back as suspects, which run one at a time per worker with a
    # wait of about 1 s after each (lua/lease-10.lua): a few kills of full pools leave hundreds
    # to drain at a few per second.
    drain_limit_s = settings.drain_limit_s + BACKLOG_SUSPECT_DRAIN_S
    return replace(
        settings, topics=topics, rate_per_s=BACKLOG_RATE_PER_S, drain_limit_s=drain_limit_s
    )


def _clustered(settings: ChaosSettings, shards: int) -> ChaosSettings:
    rng = random.Random(f"{settings.seed}:cluster")
    intervals = {k: v for k, v in settings.fault_interval_s.items() if k != "redis_restart"}
    # A master kill costs a failover (about twice the node timeout) and a rejoin; one at a time.
    intervals["master_kill"] = rng.uniform(10, 20)
    intervals["slot_migration"] = rng.uniform(5, 10)
    return replace(
        settings,
        cluster=True,
        shards=shards,
        fault_interval_s=intervals,
        redis_down_s=(0.0, 0.0),
        rejoin_after_s=(0.2, rng.uniform(1.0, 4.0)),
        migration_pause_s=(0.0, rng.uniform(0.05, 0.5)),
        add_wait_ms=500,
        kill_spacing_s=5.0,
    )


def _pair(values: list[int]) -> tuple[int, int]:
    return (int(values[0]), int(values[1]))


def _topic_from(raw: dict[str, Any]) -> TopicPlan:
    return TopicPlan(
        raw["name"],
        raw["concurrency"],
        raw["timeout_ms"],
        raw["lease_ms"],
        tuple(raw["retry_ms"]),
        raw.get("prefetch", 0),
    )


def _topic(rng: random.Random, name: str) -> TopicPlan:
    timeout = rng.choice([1_000, 2_000])
    concurrency = rng.randint(2, 8)
    return TopicPlan(
        name=name,
        concurrency=concurrency,
        timeout_ms=timeout,
        lease_ms=2 * timeout,
        retry_ms=tuple(rng.choice([100, 500, 1_000]) for _ in range(rng.randint(2, 4))),
        # Topics with an odd concurrency (CI's seed 5 among them) prefetch twice as many jobs,
        # so runs cover both a worker killed with jobs waiting for its threads and one without.
        # Derived, not drawn: a new draw would change what every existing seed plays.
        prefetch=2 * concurrency if concurrency % 2 else 0,
    )
