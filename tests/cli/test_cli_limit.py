"""``redelay limit``: a topic's rate and in-flight limits seen and set from the command line, and
shown where operators look (stats, metrics), against a real redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import redis

from actors import DelayQueue, TopicLimits
from actors.clock import SystemClock
from actors.server.embedded import RedisProcess
from actors.storage.store import Store

NS = "limits"


def redelay(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    if "REDELAY_REDIS_SERVER" in os.environ:
        env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args, "--redis", url, "--namespace", NS],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def as_json(url: str, *args: str, code: int = 0) -> Any:
    result = redelay(url, *args, "--json")
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def store(redis_client: redis.Redis) -> Store:
    store = Store(redis_client, NS, SystemClock())
    store.add(store.new_job("mail.send", "m1", delay_ms=3_600_000))
    return store


def test_limits_are_set_listed_shown_and_lifted(redis_server: RedisProcess, store: Store) -> None:
    url = redis_server.url
    assert as_json(url, "limit") == {}
    assert redelay(url, "limit").stdout.strip() == "no topic is limited"
    shown = as_json(url, "limit", "mail.send", "--rate", "100/1m", "--max-in-flight", "5")
    assert shown == {
        "topic": "mail.send",
        "rate": {"jobs": 100, "per_s": 60.0},
        "max_in_flight": 5,
    }
    assert store.limits("mail.send") == TopicLimits((100, 60.0), 5)  # what the workers obey
    assert as_json(url, "limit")["mail.send"]["max_in_flight"] == 5
    assert "100 per 1m00s, 5 in flight" in redelay(url, "limit", "mail.send").stdout
    lifted = as_json(url, "limit", "mail.send", "--lift")
    assert lifted == {"topic": "mail.send", "rate": None, "max_in_flight": None}
    assert store.limits("mail.send") == TopicLimits()
    assert as_json(url, "limit") == {}


def test_stats_and_metrics_show_the_limits_set_through_the_api(
    redis_server: RedisProcess, store: Store
) -> None:
    """A topic slow because of a limit says so where operators look."""
    queue = DelayQueue(redis_server.url, NS, producer_only=True)
    queue.limit("mail.send", rate=(10, 2.0))
    queue.close()
    stats = as_json(redis_server.url, "stats")
    assert stats["limits"] == {
        "mail.send": {"rate": {"jobs": 10, "per_s": 2.0}, "max_in_flight": None}
    }
    text = redelay(redis_server.url, "stats").stdout
    assert "limited (redelay limit): mail.send: 10 per 2.0s" in text
    metrics = redelay(redis_server.url, "metrics").stdout
    assert 'redelay_topic_limit{limit="rate_per_second",topic="mail.send"} 5.0' in metrics
    assert "max_in_flight" not in metrics.split("redelay_topic_limit{", 1)[1]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["mail.sned", "--rate", "5/1s"], 1, "did you mean mail.send?"),
        (["mail.send", "--rate", "5"], 2, "rate: '5' is not JOBS/DURATION"),
        (["mail.send", "--rate", "5/0s"], 2, "rate: has a window of 0.0 s"),
        (["mail.send", "--max-in-flight", "0"], 2, "max-in-flight: is 0"),
        (["mail.send", "--lift", "--rate", "5/1s"], 2, "--lift removes the limits"),
        (["--rate", "5/1s"], 2, "need a TOPIC"),
    ],
)
def test_bad_limits_change_nothing(
    redis_server: RedisProcess, store: Store, args: list[str], code: int, message: str
) -> None:
    error = as_json(redis_server.url, "limit", *args, code=code)
    assert message in error["message"], error
    assert store.all_limits() == {}


def test_a_limit_before_the_first_job_needs_new(redis_server: RedisProcess, store: Store) -> None:
    as_json(redis_server.url, "limit", "refunds", "--max-in-flight", "2", code=1)
    assert as_json(redis_server.url, "limit", "refunds", "--max-in-flight", "2", "--new") == {
        "topic": "refunds",
        "rate": None,
        "max_in_flight": 2,
    }
