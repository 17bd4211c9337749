"""redelay without actors: one thread driving the Store's transitions directly.

This is the ceiling for the actor system (same scripts, no mailboxes or threads). Producing uses
the same Store.add_many the DelayQueue facade uses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import orjson
import redis

from actors.clock import SystemClock
from actors.storage.store import Store

from ..jobs import BenchJob, DueTimes, ProduceResult, drive
from ..recorder import Recorder
from ..spec import QUEUE_NAME, AgentSpec

BATCH_API: str | None = "add_many: one Lua call per batch"
NAMESPACE = "bench"
CARRY_LIMIT = 1_000
LEASE_LIMIT = 100
IDLE_WAIT_MAX_S = 0.1  # ready jobs added without a wake message are seen at most this late
# A wait on the wake channel is a socket wait, which Python rounds up to whole milliseconds: the
# loop waits there until this long before the due time, and sleeps the rest (a wake message for
# an even earlier job is then read at most this late).
EXACT_SLEEP_S = 0.002


def store_for(socket_path: str) -> Store:
    client = redis.Redis(unix_socket_path=socket_path)
    return Store(client, NAMESPACE, SystemClock())


class Producer:
    batch_api = BATCH_API

    def __init__(self, store: Store) -> None:
        self.store = store

    def add_one(self, job: BenchJob) -> None:
        self.store.add(self.store.new_job(QUEUE_NAME, job.id, job.body(), due_ms=job.due_ms))

    def add_batch(self, jobs: Sequence[BenchJob]) -> None:
        new = self.store.new_job
        self.store.add_many([new(QUEUE_NAME, j.id, j.body(), due_ms=j.due_ms) for j in jobs])

    def close(self) -> None:
        self.store.client.close()


def produce(spec: AgentSpec, due: DueTimes) -> ProduceResult:
    producer = Producer(store_for(spec.socket_path))
    try:
        return drive(spec.scenario, due, producer)
    finally:
        producer.close()


def work(spec: AgentSpec, recorder: Recorder) -> None:
    store = store_for(spec.socket_path)
    clock = store.clock
    assert isinstance(clock, SystemClock)
    pubsub = store.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.wake_channel)
    recorder.ready()
    while True:
        moved, next_due_ms = store.carry(CARRY_LIMIT)
        leases = store.lease(QUEUE_NAME, LEASE_LIMIT)
        for lease in leases:
            recorder.delivered(orjson.loads(lease.body))
        if leases:
            store.ack_many([(lease.topic, lease.id, lease.token) for lease in leases])
            continue
        if moved:
            continue
        wait_s = IDLE_WAIT_MAX_S
        if next_due_ms is not None:
            # From the exact time, as the actors' clock waits (SystemClock.seconds_until).
            wait_s = min(wait_s, max(0.0, clock.seconds_until(next_due_ms)))
        if wait_s > EXACT_SLEEP_S:
            pubsub.get_message(timeout=wait_s - EXACT_SLEEP_S)
        elif wait_s > 0:
            time.sleep(wait_s)
