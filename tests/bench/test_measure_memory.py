"""simulations/bench/probes/measure_memory.py's workloads: how its jobs' due times fall (no size is
asserted: the figures in docs/redis-layout.md come from its runs)."""

from __future__ import annotations

import random
from collections import Counter

from actors.clock import FakeClock
from actors.storage import reads
from actors.storage.store import Store
from simulations.bench.probes import measure_memory


def dues_per_ms(store: Store) -> Counter[int]:
    return Counter(due for _, due in reads.delayed_entries(store.client, store.keys))


def test_per_ms_puts_that_many_jobs_of_a_batch_in_each_ms(
    store: Store, fake_clock: FakeClock
) -> None:
    measure_memory.add_jobs(store, 2_500, 60, random.Random(1), per_ms=100)
    counts = dues_per_ms(store)
    assert sum(counts.values()) == 2_500
    assert set(counts.values()) == {100}  # 1,000 a batch, 100 a ms; the last batch 500
    # three batches, the clock a second later after each
    assert min(counts) == fake_clock.now_ms() - 3_000 + measure_memory.DELAY_MIN_MS


def test_by_default_jobs_are_due_at_random_over_a_month(
    store: Store, fake_clock: FakeClock
) -> None:
    measure_memory.add_jobs(store, 1_000, 60, random.Random(1))
    counts = dues_per_ms(store)
    assert len(counts) > 990  # hardly two in one ms
    now = fake_clock.now_ms()
    assert all(
        now + measure_memory.DELAY_MIN_MS <= due <= now + measure_memory.DELAY_MAX_MS
        for due in counts
    )
