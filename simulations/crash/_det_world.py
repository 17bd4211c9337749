"""The deterministic simulator's world: a private redis-server, a fake clock, worker "processes"
(DelayQueues in this process, each with its own connections), a producer, and the ledger.

The driver moves the clock; between moves it waits until the actors have done everything the
move made due (:meth:`World.settle`), asking the actors and reading Redis, with deadlines.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pykka
import redis

from actors import (
    AuditRetention,
    DelayQueue,
    FakeClock,
    Job,
    JobExistsError,
    Retry,
    schedules,
    testing,
)
from actors.lifecycle import PENDING_STATES
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

from . import faults
from .det_settings import CLOCK_BACK_MAX_MS, DetSettings, TopicPlan
from .ledger import JobRow, Ledger
from .workload import HandlerMix

log = logging.getLogger("simulations.crash.deterministic")

NAMESPACE = "sim"
SCHEDULE_NAME = "sim-every"
# A hung handler is released by the driver when the fake clock reaches its time; this real-time
# cap only stops a driver bug from leaving threads blocked forever.
_HANG_CAP_S = 120.0
_ASK_TIMEOUT_S = 2.0
_ADD_TRIES = 5


class SimulatedError(Exception):
    """What an injected handler error raises."""


class Hangs:
    """Handlers that hang: each blocks until the driver's clock reaches its release time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[int, threading.Event]] = {}
        self._next = 0

    def block(self, until_ms: int) -> None:
        """Runs on a handler thread."""
        event = threading.Event()
        with self._lock:
            self._next += 1
            ticket = self._next
            self._waiting[ticket] = (until_ms, event)
        event.wait(_HANG_CAP_S)
        with self._lock:
            self._waiting.pop(ticket, None)

    def release_due(self, now_ms: int) -> None:
        with self._lock:
            for until_ms, event in self._waiting.values():
                if until_ms <= now_ms:
                    event.set()

    def release_all(self) -> None:
        with self._lock:
            for _, event in self._waiting.values():
                event.set()

    def blocked(self) -> int:
        with self._lock:
            return sum(1 for _, e in self._waiting.values() if not e.is_set())

    def next_release_ms(self) -> int | None:
        with self._lock:
            times = [t for t, e in self._waiting.values() if not e.is_set()]
        return min(times) if times else None


@dataclass
class Counters:
    """Counted by handler threads and the driver; read for the progress line and the summary."""

    lock: threading.Lock
    runs_started: int = 0
    runs_ended: int = 0
    adds_resent: int = 0  # add calls sent again after a connection error
    pauses: int = 0
    resumes: int = 0

    def bump(self, name: str, by: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + by)


UserHandler = Callable[[Job], Any]


