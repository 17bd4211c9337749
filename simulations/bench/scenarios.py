"""The scenarios of issue 6: at the sizes of `make bench` (minutes), of `make bench-long` (the
issue's own sizes, about two hours with the peers), and at the quick sizes of development."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Kind = Literal["immediate", "burst", "steady", "enqueue"]
CallStyle = Literal["single", "batch"]

BODY_BYTES = 100  # every job's JSON body is about this long
FILL_BATCH_JOBS = 1_000  # jobs per call when a producer fills a queue as fast as it can
ENQUEUE_DELAY_MS = 3_600_000  # enqueue-only jobs are due in an hour: nothing is delivered
TICK_MS = 10  # a paced producer sends what is owed every tick
# A paced producer that cannot keep up stops at this multiple of the scenario's duration: the
# offered rate is what the scenario measures, and a slow client only reaches part of it.
PACED_OVERRUN = 1.5


@dataclass(frozen=True, slots=True)
class Scenario:
    """One thing every system is asked to do.

    ``jobs`` is the number of jobs the producer adds (for steady: rate x duration).
    ``deliver`` says whether a worker runs and every job must be delivered.
    ``wait_s`` bounds the wait for deliveries after the producer has finished; jobs not delivered
    by then are reported as missing and the lateness figures become lower bounds.
    """

    name: str
    kind: Kind
    jobs: int
    call_style: CallStyle
    deliver: bool
    wait_s: float
    rate_per_s: int | None = None
    duration_s: float | None = None
    delay_min_ms: int = 0
    delay_max_ms: int = 0
    burst_lead_min_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Scenario:
        return Scenario(**data)


def steady(
    rate_per_s: int,
    duration_s: float,
    delay_min_ms: int,
    delay_max_ms: int,
    wait_after_s: float = 30.0,
) -> Scenario:
    """A producer adding ``rate_per_s`` jobs/s for ``duration_s``, each due a uniform
    ``delay_min_ms``..``delay_max_ms`` later; the runner waits ``wait_after_s`` beyond the longest
    delay for the last deliveries. simulations.bench.probes.pending_scale and lateness_hops run this
    one too."""
    return Scenario(
        name=f"steady-{rate_per_s}",
        kind="steady",
        jobs=int(rate_per_s * duration_s),
        call_style="batch",
        deliver=True,
        wait_s=delay_max_ms / 1000 + wait_after_s,
        rate_per_s=rate_per_s,
        duration_s=duration_s,
        delay_min_ms=delay_min_ms,
        delay_max_ms=delay_max_ms,
    )


def full_plan() -> list[Scenario]:
    """`make bench`: every system in one run of under 20 minutes on 2 cores. Sized so that the
    fastest systems still run each scenario for a second or more, and the slowest peers stop at
    the wait bound, their rate taken over what they delivered. What costs the most is the slow
    producers' fill (a burst's due time waits for it): on 2026-12-07, with the host's load
    average at 8 to 21, 10,000 jobs due now and in a burst took 950 of a run's 1,557 s."""
    return [
        Scenario("immediate", "immediate", 5_000, "batch", deliver=True, wait_s=8),
        Scenario("burst", "burst", 5_000, "batch", True, wait_s=8, burst_lead_min_s=2.0),
        steady(1_000, 5.0, 500, 2_000, wait_after_s=3.0),
        steady(5_000, 5.0, 500, 2_000, wait_after_s=3.0),
        Scenario("enqueue-single", "enqueue", 2_000, "single", deliver=False, wait_s=0),
        Scenario("enqueue-batch", "enqueue", 20_000, "batch", deliver=False, wait_s=0),
    ]


def long_plan() -> list[Scenario]:
    """`make bench-long`: the sizes issue 6 asks for."""
    return [
        Scenario("immediate", "immediate", 100_000, "batch", deliver=True, wait_s=240),
        Scenario("burst", "burst", 100_000, "batch", True, wait_s=240, burst_lead_min_s=5.0),
        steady(1_000, 30.0, 5_000, 60_000),
        steady(5_000, 30.0, 5_000, 60_000),
        Scenario("enqueue-single", "enqueue", 20_000, "single", deliver=False, wait_s=0),
        Scenario("enqueue-batch", "enqueue", 100_000, "batch", deliver=False, wait_s=0),
    ]


def quick_plan() -> list[Scenario]:
    """Small enough that every system runs all scenarios in a couple of minutes in total."""
    return [
        Scenario("immediate", "immediate", 1_000, "batch", deliver=True, wait_s=8),
        Scenario("burst", "burst", 1_000, "batch", deliver=True, wait_s=8, burst_lead_min_s=1.5),
        steady(1_000, 1.0, 500, 1_500, wait_after_s=1.5),
        steady(5_000, 1.0, 500, 1_500, wait_after_s=1.5),
        Scenario("enqueue-single", "enqueue", 500, "single", deliver=False, wait_s=0),
        Scenario("enqueue-batch", "enqueue", 5_000, "batch", deliver=False, wait_s=0),
    ]


def tiny_plan(jobs: int = 200) -> list[Scenario]:
    """For the smoke test: the harness end to end in seconds."""
    return [
        Scenario("immediate", "immediate", jobs, "batch", deliver=True, wait_s=20),
        Scenario("burst", "burst", jobs, "batch", deliver=True, wait_s=20, burst_lead_min_s=1.0),
        steady(jobs, 1.0, 200, 600, wait_after_s=9.4),
        Scenario("enqueue-single", "enqueue", jobs, "single", deliver=False, wait_s=0),
        Scenario("enqueue-batch", "enqueue", jobs, "batch", deliver=False, wait_s=0),
    ]
