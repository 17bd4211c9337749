"""The redelay command, run as a subprocess against a private redis-server."""

from __future__ import annotations

import http.server
import importlib.metadata
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from _tamper import move_due
from _wait import wait_until

import actors
from actors.clock import FakeClock, SystemClock
from actors.server.embedded import RedisProcess
from actors.server.embedded_default import socket_path_for
from actors.storage.keys import member, shard_of
from actors.storage.namespace_config import ensure_shards
from actors.storage.store import Store
from actors.values import TopicConfig

NS = "clitest"


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    if "REDELAY_REDIS_SERVER" in os.environ:  # how the suite finds redis-server: keep it
        env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
    return env


def run(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args],
        capture_output=True,
        text=True,
        env=env or base_env(),
        input=stdin,
        cwd=cwd,
        timeout=60,
    )


class Cli:
    """The command bound to the fixture's server and a test namespace."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run(*args, "--redis", self.url, "--namespace", NS, stdin=stdin)

    def json(self, *args: str, code: int = 0) -> Any:
        result = self(*args, "--json")
        assert result.returncode == code, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def cli(redis_client: redis.Redis, redis_server: RedisProcess) -> Cli:
    return Cli(redis_server.url)


@pytest.fixture
def store(redis_client: redis.Redis) -> Store:  # a real-time store on the same namespace
    return Store(redis_client, NS, SystemClock())


def make_dead(store: Store, topic: str, job_id: str) -> None:
    """Two failed attempts on a one-step schedule: dead."""
    store.add(store.new_job(topic, job_id, {"n": 1}, retry_ms=[0]))
    for _ in range(2):
        (lease,) = store.lease(topic, 1)
        store.fail(topic, job_id, lease.token, "boom", 0)
    info = store.get(topic, job_id)
    assert info is not None and info.state == "dead"


def make_quarantined(redis_client: redis.Redis, topic: str, job_id: str) -> None:
    """A job whose worker was lost twice, the second time while it ran alone: with lost_max=1,
    quarantined. A fake clock moves past the leases."""
    clock = FakeClock(SystemClock().now_ms())
    store = Store(redis_client, NS, clock)
    store.configure_topic(topic, TopicConfig(retry_ms=(0,), lease_ms=100, lost_max=1))
    store.add(store.new_job(topic, job_id, {"n": 1}))
    for worker in ("w1", "w2"):
        assert len(store.lease(topic, 1, worker)) == 1
        clock.advance(100)
        assert store.expire() == (1, None)
    info = store.get(topic, job_id)
    assert info is not None and info.quarantined


# -- help and usage ---------------------------------------------------------------------------

SUBCOMMANDS = ["demo", "worker", "add", "cancel", "get", "stats", "jobs", "dead"]
SUBCOMMANDS += ["history", "replay", "verify", "pause", "resume"]


def test_help_lists_every_subcommand_and_the_exit_codes() -> None:
    result = run("--help")
    assert result.returncode == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout
    assert "exit codes" in result.stdout


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help_with_the_global_options(name: str) -> None:
    result = run(name, "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--redis", "--namespace", "--json"):
        assert option in result.stdout


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "redelay"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "usage: redelay" in result.stdout


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--namespce", "shop", "stats"], "--namespce is no option; did you mean --namespace?"),
        (["stats", "--namspace=shop"], "did you mean --namespace?"),
        (["add", "t", "x", "--dealy", "5"], "--dealy is no option; did you mean --delay?"),
        (["stats", "--zzzzzz"], "--zzzzzz is no option)"),
    ],
)
def test_a_misspelt_option_is_named_with_the_one_meant(args: list[str], hint: str) -> None:
    result = run(*args, "--json")
    assert result.returncode == 2
    assert hint in json.loads(result.stdout)["message"]
    assert hint in result.stderr


@pytest.mark.slow
def test_a_server_that_never_answers_is_named_as_maybe_not_redis() -> None:
    """An HTTP server given as the Redis URL waits for a request line: say what that silence
    likely means, not only "Timeout reading"."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        result = run("stats", "--redis", url, "--json")  # accepted by the backlog, never read
    assert result.returncode == 3, result.stderr
    message = json.loads(result.stdout)["message"]
    assert "accepted the connection but did not answer PING" in message, message
    assert "is it a Redis server" in message


