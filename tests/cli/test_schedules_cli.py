"""`redelay schedules list|add|remove`, run as a subprocess against a private redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import redis

from actors.server.embedded import RedisProcess

NS = "clisched"


class Cli:
    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
        if "REDELAY_REDIS_SERVER" in os.environ:
            env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
        argv = [sys.executable, "-m", "actors.cli", *args, "--redis", self.url]
        return subprocess.run(
            [*argv, "--namespace", NS], capture_output=True, text=True, env=env, timeout=60
        )

    def json(self, *args: str, code: int = 0) -> Any:
        result = self(*args, "--json")
        assert result.returncode == code, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def cli(redis_client: redis.Redis, redis_server: RedisProcess) -> Cli:
    return Cli(redis_server.url)


@pytest.mark.slow
def test_add_list_and_remove(cli: Cli) -> None:
    added = cli.json(
        "schedules", "add", "nightly", "reports", "--cron", "0 3 * * *", "--tz", "Europe/Paris",
        "--body", '{"kind": "daily"}',
    )  # fmt: skip
    assert added["outcome"] == "created"
    assert added["pending_id"] == f"@schedule:nightly:{added['next_ms']}"
    assert added["body"] == {"kind": "daily"} and added["tz"] == "Europe/Paris"
    again = cli.json(
        "schedules", "add", "nightly", "reports", "--cron", "0 3 * * *", "--tz", "Europe/Paris",
        "--body", '{"kind": "daily"}',
    )  # fmt: skip
    assert again["outcome"] == "unchanged" and again["next_ms"] == added["next_ms"]
    cli.json("schedules", "add", "poll", "supplier", "--every", "30s", "--misfire", "skip")
    listed = cli.json("schedules")
    assert [(s["name"], s["every_ms"], s["misfire"]) for s in listed] == [
        ("nightly", None, "run_once"),
        ("poll", 30_000, "skip"),
    ]
    text = cli("schedules", "list")
    assert text.returncode == 0 and "every 30" in text.stdout and "0 3 * * *" in text.stdout
    assert cli.json("schedules", "remove", "poll") == {"name": "poll", "removed": True}
    missing = cli.json("schedules", "remove", "poll", code=1)
    assert missing["error"] == "not_found" and missing["removed"] is False
    assert [s["name"] for s in cli.json("schedules", "list")] == ["nightly"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--cron", "61 * * * *"], "cron"),
        (["--every", "5m", "--tz", "Mars/Olympus"], "tz"),
        ([], "--cron or --every"),
    ],
)
def test_bad_input_is_exit_2_naming_the_option(cli: Cli, args: list[str], words: str) -> None:
    error = cli.json("schedules", "add", "bad", "t", *args, code=2)
    assert words in error["message"]
    assert cli.json("schedules") == []
