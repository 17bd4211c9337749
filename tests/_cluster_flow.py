"""Jobs flowing through a store while the test breaks the deployment underneath.

A producer thread adds jobs with small delays; worker threads carry, expire, lease and ack, as the
actors would (simpler: they poll). Every Redis error is counted and retried after a pause, as the
actors do. The checks are the simulators': nothing confirmed is lost, nothing is delivered before
it is due, and the audit streams replay to the live state.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from _wait import WAIT_S, poll_until
from redis.exceptions import RedisClusterException

from actors.clock import Clock
from actors.errors import ErrorCode, JobExistsError, RedelayError
from actors.replay import compare, fold
from actors.storage.store import Store

TOPIC = "flow"
_PAUSE_S = 0.005  # an idle worker's poll interval; a driver for tests, not the product


@dataclass
class FlowLog:
    confirmed: dict[str, int] = field(default_factory=dict)  # id -> due ms, add returned
    unsure: set[str] = field(default_factory=set)  # add raised: may or may not exist
    delivered: dict[str, list[int]] = field(default_factory=dict)  # id -> lease times (ms)
    early: list[str] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, exc: BaseException) -> None:
        with self.lock:
            name = type(exc).__name__
            self.errors[name] = self.errors.get(name, 0) + 1


class Flow:
    """Start it, break things, then ``finish()`` and ``check()``."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        jobs: int = 400,
        max_delay_ms: int = 300,
        workers: int = 2,
        add_interval_s: float = 0.004,
        seed: int = 7,
    ) -> None:
        self.store = store
        self.clock = clock
        self.jobs = jobs
        self.max_delay_ms = max_delay_ms
        self.add_interval_s = add_interval_s
        self.log = FlowLog()
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.producer = threading.Thread(target=self._produce, name="flow-producer", daemon=True)
        self.workers = [
            threading.Thread(target=self._work, args=(n,), name=f"flow-worker-{n}", daemon=True)
            for n in range(workers)
        ]

    def start(self) -> Flow:
        for thread in [self.producer, *self.workers]:
            thread.start()
        return self

    def added(self) -> int:
        with self.log.lock:
            return len(self.log.confirmed) + len(self.log.unsure)

    def _retrying(self, what: Callable[[], Any]) -> Any:
        while not self.stop.is_set():
            try:
                return what()
            except (redis.RedisError, RedisClusterException) as exc:
                self.log.error(exc)
                time.sleep(0.05)  # back off as the actors do
        return None

    def _produce(self) -> None:
        for n in range(self.jobs):
            if self.stop.is_set():
                return
            job_id = f"job-{n}"
            job = self.store.new_job(
                TOPIC, job_id, n, delay_ms=self.rng.randrange(self.max_delay_ms)
            )
            try:
                self.store.add(job)
                with self.log.lock:
                    self.log.confirmed[job_id] = job.due_ms
            except (redis.RedisError, RedisClusterException, RedelayError) as exc:
                # Unknown outcome (a failover mid-call, or WAIT not satisfied): the job may exist.
                self.log.error(exc)
                with self.log.lock:
                    self.log.unsure.add(job_id)
                if not isinstance(exc, JobExistsError):
                    time.sleep(0.05)  # back off as a producer should
            time.sleep(self.add_interval_s)  # a steady trickle of adds, not a race fix

    def _work(self, n: int) -> None:
        while not self.stop.is_set():
            moved = self._retrying(lambda: self.store.carry(500)) or (0, None)
            self._retrying(lambda: self.store.expire(500))
            leases = self._retrying(lambda: self.store.lease(TOPIC, 20, f"worker-{n}")) or []
            now = self.clock.now_ms()
            with self.log.lock:
                for lease in leases:
                    self.log.delivered.setdefault(lease.id, []).append(now)
                    if now < lease.due_ms:
                        self.log.early.append(f"{lease.id}: leased at {now}, due {lease.due_ms}")
            if leases:
                acks = [(x.topic, x.id, x.token) for x in leases]
                codes = self._retrying(functools.partial(self.store.ack_many, acks)) or []
                with self.log.lock:
                    for lease, code in zip(leases, codes, strict=False):
                        if code == ErrorCode.OK:
                            self.log.acked.add(lease.id)
            elif not moved[0]:
                time.sleep(_PAUSE_S)

    def finish(self, timeout_s: float = WAIT_S * 2) -> None:
        """Waits for the producer and for every confirmed job to be acked, then stops. What is
        still missing at the deadline, ``problems()`` reports."""
        self.producer.join(timeout=timeout_s)
        poll_until(self._all_confirmed_acked, timeout_s=timeout_s, poll_s=0.05)
        self.stop.set()
        for thread in self.workers:
            thread.join(timeout=WAIT_S)

    def _all_confirmed_acked(self) -> bool:
        with self.log.lock:
            return set(self.log.confirmed) <= self.log.acked

    def _acked(self, job_id: str) -> bool:
        """Whether the surviving store's audit says the job was acked. An ack can take effect
        and replicate while its reply dies with the master; its retry then finds the job gone,
        so the log never saw it succeed. The ``acked`` entry is written by the ack's own script,
        so it exists exactly when the ack did."""
        entries = self.store.job_entries(TOPIC, job_id)
        return any(fields.get("e") == "acked" for _, fields in entries)

    def problems(self) -> list[str]:
        """Safety first (nothing early, audit agrees), then liveness (nothing lost)."""
        found = [f"early: {e}" for e in self.log.early[:5]]
        replay = fold(self.store.iter_audit())
        found += [f"replay anomaly: {a}" for a in replay.anomalies[:5]]
        found += [f"replay drift: {d}" for d in compare(replay, self.store.snapshot())[:5]]
        lost = [j for j in sorted(set(self.log.confirmed) - self.log.acked) if not self._acked(j)]
        if lost:
            events = [f["e"] for _, f in self.store.job_entries(TOPIC, lost[0])]
            found.append(f"lost {len(lost)} confirmed jobs, e.g. {lost[:5]}; {lost[0]}: {events}")
        if len(self.log.confirmed) < self.jobs // 2:
            found.append(f"only {len(self.log.confirmed)} of {self.jobs} adds were confirmed")
        return found
