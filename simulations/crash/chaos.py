"""Process chaos: real worker processes (``redelay worker``) and a producer adding jobs at a steady
rate with mixed delays, while this driver SIGKILLs and SIGTERMs workers and restarts them, kills
client connections on the Redis side, and restarts redis-server itself (append-only file,
``appendfsync always``). Bounded in time; it stops by itself.

With ``--production-faults`` each worker reaches Redis through a proxy of its own that blackholes
and forgets connections (simulations.crash.chaos_network), workers' wall clocks step forward and
back, and a few poison jobs kill whichever worker runs them, every time.

With ``--cluster`` the same runs on a local Redis Cluster of 3 masters + 3 replicas (every node
append-only) and a namespace of ``--shards`` shards (3); instead of restarting redis-server the
driver kills masters (their replicas take over; the killed node comes back as a replica) and
migrates a shard's slot to another master while jobs flow (simulations.crash.chaos_redis).

    python -m simulations.crash.chaos --seed 7 --duration 40           # CI-sized
    python -m simulations.crash.chaos --seed 7 --duration 600 --json   # a soak
    python -m simulations.crash.chaos --seed 7 --duration 30 --cluster --shards 3

After ``--duration`` seconds the faults and the producer stop, every worker is brought back, and
the run waits until every job is finished (or a drain limit passes); then the checkers read the
ledger, the audit stream and the live state. The seed fixes the settings, the jobs and the fault
schedule; real processes and real time do the rest, so two runs of a seed differ in detail.
Exit codes: simulations.crash.checkers.EXIT_CODES (docs/simulations.md).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import logging
import math
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import redis

from actors import AuditRetention, DelayQueue, JobExistsError, schedules
from actors.errors import NotReplicatedError, RedisServerNotFound
from actors.lifecycle import PENDING_STATES, State
from actors.storage.store import Store
from actors.values import Durability, JobInfo

from . import chart, report
from ._processes import Workers
from ._user_app import load_app_handlers, load_bodies
from .chaos_network import WorkerNetwork
from .chaos_redis import OneServer, deployment
from .chaos_settings import (
    BACKLOG_PREFETCH,
    BACKLOG_RATE_PER_S,
    LOST_MAX,
    PRODUCTION_FAULTS,
    ChaosSettings,
    derive,
)
from .chaos_worker import (
    CLOCK_FILE_ENV,
    DEFAULT_NAMESPACE,
    ORACLE_URL_ENV,
    POISON_PREFIX,
)
from .checkers import (
    EXIT_INTERNAL,
    EXIT_NO_REDIS,
    EXIT_USAGE,
    Evidence,
    check_all,
    exit_codes_text,
)
from .ledger import JobRow, Ledger
from .user_check import APP_DIR_ENV, load_check, prepare_app_dir, run_check
from .workload import fault_times, storms

log = logging.getLogger("simulations.crash.chaos")

# A worker's clock, synced to Redis TIME, is behind the server by at most the round trip of the
# sample it kept and never ahead (actors/clock.py, best_offset). A job is carried once the
# server's time is past its due time, but a handler's start read on a worker's clock can be up to
# that round trip earlier than the server's: the allowance is the largest round trip measured,
# plus whole milliseconds (each side truncates).
EARLY_TOLERANCE_FLOOR_MS = 2
_TICK_S = 0.05
# A worker process this old has synced its clock with Redis (it starts in 1-3 s on 2 busy cores).
_SETTLED_WORKER_S = 4.0
# A master kill or slot migration due while the cluster heals from the last kill waits this long.
_DEFER_S = 0.5
DEFAULT_CLUSTER_SHARDS = 3  # one per master, if the hash tags land that way


def now_ms() -> int:
    return int(time.time() * 1000)


# A cancel call that raised: it may or may not have run.
CANCEL_UNKNOWN = "unknown"


class ClusterStartError(RuntimeError):
    """The machine cannot run a local Redis Cluster (no redis-cli, no free ports, ...)."""


class Producer(threading.Thread):
    """Adds jobs at a steady rate and cancels some of them; writes both to the ledger. A job is
    in the ledger once ``add`` returned for it; an add that fails (Redis down) is retried as is.

    On a cluster adds wait for a replica (``Durability``): an add the master acknowledged but
    had not replicated when it was killed would be lost, as docs/scaling.md says, and the
    ``lost`` check would rightly fail the run."""

    def __init__(
        self, settings: ChaosSettings, url: str, ledger: Ledger, body: Any, namespace: str
    ) -> None:
        super().__init__(name="producer", daemon=True)
        self.settings = settings
        self.ledger = ledger
        self.body = body
        self.queue = DelayQueue(
            url,
            namespace,
            retention=AuditRetention("NONE"),
            producer_only=True,
            shards=settings.shards if settings.cluster else None,
            durability=Durability(1, settings.add_wait_ms) if settings.add_wait_ms else None,
        )
        self.rng = random.Random(f"{settings.seed}:producer")
        self.poison_plan = poison_plan(settings)
        self.stopping = threading.Event()
        self.added = 0
        self.cancels: list[tuple[float, str, str]] = []
        self.add_replies_lost = 0
        self.not_replicated = 0
        self.retries = 0

    def run(self) -> None:
        s = self.settings
        owed = 0.0
        n = 0
        next_tick = time.monotonic()
        next_burst = next_tick + self.rng.uniform(*s.burst_every_s)
        started = next_tick
        poisons = list(self.poison_plan)
        while not self.stopping.is_set():
            while poisons and poisons[0][0] <= time.monotonic() - started:
                _, topic, job_id = poisons.pop(0)
                self._add([(topic, job_id, 0)], cancellable=False)
            if time.monotonic() >= next_burst:
                next_burst += self.rng.uniform(*s.burst_every_s)
                n += 1
                self._burst(f"b{n:07d}")
            owed += s.rate_per_s * _TICK_S
            count = int(owed)
            owed -= count
            if count:
                batch = []
                for _ in range(count):
                    n += 1
                    topic = self.rng.choice(s.topics).name
                    batch.append((topic, f"c{n:07d}", s.delays.sample(self.rng)))
                self._add(batch)
            self._cancel_due()
            next_tick += _TICK_S
            self.stopping.wait(max(0.0, next_tick - time.monotonic()))
        self.queue.close()

    def _burst(self, prefix: str) -> None:
        """Jobs due at once, more than the pools take: some are cancelled while ready."""
        topic = self.rng.choice(self.settings.topics).name
        batch = [(topic, f"{prefix}-{m:03d}", 0) for m in range(self.rng.randint(30, 80))]
        self._add(batch, cancel_share=0.0)
        for _, job_id, _ in batch:
            if self.rng.random() < 0.1:
                at = time.monotonic() + self.rng.uniform(0.0, 0.3)
                heapq.heappush(self.cancels, (at, topic, job_id))

    def _add(
        self,
        batch: list[tuple[str, str, int]],
        cancel_share: float | None = None,
        cancellable: bool = True,
    ) -> None:
        """``cancellable=False``: no cancel is drawn (nor a draw made: the seed's workload after it
        stays what it was)."""
        base = self.queue.clock.now_ms()
        specs = [
            {"topic": t, "id": i, "body": self.body(t, i), "at": (base + d) / 1000}
            for t, i, d in batch
        ]
        while True:
            try:
                self.queue.add_many(specs)
                break
            except JobExistsError:
                self.add_replies_lost += 1  # an earlier try went in; its reply was lost
                break
            except NotReplicatedError:
                # On the master, not yet on its replica: the master just took over and its
                # old node has not rejoined. The driver kills no master before that node is
                # back in sync, so these jobs are owed like any other.
                self.not_replicated += 1
                break
            except redis.RedisError:
                self.retries += 1
                if self.stopping.wait(0.1):
                    return  # never added, so never owed: not in the ledger
        self.ledger.add_jobs([JobRow(t, i, base + d, base) for t, i, d in batch])
        self.added += len(batch)
        if not cancellable:
            return
        share = self.settings.cancel_share if cancel_share is None else cancel_share
        for t, i, d in batch:
            if self.rng.random() < share:
                at = time.monotonic() + self.rng.uniform(0, d / 1000 + 2.0)
                heapq.heappush(self.cancels, (at, t, i))

    def _cancel_due(self) -> None:
        while self.cancels and self.cancels[0][0] <= time.monotonic():
            _, topic, job_id = heapq.heappop(self.cancels)
            result: str
            try:
                result = self.queue.store.cancel(topic, job_id)
            except redis.RedisError:
                # No answer: Redis was down, or the connection died after the cancel ran (a
                # lost reply). Recorded as asked, so a job it did cancel is not a "lost" one; the
                # checks that hold a cancel to its answer skip "unknown".
                result = CANCEL_UNKNOWN
            self.ledger.cancel(topic, job_id, self.queue.clock.now_ms(), result)


# A drain with this many jobs left or fewer names them.
DRAIN_NAMED = 3


def pending_jobs(store: Store, limit: int) -> list[str]:
    """The first few jobs a drain waits for, each with what it waits for (its due time, its
    lease's deadline): a drain that hangs on one job says which, and until when."""
    now_ms = store.clock.now_ms()
    nexts = {i.pending_id for i in store.schedules() if i.pending_id is not None}
    shown: list[str] = []
    for topic, counts in sorted(store.stats().items()):
        for state in PENDING_STATES:
            if not counts.get(state):
                continue
            for info in store.jobs(topic, state, limit=limit).jobs:
                if info.id in nexts:
                    continue  # a schedule's next occurrence: never waited for
                shown.append(f"{info.topic}/{info.id} {_waiting_for(info, now_ms)}")
                if len(shown) == limit:
                    return shown
    return shown


def _waiting_for(info: JobInfo, now_ms: int) -> str:
    if info.state is State.DELAYED:
        return f"delayed, due in {(info.due_ms - now_ms) / 1000:.1f}s (attempt {info.attempt})"
    if info.state is State.LEASED and info.lease_deadline_ms is not None:
        left_s = (info.lease_deadline_ms - now_ms) / 1000
        return f"leased, lease ends in {left_s:.1f}s (attempt {info.attempt})"
    return f"{info.state.value} (attempt {info.attempt})"


def poison_plan(settings: ChaosSettings) -> list[tuple[float, str, str]]:
    """When the producer adds each poison job (seconds in, topic, id), in order; from a random
    source of its own. They come in the run's first two thirds, so each has time to end."""
    rng = random.Random(f"{settings.seed}:poison")
    plan = [
        (rng.uniform(0, settings.duration_s * 2 / 3), rng.choice(settings.topics).name)
        for _ in range(settings.poison_jobs)
    ]
    return [(at, topic, f"{POISON_PREFIX}{n}") for n, (at, topic) in enumerate(sorted(plan))]


class Chaos:
    def __init__(
        self,
        settings: ChaosSettings,
        work: Path,
        out: Path,
        app: str | None,
        bodies: str | None,
        progress: report.Progress,
        schedule_plan: SchedulePlan | None = None,
    ) -> None:
        self.settings = settings
        self.schedule_plan = schedule_plan
        self.progress = progress
        self.rng = random.Random(f"{settings.seed}:faults")
        try:
            self.deployment = deployment(settings, work, self.rng, DEFAULT_NAMESPACE)
        except (OSError, RuntimeError, TimeoutError) as exc:
            if not settings.cluster:
                raise
            raise ClusterStartError(str(exc)) from exc
        self.ledger = Ledger(work / "ledger.sqlite")
        env = {
            "REDELAY_SIM_URL": self.deployment.url,
            "REDELAY_SIM_LEDGER": str(work / "ledger.sqlite"),
            "REDELAY_SIM_SETTINGS": settings.to_json(),
            ORACLE_URL_ENV: self.deployment.url,
        }
        if app:
            env["REDELAY_SIM_APP"] = app
        slots = [f"w{n + 1}" for n in range(settings.workers)]
        self.network: WorkerNetwork | None = None
        self.clock_dir = work / "clocks"
        self.clock_offsets_ms = {slot: 0 for slot in slots}
        slot_env: dict[str, dict[str, str]] = {}
        if settings.production_faults:
            if not isinstance(self.deployment, OneServer):
                raise ValueError("--production-faults runs on one server, not --cluster")
            self.network = WorkerNetwork(slots, self.deployment.process.socket_path)
            self.clock_dir.mkdir()
            slot_env = {
                slot: {
                    "REDELAY_SIM_URL": self.network.url(slot),
                    CLOCK_FILE_ENV: str(self.clock_dir / slot),
                }
                for slot in slots
            }
        self.prng = random.Random(f"{settings.seed}:production-faults")
        self.workers = Workers(
            settings.workers, env, out / "workers", settings.stop_grace_s, slot_env
        )
        self.producer = Producer(
            settings, self.deployment.url, self.ledger, load_bodies(bodies), DEFAULT_NAMESPACE
        )
        self.store = self.deployment.store
        self.started_ms = now_ms()
        self.drain_s = 0.0
        self.deferred = 0

    def record(self, kind: str, detail: str) -> None:
        self.ledger.fault(now_ms(), kind, detail)

    def schedule(self) -> list[tuple[float, int, str]]:
        # Storms with calm periods between, as in the deterministic simulator.
        s = self.settings
        periods = storms(self.rng, s.duration_s, s.storm_s, s.calm_s)
        events: list[tuple[float, int, str]] = []
        for n, (kind, mean_s) in enumerate(sorted(s.fault_interval_s.items())):
            events += [(at, n, kind) for at in fault_times(self.rng, periods, mean_s / 2)]
        # The production faults in the same storms, from their own random source.
        for n, kind in enumerate(PRODUCTION_FAULTS, start=len(s.fault_interval_s)):
            if kind in s.production_interval_s:
                mean_s = s.production_interval_s[kind]
                events += [(at, n, kind) for at in fault_times(self.prng, periods, mean_s / 2)]
        heapq.heapify(events)
        return events

    def pause_plan(self) -> list[tuple[float, str, bool]]:
        """When which topic is paused and resumed: (seconds in, topic, paused), in order. From a
        random source of its own, so the rest of a seed's run stays what it was."""
        s = self.settings
        rng = random.Random(f"{s.seed}:pauses")
        plan: list[tuple[float, str, bool]] = []
        for _ in range(s.pauses):
            at = rng.uniform(0, s.duration_s)
            topic = rng.choice(s.topics).name
            plan += [
                (at, topic, True),
                (min(at + rng.uniform(*s.pause_s), s.duration_s), topic, False),
            ]
        return sorted(plan)

    def gate(self, topic: str, paused: bool, patience_s: float = 10.0) -> bool:
        """Pauses or resumes ``topic`` as an operator would, retrying while Redis is away (a
        pause is idempotent). Recorded with the faults: the jobs it held back are late for a
        reason."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                changed = self.store.pause(topic, paused)
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.1)  # Redis is restarting: the pace of the retries
        if changed:  # the drain's resume of every topic changes only what a failed one left
            self.record("pause" if paused else "resume", topic)
        return True

    def run(self) -> None:
        s = self.settings
        for name in self.workers.slots:
            self.workers.start(name)
        self.producer.start()
        if self.schedule_plan is not None:
            self.store.schedule(self.schedule_plan.spec())
        started = time.monotonic()
        events = self.schedule()
        pauses = self.pause_plan()
        while (elapsed := time.monotonic() - started) < s.duration_s:
            while pauses and pauses[0][0] <= elapsed:
                _, topic, paused = pauses.pop(0)
                self.gate(topic, paused)
            later = []
            while events and events[0][0] <= elapsed:
                _, n, kind = heapq.heappop(events)
                if self.deployment.ready(kind):
                    self.fire(kind)
                else:  # the cluster is still healing from the last master kill: try again soon
                    self.deferred += 1
                    later.append((elapsed + _DEFER_S, n, kind))
            for event in later:
                heapq.heappush(events, event)
            self.deployment.tend()
            self.tend_network()
            self.workers.tend()
            self.show(elapsed)
            time.sleep(_TICK_S)  # the driver's own pace between fault checks
        self.producer.stopping.set()
        self.producer.join(timeout=30)
        self.drain()

    def tend_network(self, heal_all: bool = False) -> None:
        if self.network is None:
            return
        for slot in self.network.heal_all() if heal_all else self.network.tend():
            self.record("network_heal", self.workers.consumer(slot) or slot)

    def fire(self, kind: str) -> None:
        s = self.settings
        if kind in PRODUCTION_FAULTS:
            self.fire_production(kind)
        elif kind in ("worker_sigkill", "worker_sigterm"):
            alive = self.workers.alive()
            if not alive:
                return
            name = self.rng.choice(alive)
            consumer = self.workers.consumer(name)
            signum = signal.SIGKILL if kind == "worker_sigkill" else signal.SIGTERM
            self.workers.signal(name, signum, self.rng.uniform(*s.restart_after_s))
            self.record(kind, f"{consumer}")
        else:
            detail = self.deployment.fire(kind)
            if detail is not None:
                self.record(kind, detail)

    def fire_production(self, kind: str) -> None:
        """A fault of one worker slot's host: its clock, or its path to Redis. The detail starts
        with the consumer it hit, so an expired lease of that consumer is put down to it."""
        s = self.settings
        assert self.network is not None
        # A clock steps on a worker that has run a while: a process starting measures its
        # offset to Redis and so corrects a step made before, which would test little.
        running = self.workers.running_for(_SETTLED_WORKER_S) if kind == "clock_step" else []
        slot = self.prng.choice(running or sorted(self.workers.slots))
        who = self.workers.consumer(slot) or slot
        if kind == "clock_step":
            step_ms = self.prng.randint(*s.clock_step_ms) * self.prng.choice([1, -1])
            offset_ms = self.clock_offsets_ms[slot]
            if abs(offset_ms + step_ms) > s.clock_offset_max_ms:
                step_ms = -step_ms  # the other way, so the clock stays within its bound
            self.clock_offsets_ms[slot] = offset_ms + step_ms
            staged = self.clock_dir / f"{slot}.new"
            staged.write_text(str(offset_ms + step_ms))
            staged.replace(self.clock_dir / slot)  # whole, so the worker never reads half
            self.record(kind, f"{who} {step_ms:+d} ms (offset {offset_ms + step_ms:+d} ms)")
        elif kind == "network_blackhole":
            if slot in self.network.blackholed():
                return
            for_s = self.prng.uniform(*s.blackhole_s)
            self.network.blackhole(slot, for_s)
            self.record(kind, f"{who} for {for_s:.1f}s")
        else:
            forgotten = self.network.forget(slot)
            self.record(kind, f"{who} {forgotten} connections")

    def drain(self) -> None:
        """Brings every node and worker back and waits until no job is delayed, ready or
        leased."""
        self.deployment.settle()
        self.tend_network(heal_all=True)
        for topic in self.settings.topics:  # whatever a failed resume left paused
            self.gate(topic.name, False, self.settings.drain_limit_s)
        self.workers.start_missing()
        started = time.monotonic()
        deadline = started + self.settings.drain_limit_s
        while time.monotonic() < deadline:
            self.workers.tend()
            try:
                pending = sum(
                    c[state] for c in self.store.stats().values() for state in PENDING_STATES
                )
                # A schedule always has its next occurrence: that one never finishes.
                pending -= sum(1 for i in self.store.schedules() if i.pending_id is not None)
            except redis.RedisError:
                pending = -1
            if pending == 0:
                break
            waiting = f"{pending} pending"
            if 0 < pending <= DRAIN_NAMED:
                with contextlib.suppress(redis.RedisError):
                    waiting += ": " + ", ".join(pending_jobs(self.store, DRAIN_NAMED))
            self.progress.update(f"[chaos seed {self.settings.seed}] draining: {waiting}")
            time.sleep(0.25)  # waiting for the workers to finish, bounded by the deadline
        self.drain_s = time.monotonic() - started
        self.progress.done()
        self.workers.stop_all(timeout_s=self.settings.stop_grace_s + 10)

    def show(self, elapsed: float) -> None:
        counts = self.ledger.counts()
        self.progress.update(
            f"[chaos seed {self.settings.seed}] {elapsed:5.1f}/{self.settings.duration_s:g} s "
            f"jobs {counts['jobs']} runs {counts['runs']} faults {counts['faults']} workers "
            f"{len(self.workers.alive())}/{self.settings.workers} {self.deployment.state()}"
        )

    def evidence(self) -> Evidence:
        ledger = self.ledger.read()
        rtt_ms = max((c.rtt_ms for c in ledger.clocks), default=0.0)
        return Evidence(
            ledger=ledger,
            audit=list(self.store.iter_audit()),
            live=self.store.snapshot(),
            early_tolerance_ms=EARLY_TOLERANCE_FLOOR_MS + math.ceil(rtt_ms),
            # A lease's ms is the caller's clock read before the call went out (on a new
            # connection, or retried by redis-py, the script runs later): use the server's.
            audit_time="server",
            fault_window_ms=self.settings.fault_window_ms,
            calm_p99_bound_ms=None,
            schedules=() if self.schedule_plan is None else (SCHEDULE_NAME,),
            worker_clocks_stepped=any(f.kind == "clock_step" for f in ledger.faults),
            lost_max=LOST_MAX,
        )

    def close(self) -> None:
        self.producer.stopping.set()
        self.workers.kill_all()
        if self.network is not None:
            self.network.close()
        self.ledger.close()
        self.deployment.close()


SCHEDULE_NAME = "sim-every"


@dataclass(frozen=True)
class SchedulePlan:
    """The run's one recurring schedule, from its own random source (so adding it changed no
    other setting of a seed): its occurrences run among the jobs, through every fault."""

    topic: str
    every_s: int
    misfire: str

    @classmethod
    def derive(cls, settings: ChaosSettings) -> SchedulePlan:
        rng = random.Random(f"{settings.seed}:schedule")
        return cls(settings.topics[0].name, rng.choice([1, 2, 3]), rng.choice(["run_once", "skip"]))

    def describe(self) -> str:
        return f"schedule: every {self.every_s}s on {self.topic}, misfire {self.misfire}"

    def spec(self) -> schedules.ScheduleSpec:
        return schedules.spec(
            SCHEDULE_NAME,
            self.topic,
            cron=None,
            every=self.every_s,
            tz="UTC",
            body={"schedule": SCHEDULE_NAME},
            start_at_ms=None,
            misfire_policy=self.misfire,
        )


def poison_notes(evidence: Evidence) -> str:
    """Each poison job: the worker processes it killed, and how it ended."""
    crashes: dict[str, int] = {}
    for fault in evidence.ledger.faults:
        if fault.kind == "handler_crash":
            job = fault.detail.split(" ")[1]
            crashes[job] = crashes.get(job, 0) + 1
    ends: dict[tuple[str, str], str] = {}  # the last event that ended each poison job
    for _, fields in evidence.audit:
        if fields.get("i", "").startswith(POISON_PREFIX) and fields.get("e") in _POISON_ENDS:
            ends[(fields.get("t", ""), fields["i"])] = fields["e"]
    parts = []
    for key in sorted(k for k in evidence.ledger.jobs if k[1].startswith(POISON_PREFIX)):
        end = ends.get(key, "not ended")
        parts.append(f"{key[0]}/{key[1]}: killed {crashes.get('/'.join(key), 0)} workers, {end}")
    return "; ".join(parts)


_POISON_ENDS = frozenset({"quarantined", "dead", "acked", "cancelled"})


def reproduce_command(args: argparse.Namespace, seed: int) -> str:
    parts = [f"{args.prog} --seed {seed} --duration {args.duration:g}"]
    if args.cluster:
        parts.append(f"--cluster --shards {args.shards}")
    if args.appendfsync != "always":
        parts.append(f"--appendfsync {args.appendfsync}")
    if args.backlog:
        parts.append("--backlog")
    if args.production_faults:
        parts.append("--production-faults")
    if args.app:
        parts.append(f"--app {args.app}")
    if args.bodies:
        parts.append(f"--bodies {args.bodies}")
    if args.max_calm_p99_ms is not None:
        parts.append(f"--max-calm-p99-ms {args.max_calm_p99_ms}")
    if args.check:
        parts.append(f"--check {args.check}")
    return " ".join(parts)


def run(args: argparse.Namespace, summary_out: TextIO | None = None) -> int:
    """One run; the summary goes to ``summary_out`` (stdout when None)."""
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    shards = args.shards if args.cluster else None
    settings = derive(
        seed,
        args.duration,
        args.appendfsync,
        shards,
        backlog=args.backlog,
        production_faults=args.production_faults,
    )
    out = Path(args.out) / f"chaos-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    # Before the app is imported here or in a worker: the workers inherit the variable.
    app_dir = prepare_app_dir(out / "app")
    check = load_check(args.check) if args.check else None
    if args.app:
        _, topics = load_app_handlers(args.app)
        settings = settings.with_topics(topics)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.FileHandler(out / "simulation.log", mode="w")],
        force=True,
    )
    command = reproduce_command(args, seed)
    plan = SchedulePlan.derive(settings)
    print(f"{settings.describe()}\n{plan.describe()}\nreproduce with: {command}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="redelay-chaos-"))
    progress = report.Progress()
    real_start = time.monotonic()
    chaos = Chaos(settings, work, out, args.app, args.bodies, progress, plan)
    try:
        chaos.run()
        evidence = chaos.evidence()
        producer = chaos.producer
        notes = {
            "time": f"{time.monotonic() - real_start:.1f} s ({settings.duration_s:g} s of chaos, "
            f"{chaos.drain_s:.1f} s to drain)",
            "producer": f"{producer.added} jobs added, {producer.retries} add retries while "
            f"Redis was away, {producer.add_replies_lost} add replies lost"
            + (
                f", {producer.not_replicated} adds not on a replica within {settings.add_wait_ms}ms"
                if settings.add_wait_ms
                else ""
            ),
            "workers that exited by themselves (restarted)": chaos.workers.unexpected_exits,
            "worker command": " ".join(chaos.workers.command[1:]),
            "early tolerance (clock sync)": f"{evidence.early_tolerance_ms} ms",
            **chaos.deployment.notes(evidence.ledger),
        }
        if chaos.deferred:
            notes["faults deferred until the cluster healed"] = chaos.deferred
        if settings.poison_jobs:
            notes["poison jobs"] = poison_notes(evidence)
    finally:
        chaos.close()
    shutil.copy(work / "ledger.sqlite", out / "ledger.sqlite")
    shutil.rmtree(work, ignore_errors=True)
    report.save_audit(evidence.audit, out / "audit.jsonl")
    evidence = replace(evidence, calm_p99_bound_ms=args.max_calm_p99_ms)
    verdict = check_all(evidence)
    extra: dict[str, Any] = {}
    if check is not None:
        found = run_check(args.check, check, evidence.ledger, settings.fault_window_ms)
        verdict.violations += found.violations()
        extra["user_check"] = {**found.as_dict(), "start_ms": chaos.started_ms}
    notes["chart"] = chart.draw(
        verdict.lateness.points,
        evidence.ledger.faults,
        chaos.started_ms,
        out / "lateness.png",
        f"process chaos, seed {seed}: lateness by due time",
        time_unit="s",
    )
    notes["evidence"] = f"{out / 'ledger.sqlite'}, {out / 'audit.jsonl'}"
    notes["your handlers' records"] = f"{app_dir} ({APP_DIR_ENV})"
    summary = report.build(
        "chaos",
        seed,
        command,
        settings.as_dict(),
        verdict,
        evidence.ledger,
        {"notes": notes, **extra},
    )
    report.save(summary, out / "summary.json")
    report.emit(summary, args.json, summary_out)
    return int(summary["exit_code"])


PROG = f"python -m {__package__}.chaos"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """``prog`` is also how the reproduce line starts (``redelay simulate`` passes its own)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Runs redelay worker processes under process, connection and Redis faults.",
        epilog="Exit codes: "
        + exit_codes_text("no redis-server (or, with --cluster, no local cluster)")
        + ". See docs/simulations.md.",
    )
    parser.set_defaults(prog=prog)
    parser.add_argument("--seed", type=int, help="the run's seed (default: a random one)")
    parser.add_argument(
        "--duration", type=float, default=40.0, help="seconds of chaos before the drain (40)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--appendfsync",
        choices=["always", "everysec", "no"],
        default="always",
        help="Redis fsync policy (default always; the others can lose acknowledged writes)",
    )
    parser.add_argument(
        "--max-calm-p99-ms",
        type=int,
        help="fail (exit 17) when calm-period lateness p99 is over this many ms",
    )
    parser.add_argument(
        "--app", metavar="MODULE:ATTR", help="your handlers (see docs/simulations.md)"
    )
    parser.add_argument("--bodies", metavar="MODULE:FUNC", help="FUNC(topic, id) -> job body")
    parser.add_argument(
        "--check",
        metavar="MODULE:FUNC",
        help="FUNC() reads what your handlers recorded and raises when an invariant broke "
        "(exit 18)",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="run on a local Redis Cluster (3 masters + 3 replicas) and kill masters and "
        "migrate slots too (needs redis-cli)",
    )
    parser.add_argument("--shards", type=int, help="with --cluster: the namespace's shards (3)")
    parser.add_argument(
        "--backlog",
        action="store_true",
        help=f"add {BACKLOG_RATE_PER_S:g} jobs/s to topics of {BACKLOG_PREFETCH} prefetch and "
        "more: a backlog the handlers work off, so the pools keep several ack-and-lease "
        "pipelines on their way",
    )
    parser.add_argument(
        "--production-faults",
        action="store_true",
        help="also put a proxy between each worker and Redis that blackholes and forgets "
        "connections, step workers' wall clocks forward and back, and add poison jobs that "
        "kill their worker on every run (one server only)",
    )
    parser.add_argument(
        "--out", default="simulations/out", help="where artefacts go (simulations/out)"
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    if args.duration <= 0:
        print("simulation: --duration must be positive", file=sys.stderr)
        return EXIT_USAGE
    if args.shards is not None and not args.cluster:
        print("simulation: --shards needs --cluster", file=sys.stderr)
        return EXIT_USAGE
    if args.production_faults and args.cluster:
        print("simulation: --production-faults runs on one server, not --cluster", file=sys.stderr)
        return EXIT_USAGE
    args.shards = DEFAULT_CLUSTER_SHARDS if args.shards is None else args.shards
    if not 1 <= args.shards <= 64:
        print("simulation: --shards must be from 1 to 64", file=sys.stderr)
        return EXIT_USAGE
    with report.user_prints_to_stderr() as summary_out:
        return _run_reporting_errors(args, summary_out)


def _run_reporting_errors(args: argparse.Namespace, summary_out: TextIO) -> int:
    try:
        return run(args, summary_out)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(f"simulation: {exc.code}", file=sys.stderr)  # a bad --app, --bodies or --check
        return EXIT_USAGE
    except RedisServerNotFound as exc:
        print(f"simulation: {exc}", file=sys.stderr)
        return EXIT_NO_REDIS
    except ClusterStartError as exc:
        print(f"simulation: cannot start a local Redis Cluster here: {exc}", file=sys.stderr)
        return EXIT_NO_REDIS
    except KeyboardInterrupt:
        return 130
    except Exception:
        import traceback

        traceback.print_exc()
        print("simulation: the simulator itself failed (exit 1)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
