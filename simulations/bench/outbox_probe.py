"""The transactional outbox's two numbers (issue 54): commit -> job-in-Redis latency at a steady
commit rate, and how fast a backlog drains compared with ``add_many``.

Starts a private redis-server on a Unix socket and creates a PostgreSQL database of its own
(``--pg``: a server URL, trust auth by default; the database is dropped at the end, whatever
happens). Two parts:

- latency: ``--writers`` threads commit ``--rate`` transactions per second in all for
  ``--seconds``, each one ``outbox.add`` (due in an hour, so nothing is carried), while
  ``redelay outbox relay`` runs as a separate process (LISTEN/NOTIFY). A job's time in Redis is
  its ``added`` audit entry's stream id (Redis's clock, ms); its commit time is the wall clock
  when ``commit()`` returned, on the same machine. Prints p50, p99 and the max.
- drain: ``--rounds`` rounds, each ``--rows`` rows committed while no relay runs, drained by one
  relay in batches of ``--batch``, then as many jobs added with ``DelayQueue.add_many`` in
  batches of 1,000, back to back so the machine's load weighs on both alike. Prints both rates
  per round and the median of the rounds' ratios.

    python -m simulations.bench.outbox_probe              # 1,000/s for 10 s; 5 x 20,000 rows
    python -m simulations.bench.outbox_probe --rate 300 --rounds 3 --batch 5000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from actors import DelayQueue, outbox
from actors.outbox.relay import Relay, status
from actors.server.embedded import RedisProcess

TOPIC = "outbox-probe"
DELAY_S = 3_600
PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def private_database(server_url: str) -> Iterator[str]:
    name = f"redelay_outbox_probe_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def commit_paced(engine: sa.Engine, rate: float, seconds: float, writers: int) -> dict[str, float]:
    """Commits ``rate`` one-add transactions per second for ``seconds``: job id -> commit ms."""
    committed: dict[str, float] = {}
    lock = threading.Lock()
    total = round(rate * seconds)
    counter = iter(range(total))
    start = time.monotonic() + 0.2

    def write() -> None:
        while True:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            wait_s = start + n / rate - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)  # pacing the offered load, not waiting for a result
            job_id = f"j-{n}"
            with Session(engine) as session:
                with session.begin():
                    outbox.add(session, TOPIC, job_id, {"n": n}, delay=DELAY_S)
                done_ms = time.time() * 1000
            with lock:
                committed[job_id] = done_ms

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return committed


def added_ms(queue: DelayQueue) -> dict[str, int]:
    """Job id -> the stream id's ms of its ``added`` audit entry (Redis's clock)."""
    found: dict[str, int] = {}
    for entry_id, fields in queue.store.iter_audit():
        if fields.get("e") == "added" and fields.get("t") == TOPIC:
            found[fields["i"]] = int(str(entry_id).split("-")[0])
    return found


def relay_process(db_url: str, redis_url: str, namespace: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "actors.cli", "outbox", "relay", "--db", db_url,
        "--redis", redis_url, "--namespace", namespace, "--lag-warn", "60",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_empty(engine: sa.Engine, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while status(engine).depth and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the outbox for the end of a drain
    if status(engine).depth:
        raise RuntimeError("the relay did not drain the outbox in time")


def measure_latency(
    db_url: str, redis: RedisProcess, rate: float, seconds: float, writers: int
) -> dict[str, Any]:
    namespace = "probe-latency"
    engine = sa.create_engine(db_url, pool_size=writers + 2)
    relay = relay_process(db_url, redis.url, namespace)
    try:
        # The relay LISTENs before its first pass: once a warm-up row is gone it listens.
        with Session(engine) as session, session.begin():
            outbox.add(session, TOPIC, "warm-up", delay=DELAY_S)
        wait_empty(engine, 60)
        began = time.monotonic()
        committed = commit_paced(engine, rate, seconds, writers)
        elapsed = time.monotonic() - began - 0.2
        wait_empty(engine, 60)
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(30)
        engine.dispose()
    with DelayQueue(redis.url, namespace=namespace, producer_only=True) as queue:
        arrived = added_ms(queue)
    latencies = [arrived[job_id] - ms for job_id, ms in committed.items() if job_id in arrived]
    missing = len(committed) - len(latencies)
    return {
        "commits": len(committed),
        "commits_per_s": round(len(committed) / elapsed, 1),
        "missing": missing,
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
    }


def measure_drain(
    db_url: str, redis: RedisProcess, rows: int, batch: int, rounds: int
) -> dict[str, Any]:
    """``rounds`` rounds, each a drain of ``rows`` rows then ``add_many`` of as many jobs, back
    to back, so a shared machine's load weighs on both alike; the median of the rounds' ratios
    and each mode's best rate."""
    engine = sa.create_engine(db_url)
    drains, adds, ratios, write_rates = [], [], [], []
    with DelayQueue(redis.url, namespace="probe-drain", producer_only=True) as queue:
        queue.stats()  # connect, sync the clock, record the namespace before the clock starts
        relay = Relay(engine, queue.store, batch=batch, lag_warn_ms=3_600_000)
        for round_ in range(rounds):
            written = time.monotonic()
            for first in range(0, rows, 1_000):
                with Session(engine) as session, session.begin():
                    for n in range(first, min(rows, first + 1_000)):
                        outbox.add(session, TOPIC, f"d{round_}-{n}", {"n": n}, delay=DELAY_S)
            write_rates.append(rows / (time.monotonic() - written))
            started = time.monotonic()
            relayed = relay.drain()
            drain_rate = relayed / (time.monotonic() - started)
            specs = [
                {"topic": TOPIC, "id": f"m{round_}-{n}", "body": {"n": n}, "delay": DELAY_S}
                for n in range(rows)
            ]
            started = time.monotonic()
            for first in range(0, rows, 1_000):
                queue.add_many(specs[first : first + 1_000])
            add_rate = rows / (time.monotonic() - started)
            drains.append(drain_rate)
            adds.append(add_rate)
            ratios.append(drain_rate / add_rate)
    engine.dispose()
    return {
        "rows_per_round": rows,
        "rounds": rounds,
        "batch": batch,
        "outbox_writes_per_s": round(max(write_rates)),
        "drain_rows_per_s": [round(r) for r in drains],
        "add_many_jobs_per_s": [round(r) for r in adds],
        "drain_to_add_many": [round(r, 2) for r in ratios],
        "drain_to_add_many_median": round(statistics.median(ratios), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default=os.environ.get("REDELAY_BENCH_POSTGRES_URL", PG_DEFAULT))
    parser.add_argument("--rate", type=float, default=1_000.0, help="commits/s offered (1000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="of steady load (10)")
    parser.add_argument("--writers", type=int, default=4, help="writer threads (4)")
    parser.add_argument("--rows", type=int, default=20_000, help="backlog per round (20000)")
    parser.add_argument("--rounds", type=int, default=5, help="drain/add_many rounds (5)")
    parser.add_argument("--batch", type=int, default=1_000, help="relay batch (1000)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="outbox-probe-") as directory:
        redis = RedisProcess(directory).start()
        try:
            with private_database(args.pg) as db_url:
                engine = sa.create_engine(db_url)
                with engine.begin() as conn:
                    outbox.create(conn)
                engine.dispose()
                result: dict[str, Any] = {
                    "latency": measure_latency(
                        db_url, redis, args.rate, args.seconds, args.writers
                    ),
                    "drain": measure_drain(db_url, redis, args.rows, args.batch, args.rounds),
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                }
        finally:
            redis.kill()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        lat, drain = result["latency"], result["drain"]
        print(
            f"commit -> job in Redis at {lat['commits_per_s']} commits/s ({lat['commits']} "
            f"commits, {lat['missing']} missing): p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, "
            f"max {lat['max_ms']} ms"
        )
        print(
            f"drain of {drain['rounds']} x {drain['rows_per_round']} rows (batch "
            f"{drain['batch']}): {drain['drain_rows_per_s']} rows/s; add_many: "
            f"{drain['add_many_jobs_per_s']} jobs/s; ratios {drain['drain_to_add_many']}, "
            f"median {drain['drain_to_add_many_median']}"
        )
        print(f"load average {result['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