def test_a_worker_that_never_reached_redis_does_not_say_it_lost_it(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"
    (tmp_path / "offline.py").write_text(
        f"from actors import DelayQueue\nqueue = DelayQueue({dead!r})\n"
        "@queue.handler('t')\ndef handle(job):\n    pass\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "actors.cli", "worker", "offline:queue", "--json"],
        cwd=tmp_path,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    error = json.loads(result.stdout)
    assert error["error"] == "no_redis" and "cannot reach its Redis" in error["message"]
    assert "lost the connection" not in result.stderr


def test_unknown_subcommand_and_missing_arguments_exit_2() -> None:
    assert run("frobnicate").returncode == 2
    assert run("add", "only-topic").returncode == 2
    assert run("add", "t", "1", "--delay", "1", "--at", "now").returncode == 2


# -- add, get, cancel -------------------------------------------------------------------------


def test_add_get_cancel_round_trip(cli: Cli) -> None:
    added = cli.json("add", "order.timeout", "42", "--body", '{"total": 12}', "--delay", "5m")
    assert added == {
        "topic": "order.timeout",
        "id": "42",
        "state": "delayed",
        "due_ms": added["due_ms"],
        "replaced": None,
        "kept": False,
    }
    assert abs(added["due_ms"] - (time.time() + 300) * 1000) < 10_000
    job = cli.json("get", "order.timeout", "42")
    assert job["state"] == "delayed" and job["body"] == {"total": 12} and job["attempt"] == 1
    human = cli("get", "order.timeout", "42")
    assert human.returncode == 0 and "delayed" in human.stdout and '"total": 12' in human.stdout
    assert cli.json("cancel", "order.timeout", "42") == {
        "topic": "order.timeout",
        "id": "42",
        "result": "removed",
    }
    missing = cli.json("get", "order.timeout", "42", code=1)
    assert missing["error"] == "not_found" and missing["exit_code"] == 1
    again = cli("cancel", "order.timeout", "42")
    assert again.returncode == 1 and "no job order.timeout/42" in again.stderr


def test_add_of_an_existing_job_exits_4_unless_replace(cli: Cli) -> None:
    assert cli("add", "t", "1", "--delay", "1h").returncode == 0
    result = cli("add", "t", "1", "--delay", "2h")
    assert result.returncode == 4 and "--replace" in result.stderr
    replaced = cli.json("add", "t", "1", "--delay", "2h", "--replace")
    assert replaced["replaced"] == "delayed"


def test_add_at_a_past_epoch_second_means_now_as_in_the_api(cli: Cli) -> None:
    """Issue 11 point 7: `--at 1` was refused ("56.9 years ago") while the API's at=1 means now."""
    before_ms = time.time() * 1000
    added = cli.json("add", "t", "long-ago", "--at", "1")
    assert added["state"] == "ready"
    assert added["due_ms"] >= before_ms - 1_000  # now, not 1970
    too_far = cli("add", "t", "far", "--at", str(time.time() + 20 * 365 * 86_400))
    assert too_far.returncode == 2
    assert "10 years" in too_far.stderr


@pytest.mark.slow
def test_add_times_delays_and_options(cli: Cli, tmp_path: Path) -> None:
    now_ms = time.time() * 1000
    at_iso = cli.json("add", "t", "iso", "--at", "2030-01-01T00:00:00+00:00")
    assert at_iso["due_ms"] == 1_893_456_000_000
    at_epoch = cli.json("add", "t", "epoch", "--at", "1893456000.5")
    assert at_epoch["due_ms"] == 1_893_456_000_500
    relative = cli.json("add", "t", "rel", "--at=+1h30m")
    assert abs(relative["due_ms"] - (now_ms + 5_400_000)) < 10_000
    past = cli.json("add", "t", "past", "--at=-5m")
    assert past["state"] == "ready"
    body_file = tmp_path / "body.json"
    body_file.write_text('{"from": "file"}')
    cli.json(
        "add", "t", "opts", "--body", f"@{body_file}", "--delay", "500ms",
        "--retry", "1s,1m", "--lease", "45s", "--callback", "https://example.com/hook",
    )  # fmt: skip
    job = cli.json("get", "t", "opts")
    assert job["body"] == {"from": "file"}
    assert job["retry_ms"] == [1000, 60000]
    assert job["callback"] == "https://example.com/hook"
    cli("add", "t", "stdin", "--body", "-", stdin="[1, 2, 3]")
    assert cli.json("get", "t", "stdin")["body"] == [1, 2, 3]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--body", "{nope"], "body: --body is not valid JSON"),
        (["--delay", "5x"], "delay: '5x' is not a duration"),
        (["--at", "tomorrow"], "at: 'tomorrow' is not a time"),
        (["--retry", "1s,,x"], "retry: 'x' is not a duration"),
        (["--callback", "ftp://example.com"], "callback: 'ftp://example.com' is not an http"),
        (["--lease", "1ms"], "lease: is 1 ms"),
        (["--body", "@/nonexistent/body.json"], "body: cannot read /nonexistent/body.json"),
    ],
)
def test_bad_input_exits_2_with_a_message_naming_the_field(
    cli: Cli, args: list[str], message: str
) -> None:
    result = cli("add", "t", "1", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert cli("get", "t", "1").returncode == 1  # nothing was written


DEEP_BODY = "[" * 10_000 + "]" * 10_000  # past json's recursion limit, not only orjson's


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (DEEP_BODY.encode(), "is nested too deeply (limit: 254 levels"),
        (b'{"name": "caf\xe9"}', "is not UTF-8 text: byte 13 (0xe9)"),
    ],
    ids=["deep", "latin-1"],
)
@pytest.mark.parametrize("where", ["file", "stdin"])
def test_a_body_json_or_utf8_cannot_read_is_one_clear_error(
    cli: Cli, tmp_path: Path, content: bytes, message: str, where: str
) -> None:
    body_file = tmp_path / "body.json"
    body_file.write_bytes(content)
    body, source = (f"@{body_file}", str(body_file)) if where == "file" else ("-", "stdin")
    with body_file.open("rb") as stdin:
        command = ["add", "t", "1", "--body", body, "--json", "--redis", cli.url]
        result = subprocess.run(
            [sys.executable, "-m", "actors.cli", *command, "--namespace", NS],
            stdin=stdin,
            capture_output=True,
            env=base_env(),
            timeout=60,
        )
    assert result.returncode == 2, result.stderr
    assert b"Traceback" not in result.stderr
    error = json.loads(result.stdout)  # one JSON document, nothing else
    assert error["error"] == "usage", error
    assert error["message"].startswith(f"body: {source} {message}"), error
    assert cli("get", "t", "1").returncode == 1  # nothing was written


def test_a_body_too_deep_for_a_job_names_the_limit(cli: Cli) -> None:
    result = cli.json("add", "t", "1", "--body", "[" * 300 + "]" * 300, code=2)
    assert result["message"].startswith("body: is nested too deeply (limit: 254 levels"), result
    ok = cli.json("add", "t", "2", "--body", "[" * 254 + "]" * 254)
    assert ok["state"] == "ready"


