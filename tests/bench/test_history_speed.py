"""The history benchmark runs end to end on a small stream and measures what it says it does.

Not a timed test: it checks the probes' histories and the figures' presence, never their values.
"""

from __future__ import annotations

import pytest

from actors.server.embedded import RedisProcess
from simulations.bench.probes.history_speed import measure_size, missed


@pytest.mark.slow
def test_the_history_benchmark_measures_every_probe(redis_server: RedisProcess) -> None:
    size = measure_size(redis_server.url, "history-speed-test", 600, api_calls=3, cli_runs=1)
    assert size.entries >= 600
    # added; added, leased, failed, leased, dead; added, leased, acked
    assert {p.state: p.events for p in size.probes} == {"delayed": 1, "dead": 5, "acked": 3}
    assert all(p.api_median_ms > 0 and p.cli_median_s > 0 for p in size.probes)
    assert size.indexed_jobs >= 200 and size.index_bytes > 0
    assert size.scan_s > 0
    slow = type(size.probes[0])("delayed", "t", "x", api_p99_ms=60.0, cli_median_s=0.1)
    size.probes.append(slow)
    assert any("API p99 60.0 ms" in m for m in missed([size]))
