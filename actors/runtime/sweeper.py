"""RetrySweeper: recovers leases that expired, whatever process held them.

An expired lease means the consumer crashed or hung; the expire script counts it as a lost lease,
not a failed attempt: the job runs again alone, and is quarantined (dead) once its worker was lost
often enough while it did (lua/_lost.lua). The sweeper runs every ``interval_ms`` and also at the
earliest lease deadline it knows of, so a crashed consumer's job is retried promptly. What it
ended is counted per topic in the recorder's job events (lost, quarantined, cancelled).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pykka
import redis

from actors.clock import Clock, Timer
from actors.runtime._actor import RedelayActor
from actors.runtime._backoff import Backoff, outage_of
from actors.runtime.messages import Stats, Sweep
from actors.runtime.recorder import NO_RECORDER, Recorder
from actors.storage.store import Store

log = logging.getLogger("actors.sweeper")

# Most expire calls per message before yielding the mailbox to other messages (e.g. a stop).
_ROUNDS_PER_MESSAGE = 20


class RetrySweeper(RedelayActor):
    def __init__(
        self,
        store: Store,
        clock: Clock,
        supervisor: pykka.ActorRef[Any] | None = None,
        *,
        interval_ms: int = 1_000,
        batch: int = 1_000,
        name: str = "sweeper",
        recorder: Recorder = NO_RECORDER,
    ) -> None:
        super().__init__(name, clock, supervisor)
        self.store = store
        self.interval_ms = interval_ms
        self.batch = batch
        self.backoff = Backoff(outage=outage_of(store.client), name="sweeper")
        self.timer: Timer | None = None
        self.timer_at_ms: int | None = None
        self.recovered = 0
        self.sweeps = 0
        self.recorder = recorder
        self.outcomes: Counter[tuple[str, str]] = Counter()  # jobs per (topic, event), all sweeps

    def started(self) -> None:
        self.actor_ref.tell(Sweep())

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Sweep):
            self._sweep()
        elif isinstance(message, Stats):
            return {
                "recovered": self.recovered,
                "sweeps": self.sweeps,
                "next_ms": self.timer_at_ms,
                "failures": self.backoff.failures,
                "lost": sum(n for (_, e), n in self.outcomes.items() if e == "lost"),
                "quarantined": sum(n for (_, e), n in self.outcomes.items() if e == "quarantined"),
            }
        return None

    def _record(self, ended: Counter[tuple[str, str]]) -> None:
        for (topic, event), jobs in ended.items():
            self.outcomes[(topic, event)] += jobs
            self.recorder.topic(topic).jobs(event, jobs)
            if event == "quarantined":
                log.error(
                    "sweeper: %d job%s of topic %s quarantined (dead): the worker was lost while "
                    "each ran alone as often as the topic's lost_max allows (redelay dead list)",
                    jobs,
                    "" if jobs == 1 else "s",
                    topic,
                )

    def _sweep(self) -> None:
        now = self.clock.now_ms()
        next_at = now + self.interval_ms
        try:
            for _ in range(_ROUNDS_PER_MESSAGE):
                ended: Counter[tuple[str, str]] = Counter()
                swept = self.store.expire_swept(self.batch, ended)
                self._record(ended)
                self.sweeps += 1
                self.recovered += swept.moved
                if swept.moved < self.batch:
                    break
            else:
                self.actor_ref.tell(Sweep())  # a backlog: come back at once, after other messages
                return
            self.backoff.redis_ok()
            # Timed by the server's clock from a reading before the call (see the carrier).
            if swept.next_in_ms is not None:
                next_at = min(next_at, now + max(0, swept.next_in_ms))
        except redis.RedisError as exc:
            wait_ms = self.backoff.redis_failed(exc, "sweep")
            next_at = now + wait_ms
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_at_ms = self.tell_at(next_at, Sweep()), next_at
