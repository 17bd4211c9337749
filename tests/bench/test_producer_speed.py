"""simulations/bench/probes/producer_speed.py runs each producer against its own private
redis-server, checks that every job it timed is stored, and reports each mode (the stream mode
included)."""

from __future__ import annotations

import json

import pytest
import redis

from actors.server.embedded import RedisProcess
from simulations.bench.probes import producer_speed


def test_every_mode_reports_and_stores_every_job(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--jobs", "300", "--rounds", "1", "--batch", "100", "--concurrency", "4", "--json"]
    assert producer_speed.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    modes = [result["mode"] for result in report["results"]]
    assert modes == [
        "sync add, one thread",
        "async add, one loop, 4 tasks",
        "add_many, 100 per call",
        "add_stream, 100 per batch",
        "async add_stream, 100 per batch",
    ]
    for result in report["results"]:
        assert result["jobs"] == 300 and result["best_jobs_per_s"] > 0
    assert isinstance(report["pinned"], bool)


def test_a_stream_round_stores_every_job_then_erases_them(
    redis_server: RedisProcess, redis_client: redis.Redis
) -> None:
    url = redis_server.url
    meter = producer_speed.CpuMeter(url)
    try:
        measured = producer_speed.stream_round(url, "stream-check", 250, 100, meter)
    finally:
        meter.close()
    assert measured.jobs_per_s > 0
    # The round checked the namespace held all 250 (+ its warm-up) before erasing its jobs.
    assert redis_client.keys("*stream-check*") == [b"redelay:{stream-check}:config"]