@pytest.mark.parametrize(
    "args",
    [
        ["add", "t", "x", "--delay", "abc"],
        ["add", "t", "x", "--body", "{bad"],
        ["add", "bad topic", "x"],
        ["add", "t", "x", "--lease", "0"],
        ["add", "t", "x", "--at", "2099-01-01T00:00:00Z"],
        ["cancel", "t", "a|b"],
        ["get", "a{b}", "x"],
        ["stats", "--namespace", "a b"],
    ],
)
def test_bad_input_exits_2_with_redis_down_as_with_redis_up(cli: Cli, args: list[str]) -> None:
    """Exit 3 says "try again later": bad input must never say it."""
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"
    down = run(*args, "--redis", dead, "--json")
    up = run(*args, "--redis", cli.url, "--json")
    assert (down.returncode, up.returncode) == (2, 2), (down.stderr, up.stderr)
    assert json.loads(down.stdout)["message"] == json.loads(up.stdout)["message"]


@pytest.mark.parametrize(
    ("args", "arguments"),
    [
        (["--delay", "-5"], {"delay": -5}),
        (["--delay", "11000d"], {"delay": 11000 * 86400}),
        (["--lease", "0"], {"lease": 0}),
        (["--lease", "2d"], {"lease": 2 * 86400}),
        (["--retry", "1s,11000d"], {"retry": [1, 11000 * 86400]}),
    ],
)
def test_duration_errors_speak_seconds_as_the_api_does(
    cli: Cli, args: list[str], arguments: dict[str, Any]
) -> None:
    with pytest.raises(actors.ValidationError) as api:
        actors.DelayQueue(cli.url, NS, producer_only=True).add("t", "x", **arguments)
    result = cli.json("add", "t", "x", *args, code=2)
    assert result["message"] == str(api.value)
    assert "000 ms" not in result["message"], result  # no count of milliseconds


def test_invalid_names_are_refused_with_the_validation_message(cli: Cli) -> None:
    result = cli.json("add", "t", "has space", code=2)
    assert result["error"] == "invalid" and result["message"].startswith("id:")
    assert run("stats", "--redis", cli.url, "--namespace", "a{b}").returncode == 2
    empty = run("stats", "--redis", cli.url, "--namespace", "")  # not quietly "default"
    assert empty.returncode == 2 and "namespace: must not be empty" in empty.stderr


def test_cancel_of_a_running_job_is_a_request(cli: Cli, store: Store) -> None:
    store.add(store.new_job("t", "busy"))
    store.lease("t", 1)
    assert cli.json("cancel", "t", "busy")["result"] == "requested"
    assert cli.json("get", "t", "busy")["cancel_requested"] is True


# -- stats and dead ---------------------------------------------------------------------------


def test_stats_counts_per_topic_and_state(cli: Cli, store: Store) -> None:
    cli("add", "a", "1", "--delay", "1h")
    cli("add", "a", "2")
    cli("add", "b", "1", "--delay", "1h")
    make_dead(store, "b", "2")
    stats = cli.json("stats")
    assert stats["topics"]["a"] == {"delayed": 1, "ready": 1, "leased": 0, "dead": 0, "paused": 0}
    assert stats["topics"]["b"] == {"delayed": 1, "ready": 0, "leased": 0, "dead": 1, "paused": 0}
    assert stats["totals"] == {"delayed": 2, "ready": 1, "leased": 0, "dead": 1}
    assert stats["namespace"] == NS and stats["audit_entries"] > 0
    assert stats["next_due_ms"] is not None
    human = cli("stats")
    assert human.returncode == 0 and "(total)" in human.stdout


@pytest.mark.slow
def test_dead_list_requeue_purge(cli: Cli, store: Store) -> None:
    for topic, job_id in [("a", "1"), ("a", "2"), ("b", "1")]:
        make_dead(store, topic, job_id)
    listed = cli.json("dead", "list")
    assert [(j["topic"], j["id"]) for j in listed] == [("a", "1"), ("a", "2"), ("b", "1")]
    assert all(j["state"] == "dead" and j["attempts_failed"] == 2 for j in listed)
    assert [j["id"] for j in cli.json("dead", "--topic", "b")] == ["1"]
    assert cli.json("dead", "list", "--topic", "b", "--id", "1")[0]["id"] == "1"
    assert cli("dead", "list", "--topic", "b", "--id", "9").returncode == 1
    assert cli.json("dead", "requeue", "--topic", "a", "--id", "2") == {"requeued": 1}
    assert cli.json("get", "a", "2")["state"] == "ready"
    missing = cli("dead", "requeue", "--topic", "a", "--id", "2")
    assert missing.returncode == 1
    assert cli.json("dead", "purge", "--topic", "a") == {"purged": 1}
    assert cli.json("dead", "requeue", "--all") == {"requeued": 1}
    assert cli.json("dead", "list") == []
    assert "no dead jobs" in cli("dead").stdout


def test_dead_list_says_why_a_quarantined_job_died(
    cli: Cli, store: Store, redis_client: redis.Redis
) -> None:
    make_dead(store, "a", "1")
    make_quarantined(redis_client, "q", "1")
    why = "quarantined: its worker was lost once while it ran alone"
    listed = {(j["topic"], j["id"]): j for j in cli.json("dead", "list")}
    quarantined, failed = listed[("q", "1")], listed[("a", "1")]
    assert (quarantined["why"], quarantined["quarantined"]) == (why, True)
    assert (quarantined["lost"], quarantined["attempts_failed"]) == (1, 0)
    assert (failed["why"], failed["quarantined"]) == ("-", False)  # it failed without a traceback
    text = cli("dead", "list").stdout
    assert why in text and "why" in text.splitlines()[0]


