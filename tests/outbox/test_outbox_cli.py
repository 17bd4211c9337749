"""``redelay outbox relay|status``, ``redelay stats --db`` and ``redelay worker --outbox-db``, run
as processes against a private Redis and an outbox in SQLite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _outbox_db import sqlite_url
from _wait import WAIT_S, wait_until
from sqlalchemy.orm import Session

from actors import outbox

ROOT = Path(__file__).resolve().parents[2]
NS = "outbox-cli"


def env() -> dict[str, str]:
    made = dict(os.environ)
    made["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), made.get("PYTHONPATH")]))
    made.pop("REDELAY_OUTBOX_DB", None)
    return made


def redelay(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "actors.cli", *args]
    return subprocess.run(command, env=env(), cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = sqlite_url(tmp_path)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        outbox.create(conn)
    with Session(engine) as session, session.begin():
        for n in range(3):
            outbox.add(session, "orders", f"o-{n}", delay=3600)
    engine.dispose()
    return url


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_status_relay_and_stats_report_the_outbox(db: str, redis_server: Any) -> None:
    where = ["--redis", redis_server.url, "--namespace", NS]
    assert as_json(redelay("outbox", "status", "--db", db, "--json", *where))["depth"] == 3
    stats = as_json(redelay("stats", "--db", db, "--json", *where))
    assert stats["outbox"]["depth"] == 3 and stats["outbox"]["oldest_ms"] >= 0
    report = as_json(redelay("outbox", "relay", "--once", "--db", db, "--json", *where))
    assert (report["applied"], report["deleted"], report["listening"]) == (3, 3, False)
    assert as_json(redelay("outbox", "status", "--db", db, "--json", *where)) == {
        "depth": 0,
        "oldest_ms": None,
    }
    stats = as_json(redelay("stats", "--db", db, "--json", *where))
    assert stats["totals"]["delayed"] == 3
    text = redelay("stats", "--db", db, *where)
    assert "outbox: 0 rows" in text.stdout


def test_relay_without_a_database_is_a_usage_error(redis_server: Any) -> None:
    result = redelay("outbox", "relay", "--once", "--redis", redis_server.url, "--json")
    assert result.returncode == 2
    assert "--db" in json.loads(result.stdout)["message"]


WORKER = """
from actors import DelayQueue, Job

queue = DelayQueue({url!r}, namespace={ns!r})


@queue.handler("orders")
def handle(job: Job) -> None:
    pass
"""


def test_the_worker_relays_its_outbox(db: str, redis_server: Any, tmp_path: Path) -> None:
    ns = f"{NS}-worker"  # not the namespace the other tests relayed the same ids into
    (tmp_path / "shopworker.py").write_text(WORKER.format(url=redis_server.url, ns=ns))
    command = [sys.executable, "-m", "actors.cli", "worker", "shopworker:queue"]
    command += ["--outbox-db", db, "--json", "--metrics-port", "0"]
    worker = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = redis_server.client()
    try:
        where = ["--redis", redis_server.url, "--namespace", ns]

        def relayed() -> bool:
            found = as_json(redelay("outbox", "status", "--db", db, "--json", *where))
            return bool(found["depth"] == 0)

        assert worker.stdout is not None
        metrics_url = json.loads(worker.stdout.readline())["metrics"]
        wait_until(relayed, "the worker's relay to drain the outbox", timeout_s=WAIT_S)
        assert as_json(redelay("stats", "--json", *where))["totals"]["delayed"] == 3
        with urllib.request.urlopen(metrics_url, timeout=WAIT_S) as response:
            scraped = response.read().decode()
        assert "redelay_outbox_rows 0.0" in scraped
        assert "redelay_outbox_relayed_total 3.0" in scraped
        assert "redelay_outbox_up 1.0" in scraped
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=WAIT_S)
        client.close()
    assert worker.returncode == 0, stderr
    assert "relaying the outbox" in stderr