class World:
    def __init__(
        self,
        settings: DetSettings,
        directory: Path,
        user_handlers: dict[str, UserHandler] | None = None,
        body: Callable[[str, str], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = FakeClock()
        self.start_ms = self.clock.now_ms()
        self.redis = RedisProcess(directory / "redis").start()
        self.admin = self.redis.client()
        self.ledger = Ledger(directory / "ledger.sqlite")
        self.paused: set[str] = set()  # topics paused now (see pause)
        self.hangs = Hangs()
        self.counters = Counters(threading.Lock())
        # Each backward step: (Redis's real time at the step, ms back), for the checkers.
        self.clock_steps: list[tuple[int, int]] = []
        self.fault_counts: Counter[str] = Counter()
        self.user_handlers = user_handlers or {}
        self.body = body or (lambda topic, job_id: {"id": job_id})
        self.producer = DelayQueue(
            self.redis.url,
            NAMESPACE,
            clock=self.clock,
            retention=AuditRetention("NONE"),
            producer_only=True,
        )
        # Reads keys, counters, the audit stream and snapshots (the simulator runs one shard).
        self.reader = Store(self.admin, NAMESPACE, self.clock, retention=AuditRetention("NONE"))
        self.workers: dict[str, DelayQueue | None] = {}
        self.generations: Counter[str] = Counter()
        self.settle_results: Counter[str] = Counter()
        # Workers abandoned or stopped: their handlers still blocked never return (a real
        # process would have taken them down with it).
        self.gone: set[str] = set()

    # -- workers ----------------------------------------------------------------------------

    def start_worker(self, slot: str) -> None:
        s = self.settings
        self.generations[slot] += 1
        name = f"{slot}.{self.generations[slot]}"
        queue = DelayQueue(
            self.redis.url,
            NAMESPACE,
            clock=self.clock,
            retention=AuditRetention("NONE"),
            watchdog_interval_s=s.watchdog_interval_ms / 1000,
            sweep_interval_s=s.sweep_interval_ms / 1000,
            consumer_name=name,
        )
        for topic in s.topics:
            queue.handler(
                topic.name,
                concurrency=topic.concurrency,
                timeout=topic.timeout_ms / 1000,
                retry=[ms / 1000 for ms in topic.retry_ms],
                lease=topic.lease_ms / 1000,
            )(self._handler(name, topic))
        # Pool checks and listeners' backstop looks, tuned so a run takes few steps (see
        # det_settings).
        queue.settings = replace(
            queue.settings, check_interval_ms=s.check_interval_ms, look_interval_s=1.0
        )
        queue.start()
        self.workers[slot] = queue

    def _handler(self, worker: str, topic: TopicPlan) -> UserHandler:
        mix: HandlerMix = self.settings.handler
        seed = self.settings.seed
        user = self.user_handlers.get(topic.name)

        def handle(job: Job) -> str | None:
            """Runs on a pool's handler thread."""
            started = self.clock.now_ms()
            seq = self.ledger.run_started(
                job.topic, job.id, job.token, job.attempt, job.due_ms, started, worker
            )
            self.counters.bump("runs_started")
            decision = mix.decide(seed, job.topic, job.id, job.attempt)
            try:
                if decision.kind == "hang":
                    self.record_fault("handler_hang", f"{job.topic}/{job.id} #{job.attempt}")
                if decision.ms > 0 and decision.kind != "retry":
                    self.hangs.block(started + decision.ms)  # work (or a hang) takes sim time
                if worker in self.gone:
                    return None  # its process is gone: this run never returns
                if decision.kind == "error":
                    raise SimulatedError(f"injected failure of attempt {job.attempt}")
                elif decision.kind == "retry":
                    raise Retry(after=decision.ms / 1000, reason="injected retry")
                result = user(job) if user is not None else None
            except Exception:
                self.ledger.run_ended(seq, "error", self.clock.now_ms())
                self.counters.bump("runs_ended")
                raise
            self.ledger.run_ended(seq, "ok", self.clock.now_ms())
            self.counters.bump("runs_ended")
            return result if isinstance(result, str) else None

        return handle

    def alive_workers(self) -> list[tuple[str, DelayQueue]]:
        return [(slot, q) for slot, q in sorted(self.workers.items()) if q is not None]

    def dead_slots(self) -> list[str]:
        return [slot for slot, q in sorted(self.workers.items()) if q is None]

    # -- producing --------------------------------------------------------------------------

    def add_jobs(self, jobs: list[tuple[str, str, int]]) -> None:
        """Adds (topic, id, delay_ms) jobs in one call and writes them to the ledger."""
        now = self.clock.now_ms()
        specs = [
            {"topic": t, "id": i, "body": self.body(t, i), "at": (now + d) / 1000}
            for t, i, d in jobs
        ]
        for attempt in range(_ADD_TRIES):
            try:
                self.producer.add_many(specs)
                break
            except JobExistsError:
                # The last try ran but its reply was lost with a killed connection, and a job of
                # it changed before this one (a resend of unchanged jobs succeeds): they are in.
                break
            except redis.ConnectionError:
                if attempt == _ADD_TRIES - 1:
                    raise
                self.counters.bump("adds_resent")  # sent or not, ran or not: sent again
        self.ledger.add_jobs([JobRow(t, i, now + d, now) for t, i, d in jobs])

    def cancel(self, topic: str, job_id: str) -> str:
        result = self.reader.cancel(topic, job_id)  # store.cancel tells removed from requested
        self.ledger.cancel(topic, job_id, self.clock.now_ms(), result)
        return result

    def pause(self, topic: str, paused: bool) -> None:
        """Pauses or resumes a topic as an operator would. In the ledger's fault rows, so that
        the deliveries it held back count as after an event, not as calm-period lateness."""
        for attempt in range(_ADD_TRIES):
            try:
                self.reader.pause(topic, paused)  # idempotent: a retry changes nothing twice
                break
            except redis.ConnectionError:
                if attempt == _ADD_TRIES - 1:
                    raise
        self.counters.bump("pauses" if paused else "resumes")
        if paused:  # its ready jobs wait: no reason to wait for them in settle()
            self.paused.add(topic)
        else:
            self.paused.discard(topic)
        self.ledger.fault(self.clock.now_ms(), "pause" if paused else "resume", topic)

    # -- faults -----------------------------------------------------------------------------

    def record_fault(self, kind: str, detail: str) -> None:
        self.fault_counts[kind] += 1
        self.ledger.fault(self.clock.now_ms(), kind, detail)

    def step_back(self, back_ms: int) -> None:
        """Redis's own clock steps back (an NTP step on its host): the scripts follow this
        clock, so due times and lease deadlines come later by true time, never sooner, and
        timers already set wait the longer. A job made ready before the step may be leased at
        a time before its due time by the clock: the checkers judge it by true time, so the
        step's place in the audit stream is kept by Redis's real time, read while every actor
        is idle (the driver fires this fault only in a quiet phase), with a millisecond's gap
        either side so no entry shares the millisecond.
        """
        time.sleep(0.002)  # the gap before: entries so far have older stream ids
        seconds, micros = self.admin.time()
        self.clock_steps.append((int(seconds) * 1000 + int(micros) // 1000, back_ms))
        time.sleep(0.002)  # the gap after
        self.clock.jump(-back_ms)
        self.record_fault("clock_step_back", f"-{back_ms} ms")

    def fire(self, kind: str, rng: random.Random) -> str | None:
        """Fires one scheduled fault. Returns the slot to restart later, if any."""
        alive = self.alive_workers()
        if kind == "connection_drop":
            variant = rng.choice(["normal", "pubsub", "one"])
            self.record_fault(kind, faults.kill_connections(self.admin, variant, rng))
            return None
        if kind == "clock_jump":
            jump_ms = rng.randint(*self.settings.clock_jump_ms)
            self.clock.jump(jump_ms)
            self.record_fault(kind, f"+{jump_ms} ms")  # at the time it jumped to
            return None
        if kind == "clock_step_back":
            low, high = self.settings.clock_jump_ms
            self.step_back(rng.randint(low, min(high, CLOCK_BACK_MAX_MS)))
            return None
        if not alive:
            return None  # every worker is down already
        slot, queue = rng.choice(alive)
        if kind == "actor_crash":
            refs = testing.actor_refs(queue)
            if not refs:
                return None
            name = rng.choice(sorted(refs))
            self.record_fault(kind, f"{queue.consumer} {name}")
            testing.crash_actor(queue, name)
            return None
        if kind == "worker_abandon":
            self.record_fault(kind, queue.consumer)
            testing.kill_worker(queue)
        elif kind == "worker_stop":
            self.record_fault(kind, queue.consumer)
            queue.stop(grace=self.settings.stop_grace_s)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        self.gone.add(queue.consumer)
        self.workers[slot] = None
        return slot

    # -- waiting for the actors -------------------------------------------------------------

    def progress_marker(self) -> tuple[int, int, int]:
        """Changes whenever anything happens: a transition or a handler run."""
        audit_len = int(self.admin.xlen(self.reader.keys.audit))
        return (audit_len, self.counters.runs_started, self.counters.runs_ended)

    def pending_jobs(self) -> int:
        """Jobs still delayed, ready or leased (from the scripts' counters), but for the
        schedules' next occurrences: a schedule always has one, so they never finish."""
        stats = self.reader.stats()
        total = sum(s[state] for s in stats.values() for state in PENDING_STATES)
        return total - sum(1 for info in self.reader.schedules() if info.pending_id is not None)

    def start_schedule(self) -> str:
        """The run's one recurring schedule (settings.schedule_*); returns its name."""
        s = self.settings
        self.reader.schedule(
            schedules.spec(
                SCHEDULE_NAME,
                s.topics[0].name,
                cron=None,
                every=s.schedule_every_ms / 1000,
                tz="UTC",
                body={"schedule": SCHEDULE_NAME},
                start_at_ms=None,
                misfire_policy=s.schedule_misfire,
            )
        )
        return SCHEDULE_NAME

    def observe(self) -> tuple[tuple[Any, ...], bool]:
        """A fingerprint of everything that moves, and whether the system looks idle: no
        handler running but the hung ones, no ready job a pool has room for, no job due but
        not carried, and every carrier's timer set for the earliest delayed job. A paused
        topic's ready jobs wait for its resume."""
        keys = self.reader.keys
        pipe = self.admin.pipeline(transaction=False)
        pipe.xlen(keys.audit)
        pipe.zrange(keys.delayed, 0, 0, withscores=True)
        for topic in self.settings.topics:
            pipe.llen(keys.ready(topic.name))
        audit_len, earliest, *ready_lens = pipe.execute()
        earliest_due = int(earliest[0][1]) if earliest else None
        now = self.clock.now_ms()
        asked: list[tuple[str, pykka.Future[Any]]] = []
        for _, queue in self.alive_workers():
            for name, ref in sorted(testing.actor_refs(queue).items()):
                if name.startswith("listener:"):
                    continue  # its work shows on the Redis side (the ready lists)
                try:
                    asked.append((name, testing.ask_stats(ref)))
                except pykka.ActorDeadError:
                    continue
        running = 0
        room: set[str] = set()
        carriers = 0
        carriers_ready = True
        moving: list[Any] = [audit_len, tuple(ready_lens)]
        for name, future in asked:
            try:
                stats = future.get(timeout=_ASK_TIMEOUT_S)
            except (pykka.ActorDeadError, pykka.Timeout):
                continue
            if name.startswith("pool:"):
                running += stats["running"]
                moving.append((stats["started"], stats["acked"], stats["failed"]))
                topic_name = name.removeprefix("pool:")
                plan = next(t for t in self.settings.topics if t.name == topic_name)
                if stats["running"] < plan.concurrency:
                    room.add(topic_name)
            elif name == "carrier":
                carriers += 1
                next_ms = stats["next_ms"]
                moving.append((stats["carried"], next_ms))
                if earliest_due is not None and (next_ms is None or next_ms > earliest_due):
                    carriers_ready = False
        c = self.counters
        moving += [c.runs_started, c.runs_ended]
        idle = (
            running <= self.hangs.blocked()
            and not any(
                n > 0 and t.name in room and t.name not in self.paused
                for n, t in zip(ready_lens, self.settings.topics, strict=True)
            )
            and (earliest_due is None or earliest_due > now or carriers == 0)
            and carriers_ready
        )
        return tuple(moving), idle

    def settle(self, deadline_s: float = 3.0, stable_s: float = 0.1) -> str:
        """Waits until the system is idle, or has not moved for ``stable_s`` (it waits for a
        timer: a backoff, or a wake it missed), or ``deadline_s`` passed. Returns which."""
        started = time.monotonic()
        last: tuple[Any, ...] | None = None
        since = started
        idle_polls = 0
        while True:
            fingerprint, idle = self.observe()
            now = time.monotonic()
            if fingerprint != last:
                last, since, idle_polls = fingerprint, now, 0
            elif idle:
                idle_polls += 1
                if idle_polls >= 2:
                    return self._settled("idle")
            elif now - since >= stable_s:
                return self._settled("stable")
            if now - started > deadline_s:
                return self._settled("timeout")
            time.sleep(0.001)  # polling other threads' progress, bounded by the deadline

    def _settled(self, how: str) -> str:
        self.settle_results[how] += 1
        return how

    # -- the end ----------------------------------------------------------------------------

    def stop(self) -> None:
        self.hangs.release_all()
        for slot, queue in self.alive_workers():
            queue.stop(grace=1.0)
            self.workers[slot] = None
        self.producer.close()
        self.ledger.close()
        self.redis.kill()