def test_dead_requeue_and_purge_need_a_selection(cli: Cli) -> None:
    for args in (
        ["requeue"],
        ["purge"],
        ["purge", "--id", "1"],
        ["purge", "--all", "--topic", "a"],
    ):
        result = cli("dead", *args)
        assert result.returncode == 2, args


# -- history, replay, verify ------------------------------------------------------------------


def test_history_shows_one_jobs_timeline(cli: Cli, store: Store) -> None:
    make_dead(store, "t", "1")
    cli("add", "t", "other")
    events = cli.json("history", "t", "1")
    assert [e["event"] for e in events] == ["added", "leased", "failed", "leased", "dead"]
    assert [e["attempt"] for e in events] == [1, 1, 1, 2, 2]
    assert events[2]["fields"]["why"] == "boom" and events[2]["fields"]["to"] == "ready"
    human = cli("history", "t", "1")
    assert human.returncode == 0
    assert "why: boom" in human.stdout and "now: dead" in human.stdout
    missing = cli("history", "t", "nope")
    assert missing.returncode == 1 and "no events" in missing.stderr


def test_history_since_skips_older_events(cli: Cli) -> None:
    cli("add", "t", "1")
    assert cli("history", "t", "1", "--since", "-1h").returncode == 0
    assert cli("history", "t", "1", "--since", "+1h").returncode == 1


def test_history_reads_the_index_and_scan_reads_the_stream(cli: Cli, store: Store) -> None:
    cli("add", "t", "1")
    indexed = cli.json("history", "t", "1")
    # Events an older redelay wrote are in the stream only: --scan still finds them. (Such a
    # redelay kept no index and no `added` id in the record, field h.)
    store.client.delete(*store.keys.history_keys)
    member = "t|1"
    blob = store.client.hget(store.keys.jobs, member)
    assert isinstance(blob, bytes)
    record = msgpack.unpackb(blob, raw=False)
    del record["h"]
    store.client.hset(store.keys.jobs, member, msgpack.packb(record, use_bin_type=False))
    assert cli("history", "t", "1").returncode == 1
    assert "--scan" in cli("history", "t", "1").stderr
    assert cli.json("history", "t", "1", "--scan") == indexed
    assert [e["event"] for e in indexed] == ["added"]


def test_long_work_reports_progress_on_stderr(cli: Cli, store: Store) -> None:
    store.add_many([store.new_job("t", str(n), delay_ms=60_000) for n in range(600)])
    result = cli("history", "t", "7", "--scan", "--progress")
    assert result.returncode == 0
    assert "reading audit stream: 600/600 entries (100%)" in result.stderr
    replayed = cli("replay", "--progress", "--json")
    assert "replaying audit stream:" in replayed.stderr
    assert json.loads(replayed.stdout)["events"] == 600  # stdout stays clean JSON


@pytest.mark.slow
def test_replay_rebuilds_every_job_at_a_moment(cli: Cli, store: Store) -> None:
    cli("add", "t", "early", "--delay", "1h")
    added_ms = cli.json("history", "t", "early")[0]["at_ms"]
    cli("add", "t", "late", "--delay", "1h")
    cli("cancel", "t", "early")
    before = cli.json("replay", f"--at={added_ms / 1000:.3f}")  # epoch seconds, like the API
    assert [(j["id"], j["state"]) for j in before["jobs"]] == [("early", "delayed")]
    now = cli.json("replay")
    assert [(j["id"], j["state"]) for j in now["jobs"]] == [("late", "delayed")]
    assert now["ended"] == {"acked": 0, "cancelled": 1}
    assert now["counts"] == {"t": {"delayed": 1, "ready": 0, "leased": 0, "dead": 0}}
    assert now["anomalies"] == [] and now["anomaly_count"] == 0
    filtered = cli.json("replay", "--state", "dead")
    assert filtered["jobs"] == []
    human = cli("replay", "--at", "now")
    assert human.returncode == 0 and "late" in human.stdout
    assert "1 cancelled" in human.stdout


def test_replay_of_one_topic_counts_the_ended_jobs_of_that_topic(cli: Cli, store: Store) -> None:
    for topic, job_id in [("t", "a"), ("t", "b"), ("t", "c"), ("u", "a")]:
        store.add(store.new_job(topic, job_id))
        (lease,) = store.lease(topic, 1)
        store.ack(topic, job_id, lease.token)
    cli("add", "u", "gone", "--delay", "1h")
    cli("cancel", "u", "gone")
    assert cli.json("replay")["ended"] == {"acked": 4, "cancelled": 1}
    assert cli.json("replay", "--topic", "t")["ended"] == {"acked": 3, "cancelled": 0}
    assert cli.json("replay", "--topic", "u")["ended"] == {"acked": 1, "cancelled": 1}
    assert cli.json("replay", "--topic", "never")["ended"] == {"acked": 0, "cancelled": 0}
    human = cli("replay", "--topic", "u")
    assert "ended by then: 1 acked, 1 cancelled" in human.stdout, human.stdout


