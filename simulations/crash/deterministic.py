"""Deterministic simulation: the real actor system on a real private Redis, under a fake clock,
with faults a seed switches on and fires at random moments. Many simulated hours per real minute.

    python -m simulations.crash.deterministic --seed 42 --ci        # CI-sized: 2 simulated hours
    python -m simulations.crash.deterministic --seed 42             # the seed picks the faults
    python -m simulations.crash.deterministic --seed 42 --soak      # 48 simulated hours
    python -m simulations.crash.deterministic --seed 42 --ci --json # the summary as JSON
    redelay simulate --app myapp.tasks:register --check myapp.tasks:check --ci  # installed

One seed reproduces a run: the settings, the jobs, the faults, when they fire and what they hit
all come from it (printed at the start), and a handler's behaviour on an attempt is a function of
the seed and the job. What no seed controls is the order in which threads run inside one step;
the driver waits for the system to settle after every step so that this matters as little as it
can. Exit codes: simulations.crash.checkers.EXIT_CODES (docs/simulations.md).
"""

from __future__ import annotations

import argparse
import heapq
import logging
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from actors.errors import RedisServerNotFound

from . import chart, report
from ._det_world import World
from ._user_app import load_app_handlers, load_bodies
from .checkers import (
    EXIT_INTERNAL,
    EXIT_NO_REDIS,
    EXIT_USAGE,
    Evidence,
    check_all,
    exit_codes_text,
)
from .det_settings import LATER_FAULTS, MODES, DetSettings, derive
from .user_check import APP_DIR_ENV, load_check, prepare_app_dir, run_check
from .workload import fault_times, storms

log = logging.getLogger("simulations.crash.deterministic")

# Real-time bounds, so a stuck system ends the run with a verdict instead of hanging CI.
_DRAIN_REAL_LIMIT_S = 300.0


@dataclass(order=True)
class Planned:
    at_ms: int
    order: int
    kind: str = field(compare=False)  # "add", "cancel", "pause", "resume", a fault, "restart"
    busy: bool = field(compare=False)  # fire right after the clock moves, before settling
    data: Any = field(compare=False, default=None)


def plan(settings: DetSettings, start_ms: int) -> list[Planned]:
    """Every job, cancel and fault of the run, from the seed."""
    rng = random.Random(f"{settings.seed}:plan")
    events: list[Planned] = []
    order = 0

    def push(at_ms: int, kind: str, busy: bool, data: Any = None) -> None:
        nonlocal order
        order += 1
        events.append(Planned(at_ms, order, kind, busy, data))

    arrivals = sorted(rng.randrange(settings.duration_ms) for _ in range(settings.jobs))
    n = 0
    while n < len(arrivals):
        size = rng.randint(1, 5)
        batch = []
        for m in range(n, min(n + size, len(arrivals))):
            topic = rng.choice(settings.topics).name
            delay = settings.delays.sample(rng)
            job_id = f"j{m:06d}"
            batch.append((topic, job_id, delay))
            if rng.random() < settings.cancel_share:
                cancel_at = arrivals[n] + rng.randint(0, delay + 60_000)
                push(start_ms + cancel_at, "cancel", rng.random() < 0.5, (topic, job_id))
        push(start_ms + arrivals[n], "add", rng.random() < 0.5, batch)
        n += size
    # Bursts of jobs due at once fill the ready lists past what the pools take, and some are
    # cancelled while they wait there.
    for b in range(settings.bursts):
        at = rng.randrange(settings.duration_ms)
        topic = rng.choice(settings.topics).name
        batch = [(topic, f"b{b:03d}-{m:03d}", 0) for m in range(rng.randint(10, 30))]
        push(start_ms + at, "add", False, batch)
        for _, job_id, _ in batch:
            if rng.random() < 0.2:
                push(start_ms + at + rng.randint(1, 10_000), "cancel", False, (topic, job_id))
    # Operators pause a topic now and then and resume it later (an rng of its own, so the
    # rest of a seed's plan stays what it was).
    pauses = random.Random(f"{settings.seed}:pauses")
    for _ in range(settings.pauses):
        at = pauses.randrange(settings.duration_ms)
        topic = pauses.choice(settings.topics).name
        until = min(at + pauses.randint(*settings.pause_ms), settings.duration_ms)
        push(start_ms + at, "pause", pauses.random() < 0.5, topic)
        push(start_ms + until, "resume", pauses.random() < 0.5, topic)
    # Faults come in storms with calm periods between; within a storm at twice the mean rate.
    periods = storms(rng, settings.duration_ms, settings.storm_ms, settings.calm_ms)
    later = random.Random(f"{settings.seed}:later-fault-times")
    for kind, interval_ms in sorted(settings.fault_interval_ms.items()):
        # A kind added later draws from its own source: the others' times stay what they were.
        draw = later if kind in LATER_FAULTS else rng
        for fault_at in fault_times(draw, periods, interval_ms / 2):
            # A backward step fires while the actors are idle (see World.step_back).
            busy = draw.random() < settings.busy_fault_share and kind != "clock_step_back"
            push(start_ms + int(fault_at), kind, busy, draw.randrange(2**32))
    heapq.heapify(events)
    return events


