"""Every setting of a deterministic run, derived from its seed (and printed at the start).

Like FoundationDB's BUGGIFY, a seed switches each fault kind on or off for the whole run and sets
how often it fires; ``--ci`` and ``--soak`` switch every kind on, so a short run still meets them
all. Sizes depend on the mode; nothing else changes a run.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from .workload import DelayMix, HandlerMix

HOUR_MS = 3_600_000
MINUTE_MS = 60_000

# Fault kinds of the deterministic simulator, in the order the summary lists them.
FAULT_KINDS = (
    "actor_crash",  # one actor raises in a tell; the watchdog restarts its unit
    "connection_drop",  # CLIENT KILL: every normal connection, the pub/sub ones, or one
    "handler_error",  # a handler raises (or raises Retry) on some attempts
    "handler_hang",  # a handler blocks past its timeout
    "worker_abandon",  # a worker "process" stops without shutting down; restarted later
    "worker_stop",  # a worker stops gracefully (like SIGTERM); restarted later
    "clock_jump",  # the clock steps forward without running timers on the way
    "clock_step_back",  # the clock (Redis's time: the scripts follow it) steps back
)
# Switched on and scheduled from random sources of their own, so that adding them changed
# nothing else a seed plays.
LATER_FAULTS = ("clock_step_back",)
# The most the clock steps back at once. Every lease held then lasts that much longer in
# simulated time, and a consumer running a suspect polls every 100 ms of it (SUSPECT_POLL_MS),
# each poll a step of the driver: steps back of up to ten minutes made seed 1 --ci take 303 s
# instead of 93 s, and of up to a minute still stalled it for a minute of real time per step.
CLOCK_BACK_MAX_MS = 10_000
# Faults that the driver schedules (the handler ones happen inside handlers).
SCHEDULED_FAULTS = tuple(k for k in FAULT_KINDS if not k.startswith("handler_"))


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    duration_ms: int  # simulated time during which jobs are added and faults fire
    jobs: int
    faults_per_kind: int  # on average, over the run
    real_limit_s: float  # the run stops adding jobs and faults after this long (real time)


MODES = {
    "ci": Mode("ci", 2 * HOUR_MS, 400, 6, 240.0),
    "default": Mode("default", 6 * HOUR_MS, 1_500, 12, 900.0),
    "soak": Mode("soak", 48 * HOUR_MS, 12_000, 80, 4 * 3600.0),
}


@dataclass(frozen=True, slots=True)
class TopicPlan:
    name: str
    concurrency: int
    timeout_ms: int
    lease_ms: int
    retry_ms: tuple[int, ...]
    prefetch: int = 0  # jobs leased beyond the handler threads (DelayQueue.handler)


@dataclass(frozen=True)
class DetSettings:
    seed: int
    mode: str
    duration_ms: int
    jobs: int
    bursts: int  # batches of 10-30 jobs due at once, some cancelled while ready
    workers: int
    topics: tuple[TopicPlan, ...]
    delays: DelayMix
    handler: HandlerMix
    cancel_share: float
    fault_interval_ms: dict[str, int]  # enabled scheduled fault kinds -> mean time between
    handler_faults: tuple[str, ...]  # enabled handler fault kinds
    busy_fault_share: float  # share of faults fired while the system is busy (not settled)
    min_step_ms: int
    max_step_ms: int
    sweep_interval_ms: int
    watchdog_interval_ms: int
    check_interval_ms: int
    restart_after_ms: tuple[int, int]
    clock_jump_ms: tuple[int, int]
    stop_grace_s: float  # real seconds a graceful worker stop may take
    storm_ms: tuple[int, int] = (10 * MINUTE_MS, 30 * MINUTE_MS)
    calm_ms: tuple[int, int] = (20 * MINUTE_MS, 40 * MINUTE_MS)
    # One recurring schedule on the first topic (its own random source, so adding it changed no
    # other setting of a seed): its occurrences run among the jobs, through every fault.
    schedule_every_ms: int = MINUTE_MS
    schedule_misfire: str = "run_once"
    # Topics paused by an operator, each for a while (no job may be leased meanwhile).
    pauses: int = 0
    pause_ms: tuple[int, int] = (MINUTE_MS, 10 * MINUTE_MS)

    @property
    def enabled_faults(self) -> list[str]:
        return [k for k in FAULT_KINDS if k in self.fault_interval_ms or k in self.handler_faults]

    @property
    def fault_window_ms(self) -> int:
        """How long after a fault a delivery still counts as "after a fault": a lease to expire,
        a sweep to find it, a watchdog tick, a worker restart. (A clock jump is logged at the
        time it jumped to, so the jobs it skipped over count too.)"""
        lease = max(t.lease_ms for t in self.topics)
        return lease + self.sweep_interval_ms + self.watchdog_interval_ms + self.restart_after_ms[1]

    @property
    def drain_limit_ms(self) -> int:
        """Simulated time the run may take after the last job is added to finish every job."""
        slowest = max(
            sum(t.retry_ms) + (len(t.retry_ms) + 1) * (t.lease_ms + self.sweep_interval_ms)
            for t in self.topics
        )
        return self.delays.max_ms + slowest + self.fault_window_ms + self.clock_jump_ms[1] + HOUR_MS

    def with_topics(self, topics: tuple[TopicPlan, ...]) -> DetSettings:
        """The same run with the user's topics (``--app``): hangs outlast their timeouts."""
        timeouts = [t.timeout_ms for t in topics]
        handler = replace(
            self.handler,
            hang_ms=(min(timeouts) + 1, 3 * max(timeouts)),
            work_ms=(1, min(timeouts) // 2),
        )
        return replace(self, topics=topics, handler=handler)

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["delays"] = self.delays.describe()
        found["handler"] = self.handler.as_dict()
        found["enabled_faults"] = self.enabled_faults
        return found

    def describe(self) -> str:
        topics = "; ".join(
            f"{t.name} (concurrency {t.concurrency}, timeout {t.timeout_ms}ms, lease "
            f"{t.lease_ms}ms, retry {list(t.retry_ms)})"
            for t in self.topics
        )
        faults = ", ".join(
            f"{k} every ~{self.fault_interval_ms[k] / MINUTE_MS:.0f}m"
            if k in self.fault_interval_ms
            else k
            for k in self.enabled_faults
        )
        h = self.handler
        return "\n".join(
            [
                f"seed {self.seed}, mode {self.mode}: {self.duration_ms / HOUR_MS:g} simulated "
                f"hours, {self.jobs} jobs and {self.bursts} bursts of 10-30, {self.workers} "
                "workers",
                f"topics: {topics}",
                f"delays: {self.delays.describe()}; cancel {self.cancel_share:.0%} of jobs",
                f"handlers: error {h.error:.0%}, retry {h.retry:.0%}, hang {h.hang:.1%} "
                f"({h.hang_ms[0]}-{h.hang_ms[1]}ms); {h.work_share:.0%} of runs take "
                f"{h.work_ms[0]}-{h.work_ms[1]}ms",
                f"faults: {faults or 'none'} ({self.busy_fault_share:.0%} while busy), in storms "
                f"of {self.storm_ms[0] // MINUTE_MS}-{self.storm_ms[1] // MINUTE_MS}m between "
                f"calm periods of {self.calm_ms[0] // MINUTE_MS}-{self.calm_ms[1] // MINUTE_MS}m",
                f"schedule: every {self.schedule_every_ms // 1000}s on {self.topics[0].name}, "
                f"misfire {self.schedule_misfire}",
                f"steps {self.min_step_ms}-{self.max_step_ms}ms; sweep every "
                f"{self.sweep_interval_ms}ms, watchdog every {self.watchdog_interval_ms}ms, "
                f"pool check every {self.check_interval_ms}ms",
                f"pauses: {self.pauses} of a topic, {self.pause_ms[0] // MINUTE_MS}-"
                f"{self.pause_ms[1] // MINUTE_MS}m each",
            ]
        )


def derive(seed: int, mode_name: str, hours: float | None = None) -> DetSettings:
    """All settings from one seed. Same seed and mode, same settings, on any machine.

    ``hours`` overrides the mode's simulated time; jobs and faults scale with it.
    """
    mode = MODES[mode_name]
    if hours is not None:
        scale = hours * HOUR_MS / mode.duration_ms
        mode = replace(
            mode,
            duration_ms=int(hours * HOUR_MS),
            jobs=max(1, int(mode.jobs * scale)),
            faults_per_kind=max(1, round(mode.faults_per_kind * scale)),
        )
    rng = random.Random(seed)
    schedule_rng = random.Random(f"{seed}:schedule")
    all_faults = mode_name in ("ci", "soak")
    enabled = [
        k for k in FAULT_KINDS if k not in LATER_FAULTS and (all_faults or rng.random() < 0.7)
    ]
    topics = tuple(
        _topic(rng, name) for name in ["orders", "emails", "webhooks"][: rng.randint(1, 3)]
    )
    per_kind = mode.faults_per_kind
    intervals = {
        k: max(MINUTE_MS, int(mode.duration_ms / per_kind * rng.uniform(0.6, 1.4)))
        for k in SCHEDULED_FAULTS
        if k in enabled
    }
    later = random.Random(f"{seed}:later-faults")
    for k in LATER_FAULTS:
        # Not in --ci: with lost leases each step back stalls the driver (CLOCK_BACK_MAX_MS).
        if (later.random() < 0.7 and mode_name != "ci") or mode_name == "soak":
            intervals[k] = max(
                MINUTE_MS, int(mode.duration_ms / per_kind * later.uniform(0.6, 1.4))
            )
    timeout = min(t.timeout_ms for t in topics)
    handler = HandlerMix(
        error=rng.uniform(0.05, 0.25) if "handler_error" in enabled else 0.0,
        retry=rng.uniform(0.0, 0.05) if "handler_error" in enabled else 0.0,
        hang=rng.uniform(0.002, 0.01) if "handler_hang" in enabled else 0.0,
        hang_ms=(timeout + 1, 3 * max(t.timeout_ms for t in topics)),
        retry_ms=(0, 5 * MINUTE_MS),
        # Runs that take simulated time are in flight when a fault hits.
        work_ms=(1, timeout // 2),
        work_share=rng.uniform(0.3, 0.8),
    )
    delays = DelayMix(
        (
            (rng.uniform(0.2, 0.4), 0, 0),
            (rng.uniform(0.2, 0.4), 1, 10_000),
            (rng.uniform(0.15, 0.3), 10_000, 10 * MINUTE_MS),
            (rng.uniform(0.05, 0.15), 10 * MINUTE_MS, min(3 * HOUR_MS, mode.duration_ms)),
        )
    )
    return DetSettings(
        seed=seed,
        mode=mode_name,
        duration_ms=mode.duration_ms,
        jobs=mode.jobs,
        bursts=max(1, mode.duration_ms // (30 * MINUTE_MS)),
        workers=rng.randint(1, 3),
        topics=topics,
        delays=delays,
        handler=handler,
        cancel_share=rng.uniform(0.02, 0.1),
        fault_interval_ms=intervals,
        handler_faults=tuple(k for k in ("handler_error", "handler_hang") if k in enabled),
        busy_fault_share=rng.uniform(0.3, 0.7),
        min_step_ms=rng.choice([1, 10, 100]),
        max_step_ms=rng.choice([10_000, 30_000, 60_000]),
        sweep_interval_ms=rng.choice([5_000, 10_000, 30_000]),
        watchdog_interval_ms=rng.choice([30_000, 60_000]),
        check_interval_ms=rng.choice([500, 1_000]),
        restart_after_ms=(1_000, rng.choice([30_000, 2 * MINUTE_MS])),
        clock_jump_ms=(1_000, rng.choice([MINUTE_MS, 10 * MINUTE_MS])),
        stop_grace_s=0.3,
        schedule_every_ms=schedule_rng.choice([MINUTE_MS, 5 * MINUTE_MS, 15 * MINUTE_MS]),
        schedule_misfire=schedule_rng.choice(["run_once", "skip"]),
        # Not drawn from rng, so every other setting of a seed stays what it was.
        pauses=max(1, mode.duration_ms // HOUR_MS),
    )


_RETRY_STEPS_MS = [1_000, 10_000, MINUTE_MS, 10 * MINUTE_MS]


def _topic(rng: random.Random, name: str) -> TopicPlan:
    timeout = rng.choice([2_000, 10_000, 30_000])
    steps = rng.randint(1, 4)
    return TopicPlan(
        name=name,
        concurrency=rng.randint(1, 6),
        timeout_ms=timeout,
        lease_ms=timeout * 2,
        retry_ms=tuple(
            rng.choice([1_000, 10_000, MINUTE_MS, 10 * MINUTE_MS]) for _ in range(steps)
        ),
    )