def test_verify_agrees_then_finds_drift(cli: Cli, store: Store, redis_client: redis.Redis) -> None:
    cli("add", "t", "1", "--delay", "1h")
    make_dead(store, "t", "2")
    ok = cli.json("verify")
    assert ok["ok"] is True and ok["drift"] == [] and ok["live_jobs"] == 2
    assert ok["anomaly_count"] == 0
    assert "agree" in cli("verify").stdout
    # Change the live state behind the scripts' back: the log no longer explains it.
    move_due(redis_client, store.keys, member("t", "1"), 12345)
    drift = cli.json("verify", code=1)
    assert drift["ok"] is False
    assert drift["drift"] == [
        {"topic": "t", "id": "1", "field": "due_ms", "replayed": drift["drift"][0]["replayed"],
         "live": drift["drift"][0]["live"]}
    ]  # fmt: skip
    human = cli("verify")
    assert human.returncode == 1 and "DRIFT" in human.stdout


@pytest.mark.slow
def test_a_sharded_namespace_is_read_across_its_shards(
    cli: Cli, redis_client: redis.Redis, redis_server: RedisProcess
) -> None:
    ensure_shards(redis_client, "sharded", 4)
    sharded = Store(redis_client, "sharded", SystemClock(), shards=4)
    ids = [str(n) for n in range(12)]
    assert len({shard_of("t", i, 4) for i in ids}) > 1  # the jobs really are spread out

    def run_sharded(*args: str) -> Any:
        result = run(*args, "--redis", redis_server.url, "--namespace", "sharded", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    for job_id in ids:
        run_sharded("add", "t", job_id, "--delay", "1h")
    assert sharded.stats()["t"]["delayed"] == 12
    assert run_sharded("stats")["totals"]["delayed"] == 12
    assert run_sharded("get", "t", "7")["state"] == "delayed"
    assert [e["event"] for e in run_sharded("history", "t", "7")] == ["added"]
    assert len(run_sharded("replay")["jobs"]) == 12
    assert run_sharded("verify")["ok"] is True
    assert run_sharded("cancel", "t", "7")["result"] == "removed"
    verified = run_sharded("verify")
    assert verified["live_jobs"] == verified["replayed_jobs"] == 11  # added up over the shards
    assert verified["events"] == 13


@pytest.mark.slow
def test_jobs_pages_through_a_sharded_topic_with_the_printed_cursor(
    redis_client: redis.Redis, redis_server: RedisProcess
) -> None:
    ensure_shards(redis_client, "paged", 3)
    sharded = Store(redis_client, "paged", SystemClock(), shards=3)
    ids = [f"j{n:02}" for n in range(11)]
    sharded.add_many(
        [
            sharded.new_job("t", i, {"i": i}, delay_ms=60_000 + 1_000 * (n % 4))
            for n, i in enumerate(ids)
        ]
        + [sharded.new_job("u", i, None, delay_ms=1_000) for i in ids]
    )
    assert len({shard_of("t", i, 3) for i in ids}) == 3

    def paged(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        result = run("jobs", *args, "--redis", redis_server.url, "--namespace", "paged")
        assert result.returncode == code, result.stderr
        return result

    seen: list[tuple[int, str]] = []
    after: list[str] = []
    for _ in range(10):
        page = json.loads(paged("t", "--state", "delayed", "--limit", "4", "--json", *after).stdout)
        assert (page["topic"], page["state"]) == ("t", "delayed") and len(page["jobs"]) <= 4
        seen += [(job["due_ms"], job["id"]) for job in page["jobs"]]
        if page["next_after"] is None:
            break
        after = ["--after", page["next_after"]]
    assert seen == sorted(seen) and sorted(i for _, i in seen) == ids

    human = paged("t", "--state", "delayed", "--limit", "4").stdout
    assert human.splitlines()[0].split() == ["id", "attempt", "due", "when"]
    rows = human.split("\n\n")[0].splitlines()[2:]
    assert len(rows) == 4 and rows[0].split()[0] == "j00"
    assert all(" in " in row for row in rows)  # due times are in the future
    suggested = shlex.split(human.rsplit("next page: ", 1)[1])
    assert suggested[:2] == ["redelay", "jobs"] and "--after" in suggested
    second = run(*suggested[1:])
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0].split()[0] == "id" and "j00" not in second.stdout
    assert "no ready jobs in topic t" in paged("t", "--state", "ready").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "asleep"], "argument --state: invalid choice: 'asleep'"),
        (["--state", "dead", "--limit", "0"], "limit: is 0"),
        (["--state", "dead", "--limit", "1001"], "limit: is 1001"),
        (["--state", "dead", "--after", "nonsense"], "after: is not a cursor"),
        ([], "the following arguments are required: --state"),
    ],
)
def test_jobs_refuses_bad_input_naming_the_field(cli: Cli, args: list[str], message: str) -> None:
    result = cli("jobs", "t", *args, "--json")
    assert result.returncode == 2
    assert json.loads(result.stdout)["message"].startswith(message)


# -- where the queue is -----------------------------------------------------------------------


def test_redis_url_and_namespace_come_from_the_environment(
    redis_client: redis.Redis, redis_server: RedisProcess
) -> None:
    env = base_env() | {"REDELAY_REDIS_URL": redis_server.url, "REDELAY_NAMESPACE": "envns"}
    assert run("add", "t", "1", env=env).returncode == 0
    assert Store(redis_client, "envns", SystemClock()).get("t", "1") is not None
    flag_wins = run("get", "t", "1", "--namespace", "other", env=env)
    assert flag_wins.returncode == 1


def test_unreachable_redis_exits_3(tmp_path: Path) -> None:
    result = run("stats", "--redis", f"unix://{tmp_path}/nothing.sock", "--json")
    assert result.returncode == 3
    assert json.loads(result.stdout)["error"] == "no_redis"
    assert "cannot connect to Redis" in result.stderr


