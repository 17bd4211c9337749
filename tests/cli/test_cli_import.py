"""``redelay import``: a JSON Lines file of jobs added through Store.add_stream, against a real
redis-server, run as users run it (a subprocess of ``python -m actors.cli``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from actors.clock import SystemClock
from actors.server.embedded import RedisProcess
from actors.storage import codec
from actors.storage.store import Store

NS = "imports"


def redelay(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    if "REDELAY_REDIS_SERVER" in os.environ:
        env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args, "--redis", url, "--namespace", NS],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=60,
    )


def write_lines(path: Path, jobs: list[Any]) -> Path:
    path.write_text("".join(json.dumps(job) + "\n" for job in jobs))
    return path


@pytest.fixture
def store(redis_client: redis.Redis) -> Store:
    return Store(redis_client, NS, SystemClock())


def test_imports_every_line_with_durations_times_and_schedules(
    redis_server: RedisProcess, store: Store, tmp_path: Path
) -> None:
    jobs = [
        {"topic": "refund", "id": "r1", "body": {"n": 1}, "delay": "10m", "retry": "15s,3m"},
        {"topic": "refund", "id": "r2", "delay": 90, "retry": [15, "1m"], "lease": "45s"},
        {"topic": "refund", "id": "r3", "at": "2030-01-01T09:00:00Z"},
        {"topic": "refund", "id": "r4", "at": 1_900_000_000},
    ]
    path = write_lines(tmp_path / "jobs.jsonl", jobs)
    path.write_text(path.read_text() + "\n   \n")  # blank lines are skipped
    result = redelay(redis_server.url, "import", str(path), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["jobs"], summary["new"], summary["existing"]) == (4, 4, {})
    now_ms = store.clock.now_ms()
    r1, r2, r3, r4 = (store.get("refund", f"r{k}") for k in range(1, 5))
    assert r1 is not None and r1.body == {"n": 1} and r1.retry_ms == (15_000, 180_000)
    assert 590_000 < r1.due_ms - now_ms <= 600_000
    assert r2 is not None and r2.retry_ms == (15_000, 60_000)
    record = store.client.hget(store.keys.jobs, "refund|r2")
    assert isinstance(record, bytes) and codec.unpack(record)["l"] == 45_000
    assert r3 is not None and r3.due_ms == 1_893_488_400_000
    assert r4 is not None and r4.due_ms == 1_900_000_000_000


def test_a_bad_line_is_named_and_the_batches_before_it_stay(
    redis_server: RedisProcess, store: Store, tmp_path: Path
) -> None:
    jobs: list[Any] = [{"topic": "t", "id": f"j{k}", "delay": 60} for k in range(25)]
    jobs[17] = {"topic": "t", "id": "j17", "delay": "soon"}
    path = write_lines(tmp_path / "bad.jsonl", jobs)
    result = redelay(redis_server.url, "import", str(path), "--batch-size", "10", "--json")
    assert result.returncode == 2
    error = json.loads(result.stdout)
    assert error["error"] == "invalid" and "line 18" in error["message"]
    assert (error["added"], error["first_not_added_line"]) == (10, 11)
    assert store.stats()["t"]["delayed"] == 10
    # Fixed and run again with --if-exists keep: the rest is added, the first ten kept.
    jobs[17]["delay"] = 60
    write_lines(path, jobs)
    again = redelay(redis_server.url, "import", str(path), "--if-exists", "keep", "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["new"], summary["existing"]) == (15, {"delayed": 10})
    assert store.stats()["t"]["delayed"] == 25


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("not json", "line 2: is not valid JSON"),
        ('{"topic": "t", "id": "x", "body": {"n": NaN}}', "line 2: body.n: is NaN or Infinity"),
        ('["a list"]', "line 2: must be a JSON object"),
        ('{"topic": "t"}', "line 2: needs a topic and an id"),
        ('{"topic": "t", "id": "x", "when": 5}', "line 2: unknown fields ['when']"),
        ('{"topic": "t", "id": "x", "delay": 5, "at": 7}', "line 2: delay: give either"),
        ('{"topic": "t", "id": "x", "lease": true}', "line 2: lease: must be a number"),
        ('{"topic": "t", "id": "x|y"}', "line 2: id:"),
    ],
)
def test_every_kind_of_bad_line_names_its_line_and_adds_nothing(
    redis_server: RedisProcess, store: Store, tmp_path: Path, line: str, named: str
) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text('{"topic": "t", "id": "first"}\n' + line + "\n")
    result = redelay(redis_server.url, "import", str(path))
    assert result.returncode == 2
    assert named in result.stderr and "nothing was added" in result.stderr
    assert store.get("t", "first") is None  # its batch was never sent


@pytest.mark.parametrize(
    ("line", "named"),
    [
        (b'{"topic": "t", "id": "x", "body": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
         "line 2: is nested too deeply (limit: 254 levels"),
        (b'{"topic": "t", "id": "caf\xe9"}', "line 2: is not UTF-8 text: byte 25 (0xe9)"),
    ],
    ids=["deep", "latin-1"],
)  # fmt: skip
@pytest.mark.parametrize("where", ["file", "stdin"])
def test_a_line_json_or_utf8_cannot_read_is_named_without_a_traceback(
    redis_server: RedisProcess, store: Store, tmp_path: Path, line: bytes, named: str, where: str
) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"topic": "t", "id": "first"}\n' + line + b"\n")
    name = str(path) if where == "file" else "-"
    with path.open("rb") as stdin:
        command = ["import", name, "--json", "--redis", redis_server.url, "--namespace", NS]
        result = subprocess.run(
            [sys.executable, "-m", "actors.cli", *command],
            stdin=stdin,
            capture_output=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stderr
    assert b"Traceback" not in result.stderr
    error = json.loads(result.stdout)  # one JSON document, nothing else
    assert error["error"] == "invalid" and named in error["message"], error
    assert store.get("t", "first") is None  # its batch was never sent


def test_an_existing_job_exits_4_and_replace_reschedules(
    redis_server: RedisProcess, store: Store, tmp_path: Path
) -> None:
    store.add(store.new_job("t", "j1", {"old": True}, delay_ms=60_000))
    path = write_lines(tmp_path / "jobs.jsonl", [{"topic": "t", "id": f"j{k}"} for k in range(3)])
    refused = redelay(redis_server.url, "import", str(path))
    assert refused.returncode == 4
    assert "t/j1" in refused.stderr and "nothing was added" in refused.stderr
    assert store.get("t", "j0") is None  # j0 shared the batch
    replaced = redelay(redis_server.url, "import", str(path), "--if-exists", "replace", "--json")
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads(replaced.stdout)["existing"] == {"delayed": 1}
    info = store.get("t", "j1")
    assert info is not None and info.body is None and info.state == "ready"


def test_reads_stdin_and_reports_progress_when_asked(
    redis_server: RedisProcess, store: Store
) -> None:
    lines = "".join(
        json.dumps({"topic": "t", "id": f"s{k}", "delay": 60}) + "\n" for k in range(300)
    )
    result = redelay(redis_server.url, "import", "-", "--progress", stdin=lines)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("added 300 of 300 jobs from -")
    assert "import: 300 lines" in result.stderr
    assert store.stats()["t"]["delayed"] == 300


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl"], "cannot read missing.jsonl"),
        (["-", "--batch-size", "0"], "batch-size"),
        (["-", "--if-exists", "drop"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(redis_server: RedisProcess, args: list[str], message: str) -> None:
    result = redelay(redis_server.url, "import", *args, stdin="")
    assert result.returncode == 2
    assert message in result.stderr