class Driver:
    def __init__(self, settings: DetSettings, world: World, progress: report.Progress) -> None:
        self.settings = settings
        self.world = world
        self.progress = progress
        self.events = plan(settings, world.start_ms)
        self.order = len(self.events)
        self.steps = 0
        self.rng = random.Random(f"{settings.seed}:driver")
        # The step while a timer is overdue: it grows while steps change nothing (a timer that
        # keeps re-arming in the past would otherwise hold the clock to min_step_ms forever).
        self.floor_ms = settings.min_step_ms
        self.cut_short = False
        self.schedules: tuple[str, ...] = ()

    def run(self) -> None:
        s, w = self.settings, self.world
        for n in range(s.workers):
            w.start_worker(f"w{n + 1}")
        self.schedules = (w.start_schedule(),)
        w.settle()
        end_ms = w.start_ms + s.duration_ms
        deadline = time.monotonic() + MODES[s.mode].real_limit_s
        while w.clock.now_ms() < end_ms or self.events:
            if time.monotonic() > deadline:
                log.warning("real-time limit reached at %s", report.hms(w.clock.now_ms()))
                self.cut_short = True
                self.events = []
                break
            self.step(end_ms)
        self.drain(end_ms)

    def step(self, limit_ms: int | None) -> None:
        w = self.world
        now = w.clock.now_ms()
        before = w.progress_marker()
        target = self.next_target(now, limit_ms)
        w.clock.advance(target - now)
        self.steps += 1
        w.hangs.release_due(target)
        fired = self.fire_due(target, busy=True)
        w.settle()
        if self.fire_due(target, busy=False) or fired:
            w.settle()
        if fired or w.progress_marker() != before:
            self.floor_ms = self.settings.min_step_ms
        else:
            self.floor_ms = min(self.settings.max_step_ms, self.floor_ms * 4)
        self.show()

    def next_target(self, now: int, limit_ms: int | None) -> int:
        s, w = self.settings, self.world
        candidates = [now + s.max_step_ms]
        if self.events:
            candidates.append(self.events[0].at_ms)
        for at in (w.clock.next_timer_ms(), w.hangs.next_release_ms()):
            if at is not None:
                candidates.append(at)
        earliest = w.admin.zrange(w.reader.keys.delayed, 0, 0, withscores=True)
        if earliest and int(earliest[0][1]) > now:
            candidates.append(int(earliest[0][1]))
        if limit_ms is not None and now < limit_ms:
            candidates.append(limit_ms)
        # A timer already due hides the next ones: step by the floor, which only grows while
        # such steps change nothing (a timer that keeps re-arming in the past). Otherwise the
        # clock goes exactly to the next timer, so no timeout or expiry is skipped over.
        next_timer = w.clock.next_timer_ms()
        overdue = next_timer is not None and next_timer <= now
        return max(now + (self.floor_ms if overdue else s.min_step_ms), min(candidates))

    def fire_due(self, now: int, busy: bool) -> bool:
        """Fires the planned events due by ``now`` of one phase (busy or quiet)."""
        due = []
        while self.events and self.events[0].at_ms <= now:
            due.append(heapq.heappop(self.events))
        fired = False
        for event in due:
            if event.busy is not busy:
                heapq.heappush(self.events, event)  # the other phase of this step fires it
                continue
            fired = True
            self.fire(event)
        return fired

    def fire(self, event: Planned) -> None:
        w = self.world
        if event.kind == "add":
            w.add_jobs(event.data)
        elif event.kind == "cancel":
            w.cancel(*event.data)
        elif event.kind in ("pause", "resume"):
            w.pause(event.data, event.kind == "pause")
        elif event.kind == "restart":
            if w.workers.get(event.data) is None:
                w.start_worker(event.data)
        else:
            slot = w.fire(event.kind, random.Random(event.data))
            if slot is not None:
                restart_ms = self.rng.randint(*self.settings.restart_after_ms)
                self.order += 1
                heapq.heappush(
                    self.events,
                    Planned(w.clock.now_ms() + restart_ms, self.order, "restart", False, slot),
                )

    def drain(self, end_ms: int) -> None:
        """No more jobs or faults: bring every worker back and run until every job is done."""
        w = self.world
        for slot in w.dead_slots():
            w.start_worker(slot)
        w.settle()
        limit_ms = end_ms + self.settings.drain_limit_ms
        deadline = time.monotonic() + _DRAIN_REAL_LIMIT_S
        while w.pending_jobs() > 0 or w.hangs.blocked() > 0:
            if w.clock.now_ms() >= limit_ms or time.monotonic() > deadline:
                log.warning("drain limit reached with %d jobs pending", w.pending_jobs())
                break
            self.step(None)
        self.progress.done()

    def show(self) -> None:
        w = self.world
        c = w.counters
        elapsed = w.clock.now_ms() - w.start_ms
        self.progress.update(
            f"[deterministic seed {self.settings.seed}] sim {report.hms(elapsed)}/"
            f"{report.hms(self.settings.duration_ms)} steps {self.steps} runs {c.runs_started} "
            f"faults {sum(w.fault_counts.values())} workers {len(w.alive_workers())}/"
            f"{self.settings.workers}"
        )