def test_no_redis_server_for_the_embedded_default_exits_3(tmp_path: Path) -> None:
    env = base_env() | {"REDELAY_REDIS_SERVER": str(tmp_path / "missing-redis-server")}
    result = run("stats", "--data-dir", str(tmp_path / "data"), env=env)
    assert result.returncode == 3
    assert "REDELAY_REDIS_SERVER" in result.stderr


@pytest.mark.slow
def test_without_a_url_jobs_persist_in_the_embedded_default(tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = run("add", "t", "1", "--delay", "1h", "--data-dir", str(data))
    assert added.returncode == 0, added.stderr
    socket_path = socket_path_for(data.resolve())
    assert not os.path.exists(socket_path)  # the server stopped with the command
    got = run("get", "t", "1", "--json", "--data-dir", str(data))
    assert got.returncode == 0 and json.loads(got.stdout)["state"] == "delayed"
    default_dir = run("stats", cwd=tmp_path)  # ./.redelay by default
    assert default_dir.returncode == 0 and (tmp_path / ".redelay").is_dir()


# -- worker -----------------------------------------------------------------------------------

WORKER_MODULE = """
import time
from pathlib import Path
from actors import DelayQueue

queue = DelayQueue({url!r}, {ns!r})
DONE = Path({done!r})
STARTED = Path({started!r})

@queue.handler("mail.send", concurrency=2)
def send(job):
    STARTED.write_text(job.id)
    time.sleep(job.body.get("sleep", 0))
    DONE.write_text(job.id)
    return "sent"

def make_queue():
    return queue
"""


def start_worker(tmp_path: Path, url: str, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "myworker.py").write_text(
        WORKER_MODULE.format(
            url=url, ns=NS, done=str(tmp_path / "done"), started=str(tmp_path / "started")
        )
    )
    return subprocess.Popen(
        [sys.executable, "-m", "actors.cli", "worker", *args],
        cwd=tmp_path,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "options"),
    [("myworker:queue", ()), ("myworker:make_queue", ("--no-gc-freeze",))],
)
def test_worker_runs_handlers_until_sigterm(
    cli: Cli, tmp_path: Path, target: str, options: tuple[str, ...]
) -> None:
    worker = start_worker(tmp_path, cli.url, target, "--json", *options)
    try:
        assert worker.stdout is not None
        cli("add", "mail.send", "m1", "--body", "{}")
        wait_until(lambda: (tmp_path / "done").exists(), "the handler to run")
        wait_until(
            lambda: cli.json("history", "mail.send", "m1")[-1]["event"] == "acked", "the ack"
        )
        events = cli.json("history", "mail.send", "m1")
        assert events[-1]["fields"]["detail"] == "sent"
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    lines = out.strip()
    assert '"event": "started"' in lines and '"signal": "SIGTERM"' in lines
    started = json.loads(lines.splitlines()[0])
    if options:
        assert started["gc_frozen"] is None
    else:  # the started worker's heap (about 50,000 objects) was frozen
        assert started["gc_frozen"] > 1_000


@pytest.mark.slow
def test_worker_lets_a_running_handler_finish_on_sigint(cli: Cli, tmp_path: Path) -> None:
    worker = start_worker(tmp_path, cli.url, "myworker:queue", "--grace", "10")
    try:
        cli("add", "mail.send", "slow", "--body", '{"sleep": 3}')
        # The handler's own marker, not a `redelay get` poll: on a busy machine one run of the
        # command can take longer than the handler, and the leased state is gone before it looks.
        wait_until(lambda: (tmp_path / "started").exists(), "the slow handler to start")
        assert not (tmp_path / "done").exists()  # the signal comes while the handler runs
        worker.send_signal(signal.SIGINT)
        _, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert cli.json("history", "mail.send", "slow")[-1]["event"] == "acked"
    assert "SIGINT: stopping" in err


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nocolon", "is not MODULE:QUEUE"),
        ("no_such_module_xyz:queue", "no module named"),
        ("myworker:missing", "has no 'missing'"),
        ("myworker:DONE", "not a DelayQueue"),
        ("broken:queue", "importing 'broken' failed: RuntimeError('no config')"),
    ],
)
def test_worker_with_a_bad_target_exits_2(
    cli: Cli, tmp_path: Path, target: str, message: str
) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('no config')\n")
    worker = start_worker(tmp_path, cli.url, target)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 2
    assert message in err


def test_sigterm_during_a_command_stops_the_embedded_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    script = textwrap.dedent(
        """
        import sys, time
        from actors.cli import app as cli
        from actors.cli import jobs as _cli_jobs
        def slow(ctx, args):
            ctx.store()
            print("connected", flush=True)
            time.sleep(30)
            return 0
        _cli_jobs.run_stats = slow
        sys.exit(cli.main(sys.argv[1:]))
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, "stats", "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_env(),
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "connected"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert not os.path.exists(socket_path_for(data.resolve()))


def test_a_redis_that_refuses_writes_gives_its_own_exit_code_not_a_traceback(
    redis_factory: Any,
) -> None:
    server = redis_factory()
    client = server.client()
    client.set("ballast", b"x" * 2_000_000)
    client.config_set("maxmemory", "1mb")  # now over maxmemory: noeviction refuses writes
    result = run("--redis", server.url, "--namespace", NS, "add", "t", "j1")
    assert result.returncode == 7, result.stderr
    assert "Redis refused" in result.stderr and "maxmemory" in result.stderr
    assert "Traceback" not in result.stderr
    assert client.exists(f"redelay:{{{NS}.0}}:jobs") == 0


def test_verify_at_maxmemory_exits_as_refused_without_a_traceback(redis_factory: Any) -> None:
    # verify reads the live state in a MULTI, and Redis refuses every command queued in a MULTI
    # while it is over maxmemory: that is a refusal (7) like any other, not a crash.
    server = redis_factory()
    client = server.client()
    assert run("--redis", server.url, "--namespace", NS, "add", "t", "j1").returncode == 0
    client.set("ballast", b"x" * 2_000_000)
    client.config_set("maxmemory", "1mb")
    result = run("--redis", server.url, "--namespace", NS, "verify", "--json")
    assert result.returncode == 7, result.stderr
    assert json.loads(result.stdout)["error"] == "redis_refused"
    assert "Traceback" not in result.stderr


# -- issue 11: what new users hit -------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["cancel", "t", "j1"],
        ["dead", "requeue", "--topic", "t", "--id", "j1"],
        ["dead", "purge", "--topic", "t", "--id", "j1"],
        ["get", "t", "j1"],
        ["history", "t", "j1"],
    ],
)
def test_json_prints_exactly_one_document_when_the_job_is_missing(
    cli: Cli, args: list[str]
) -> None:
    result = cli("--json", *args)
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)  # raises on a second document ("Extra data")
    assert document["error"] == "not_found" and document["exit_code"] == 1
    assert "j1" in document["message"]


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "get"],
        ["get", "only-topic", "--json"],
        ["--json", "frobnicate"],
        ["--json", "dead", "--limit", "many"],
        ["--json", "add", "t", "1", "--delay", "1", "--at", "now"],
        ["--json"],
    ],
)
def test_usage_errors_with_json_are_one_json_document(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["error"] == "usage" and document["exit_code"] == 2
    assert document["message"] and "usage: redelay" in result.stderr
    assert "Traceback" not in result.stderr


def test_usage_errors_without_json_keep_stdout_empty() -> None:
    result = run("get")
    assert result.returncode == 2 and result.stdout == ""
    assert "usage: redelay get" in result.stderr
    assert "the following arguments are required: topic, id" in result.stderr


def test_worker_with_an_unknown_log_level_is_a_usage_error_naming_the_levels(
    cli: Cli, tmp_path: Path
) -> None:
    worker = start_worker(tmp_path, cli.url, "myworker:queue", "--log-level", "LOUD")
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 2, err
    assert "Traceback" not in err
    assert "LOUD" in err and all(level in err for level in ("DEBUG", "INFO", "WARNING", "ERROR"))


def test_worker_takes_a_lowercase_log_level(cli: Cli, tmp_path: Path) -> None:
    worker = start_worker(tmp_path, cli.url, "myworker:queue", "--log-level", "debug")
    try:
        assert worker.stderr is not None
        for line in worker.stderr:
            if "worker started" in line:
                break
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, err


REGISTER_MODULE = """
from pathlib import Path

DONE = Path({done!r})

def register(queue):
    @queue.handler("mail.send")
    def send(job):
        DONE.write_text(job.id)

def broken(queue):
    raise RuntimeError("no config")

def two(queue, settings):
    pass
"""


def test_worker_takes_the_register_function_simulate_takes(cli: Cli, tmp_path: Path) -> None:
    """The same MODULE:ATTR as simulate --app: the worker gives it a queue on --redis and
    --namespace."""
    (tmp_path / "tasks.py").write_text(REGISTER_MODULE.format(done=str(tmp_path / "done")))
    where = ("--redis", cli.url, "--namespace", NS)
    worker = subprocess.Popen(
        [sys.executable, "-m", "actors.cli", "worker", "tasks:register", "--json", *where],
        cwd=tmp_path,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        cli("add", "mail.send", "m1")
        wait_until(lambda: (tmp_path / "done").exists(), "the handler to run")
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert json.loads(out.splitlines()[0])["target"] == "tasks:register"
    assert cli.json("history", "mail.send", "m1")[-1]["event"] == "acked"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("tasks:broken", "worker: calling tasks:broken failed: RuntimeError('no config')"),
        ("tasks:two", "worker: tasks:two takes 2 arguments"),
    ],
)
def test_worker_with_a_function_it_cannot_use_is_one_clear_error(
    cli: Cli, tmp_path: Path, target: str, message: str
) -> None:
    (tmp_path / "tasks.py").write_text(REGISTER_MODULE.format(done=str(tmp_path / "done")))
    result = subprocess.run(
        [sys.executable, "-m", "actors.cli", "worker", target, "--json", "--redis", cli.url],
        cwd=tmp_path,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    error = json.loads(result.stdout)  # one JSON document, nothing else
    assert error["error"] == "usage" and error["message"].startswith(message), error


IDLE_MODULE = """
from actors import DelayQueue

queue = DelayQueue({url!r}, {ns!r})
"""


def test_worker_refuses_a_queue_without_handlers(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "idle.py").write_text(IDLE_MODULE.format(url=cli.url, ns=NS))
    worker = subprocess.Popen(
        [sys.executable, "-m", "actors.cli", "worker", "idle:queue", "--json"],
        cwd=tmp_path,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 2, err
    assert "idle:queue has no handlers" in err and "@queue.handler" in err
    assert json.loads(out)["error"] == "usage"


@pytest.mark.parametrize(("retry", "step"), [("15s,,3m", 2), ("15s,3m,", 3), (",15s", 1)])
def test_an_empty_retry_step_is_refused_naming_the_field(cli: Cli, retry: str, step: int) -> None:
    result = cli("add", "t", "1", "--retry", retry)
    assert result.returncode == 2, result.stdout
    assert f"retry: step {step} of {retry!r} is empty" in result.stderr
    assert cli("get", "t", "1").returncode == 1  # nothing was written


def suggestion(output: str, label: str) -> list[str]:
    """The command printed after ``label``, split as a shell would."""
    (line,) = [line for line in output.splitlines() if line.startswith(label)]
    argv = shlex.split(line[len(label) :])
    assert argv[0] == "redelay"
    return argv[1:]


def test_suggested_commands_work_as_printed(cli: Cli, store: Store, tmp_path: Path) -> None:
    make_dead(store, "t", "j1")
    url = cli.url + "?db=0"  # a URL a shell would glob: it must come back quoted
    got = run("get", "t", "j1", "--redis", url, "--namespace", NS)
    assert got.returncode == 0, got.stderr
    assert shlex.quote(url) in got.stdout
    listed = run("dead", "list", "--redis", url, "--namespace", NS)
    assert listed.returncode == 0, listed.stderr
    for argv in (suggestion(got.stdout, "history: "), suggestion(listed.stdout, "why it died: ")):
        # Run elsewhere, without the environment: only what was printed says where the queue is.
        followed = run(*argv, "--json", cwd=tmp_path)
        assert followed.returncode == 0, (argv, followed.stderr)
        assert json.loads(followed.stdout)[-1]["event"] == "dead"
    assert not (tmp_path / ".redelay").exists()


@pytest.mark.slow
def test_at_takes_epoch_seconds_and_refuses_milliseconds_with_a_hint(cli: Cli) -> None:
    refused = cli("add", "t", "ms", "--at", "1893456000000")
    assert refused.returncode == 2
    assert "looks like milliseconds; --at takes epoch seconds (1893456000)" in refused.stderr
    assert cli("get", "t", "ms").returncode == 1
    assert cli.json("add", "t", "s", "--at", "1893456000")["due_ms"] == 1_893_456_000_000
    utc = cli.json("add", "t", "z", "--at", "2030-01-01T00:00:00Z")
    assert utc["due_ms"] == 1_893_456_000_000
    naive = cli("add", "t", "naive", "--at", "2030-01-01T00:00:00")
    assert naive.returncode == 2 and "needs a time zone" in naive.stderr
    replay = cli("replay", "--at", "1893456000000")
    assert replay.returncode == 2 and "--at takes epoch seconds" in replay.stderr
    since = cli("history", "t", "s", "--since", "1893456000000")
    assert since.returncode == 2 and "--since takes epoch seconds" in since.stderr
    huge = cli("add", "t", "huge", "--at", "1e20")
    assert huge.returncode == 2 and "is not a time in epoch seconds" in huge.stderr


def test_version_is_the_installed_distributions() -> None:
    installed = importlib.metadata.version("redelay")
    assert actors.__version__ == installed
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"redelay {installed}"
    as_json = run("--version", "--json")
    assert json.loads(as_json.stdout) == {"version": installed}


def test_stats_of_a_namespace_never_used_says_so(cli: Cli, redis_server: RedisProcess) -> None:
    def stats(*extra: str) -> subprocess.CompletedProcess[str]:
        return run("stats", "--redis", redis_server.url, "--namespace", "tpyo", *extra)

    unused = stats("--json")
    assert unused.returncode == 0  # docs/cli.md: a note, not a failure
    document = json.loads(unused.stdout)
    assert document["namespace_used"] is False and document["totals"]["delayed"] == 0
    assert "namespace 'tpyo' has never been used" in unused.stderr
    human = stats()
    assert human.returncode == 0 and "never been used" in human.stderr
    assert run("add", "t", "1", "--redis", redis_server.url, "--namespace", "tpyo").returncode == 0
    used = stats("--json")
    assert used.returncode == 0 and json.loads(used.stdout)["namespace_used"] is True
    assert "never been used" not in used.stderr


class _WebPage(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html>hello</html>")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{server.server_address[1]}/0"
    finally:
        server.shutdown()
        server.server_close()


def test_a_url_of_an_http_server_is_not_a_redis_server(web_server: str) -> None:
    result = run("stats", "--redis", web_server, "--json")
    assert result.returncode == 3, result.stderr
    assert f"{web_server} is not a Redis server" in result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["error"] == "no_redis"


def test_help_points_to_a_reference_the_user_has() -> None:
    from actors.cli.app import reference_path

    result = run("--help")
    path = reference_path()
    assert str(path) in result.stdout
    assert path.read_text().startswith("# The `redelay` command")
    # The wheel ships the page where an installed package looks for it first.
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    wheel = tomllib.loads(pyproject.read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"]["docs/cli.md"] == "actors/cli/cli.md"


def test_worker_json_is_one_line_per_event_and_the_last_one_carries_the_error(
    cli: Cli, tmp_path: Path
) -> None:
    worker = start_worker(tmp_path, cli.url, "myworker:queue", "--grace", "0.2", "--json")
    try:
        # Long enough that a loaded machine, starting a fresh interpreter per `get`, still finds
        # it leased; the worker does not wait for it (grace 0.2 s).
        cli("add", "mail.send", "slow", "--body", '{"sleep": 60}')
        wait_until(
            lambda: cli.json("get", "mail.send", "slow")["state"] == "leased",
            "the slow job to be leased",
        )
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 6, err
    events = [json.loads(line) for line in out.splitlines()]  # each line one document
    assert [e["event"] for e in events] == ["started", "stopped"]
    assert events[-1]["error"] == "grace_exceeded" and events[-1]["exit_code"] == 6
    assert "still running after 0.2s" in err


@pytest.mark.parametrize("grace", ["nan", "-1", "inf"])
def test_worker_refuses_a_grace_that_is_not_a_duration(grace: str) -> None:
    result = run("worker", "myworker:queue", "--grace", grace)
    assert result.returncode == 2 and "--grace must be a number of seconds" in result.stderr