def reproduce_command(seed: int, mode: str, args: argparse.Namespace) -> str:
    flag = {"ci": " --ci", "soak": " --soak"}.get(mode, "")
    extra = "" if args.hours is None else f" --hours {args.hours:g}"
    extra += (f" --app {args.app}" if args.app else "") + (
        f" --bodies {args.bodies}" if args.bodies else ""
    )
    extra += f" --check {args.check}" if args.check else ""
    return f"{args.prog} --seed {seed}{flag}{extra}"


def run(args: argparse.Namespace, summary_out: TextIO | None = None) -> int:
    """One run; the summary goes to ``summary_out`` (stdout when None)."""
    mode = "ci" if args.ci else "soak" if args.soak else "default"
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    settings = derive(seed, mode, args.hours)
    out = Path(args.out) / f"deterministic-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    # Before the app is imported: its handlers may read it at import time.
    app_dir = prepare_app_dir(out / "app")
    check = load_check(args.check) if args.check else None
    user_handlers: dict[str, Any] = {}
    if args.app:
        user_handlers, topics = load_app_handlers(args.app)
        settings = settings.with_topics(topics)
    _log_to(out / "simulation.log", args.verbose)
    command = reproduce_command(seed, mode, args)
    print(f"{settings.describe()}\nreproduce with: {command}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="redelay-det-"))
    progress = report.Progress()
    real_start = time.monotonic()
    world = World(settings, work, user_handlers, load_bodies(args.bodies))
    try:
        driver = Driver(settings, world, progress)
        driver.run()
        evidence = Evidence(
            ledger=world.ledger.read(),
            audit=list(world.reader.iter_audit()),
            live=world.reader.snapshot(),
            early_tolerance_ms=0,
            fault_window_ms=settings.fault_window_ms,
            schedules=driver.schedules,
            clock_steps=tuple(world.clock_steps),
        )
        simulated_ms = world.clock.now_ms() - world.start_ms
        steps, settles, cut_short = driver.steps, dict(world.settle_results), driver.cut_short
        adds_resent = world.counters.adds_resent
    finally:
        world.stop()
    real_s = time.monotonic() - real_start
    shutil.copy(work / "ledger.sqlite", out / "ledger.sqlite")
    shutil.rmtree(work, ignore_errors=True)
    report.save_audit(evidence.audit, out / "audit.jsonl")
    verdict = check_all(evidence)
    extra_summary: dict[str, Any] = {}
    if check is not None:
        found = run_check(args.check, check, evidence.ledger, settings.fault_window_ms)
        verdict.violations += found.violations()
        extra_summary["user_check"] = {**found.as_dict(), "start_ms": world.start_ms}
    chart_note = chart.draw(
        verdict.lateness.points,
        evidence.ledger.faults,
        world.start_ms,
        out / "lateness.png",
        f"deterministic simulation, seed {seed} ({mode}): lateness by due time",
    )
    summary = report.build(
        "deterministic",
        seed,
        command,
        settings.as_dict(),
        verdict,
        evidence.ledger,
        {
            "time": {
                "real_s": round(real_s, 1),
                "simulated_s": round(simulated_ms / 1000),
                "simulated_hours_per_real_minute": round(
                    simulated_ms / 3_600_000 / (real_s / 60), 1
                ),
            },
            "steps": steps,
            "cut_short_by_real_time_limit": cut_short,
            "settles": settles,
            "notes": {
                "time": f"{report.hms(simulated_ms)} simulated in {real_s:.1f} s real "
                f"({simulated_ms / 3_600_000 / (real_s / 60):.1f} simulated hours per minute), "
                f"{steps} steps",
                # How each step ended: idle (everything done), stable (waiting for a timer),
                # timeout (still moving after the deadline: the step's order may vary per run).
                "settles": ", ".join(f"{k} {n}" for k, n in sorted(settles.items())),
                "adds sent again after a killed connection": adds_resent,
                "cut short by the real-time limit": cut_short,
                "chart": chart_note,
                "evidence": f"{out / 'ledger.sqlite'}, {out / 'audit.jsonl'}",
                "your handlers' records": f"{app_dir} ({APP_DIR_ENV})",
            },
            **extra_summary,
        },
    )
    report.save(summary, out / "summary.json")
    report.emit(summary, args.json, summary_out)
    return int(summary["exit_code"])


def _log_to(path: Path, verbose: bool) -> None:
    """Actor logs (crashes are expected here) go to a file, or also to stderr with -v."""
    handlers: list[logging.Handler] = [logging.FileHandler(path, mode="w")]
    if verbose:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )


PROG = f"python -m {__package__}.deterministic"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """``prog`` is also how the reproduce line starts (``redelay simulate`` passes its own)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Simulates hours of a redelay deployment under faults, on a fake clock.",
        epilog=f"Exit codes: {exit_codes_text()}. See docs/simulations.md.",
    )
    parser.set_defaults(prog=prog)
    parser.add_argument("--seed", type=int, help="the run's seed (default: a random one)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--ci",
        action="store_true",
        help=f"CI-sized: {MODES['ci'].duration_ms // 3_600_000} simulated hours, every fault kind",
    )
    size.add_argument(
        "--soak",
        action="store_true",
        help=f"long: {MODES['soak'].duration_ms // 3_600_000} simulated hours, every fault kind",
    )
    parser.add_argument(
        "--hours",
        type=float,
        help="simulated hours instead of the mode's (jobs and faults scale with them)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--app",
        metavar="MODULE:QUEUE",
        help="run your own handlers: the DelayQueue whose handlers to simulate (see the guide)",
    )
    parser.add_argument(
        "--bodies",
        metavar="MODULE:FUNC",
        help="FUNC(topic, job_id) returns the body of each simulated job (default {'id': id})",
    )
    parser.add_argument(
        "--check",
        metavar="MODULE:FUNC",
        help="FUNC() reads what your handlers recorded and raises when an invariant broke "
        "(exit 18)",
    )
    parser.add_argument(
        "--out",
        default="simulations/out",
        help="where the ledger, log, chart and summary go (default: simulations/out)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="actor logs on stderr too")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.hours is not None and not 0 < args.hours <= 24 * 365:
        parser.error("--hours must be above 0 and at most a year")
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
    except KeyboardInterrupt:
        return 130
    except Exception:
        log.exception("the simulator failed")
        import traceback

        traceback.print_exc()
        print("simulation: the simulator itself failed (exit 1)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
