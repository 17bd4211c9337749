"""What a Sentinel failover loses, with and without WAIT (``Durability``).

For each mode and trial: start a Sentinel deployment (1 master, 1 replica, 3 sentinels) on
loopback, add jobs one by one as fast as one producer can, SIGKILL the master at a random moment,
let the sentinels promote the replica, and count the adds the producer was told succeeded that
the new master does not have. Two conditions:

- ``natural``: the replica keeps up as well as loopback allows;
- ``stalled``: the replica is stopped (SIGSTOP) behind a 48 MB write before the adds, so they
  are still in the master's memory when it dies (a slow or partitioned replica).

    python -m simulations.bench probe failover_loss  # 5 trials per mode and condition
    python -m simulations.bench probe failover_loss --trials 10 --json

One ``--seed`` picks the kill moments.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from actors.clock import SystemClock
from actors.errors import NotReplicatedError
from actors.storage.keys import ShardKeys, split_member
from actors.storage.store import open_store
from actors.storage.topology import connect
from actors.values import Durability

from ...crash.local_redis import LocalSentinel

TOPIC = "loss"
_STALL_BYTES = 48 * 1024 * 1024


@dataclass
class Trial:
    mode: str
    condition: str
    acknowledged: int
    lost: int
    not_replicated: int
    adds_per_s: float


def one_trial(directory: Path, mode: str, condition: str, kill_after_s: float) -> Trial:
    with LocalSentinel(directory) as setup:
        client = connect(setup.url(), socket_timeout=5)
        assert isinstance(client, redis.Redis)
        clock = SystemClock()
        durability = Durability(replicas=1, timeout_ms=200) if mode == "wait" else None
        store = open_store(client, "loss", clock, durability=durability)
        old = setup.master_port()
        replica = next(s for s in setup.servers if s.port != old)
        assert replica.process is not None
        acknowledged: list[str] = []
        not_replicated = 0
        stop = threading.Event()

        def produce() -> None:
            nonlocal not_replicated
            n = 0
            while not stop.is_set():
                job_id = f"job-{n}"
                n += 1
                try:
                    store.add(store.new_job(TOPIC, job_id, n))
                    acknowledged.append(job_id)
                except NotReplicatedError:
                    not_replicated += 1
                except redis.RedisError:
                    return  # the master is gone: what was acknowledged is counted

        if condition == "stalled":
            os.kill(replica.process.pid, signal.SIGSTOP)
            client.set("stall", b"x" * _STALL_BYTES)
        started = time.monotonic()
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        time.sleep(kill_after_s)  # the moment of the crash, drawn from the seed
        setup.server_by_port(old).kill()
        stop.set()
        elapsed = time.monotonic() - started
        if condition == "stalled":
            os.kill(replica.process.pid, signal.SIGCONT)
        producer.join(timeout=30)
        setup.wait_for_new_master(old)
        survivors = client.hkeys(ShardKeys("loss", 0).jobs)
        present = {split_member(s.decode() if isinstance(s, bytes) else s)[1] for s in survivors}
        lost = sum(1 for job_id in acknowledged if job_id not in present)
        client.close()
        clock.close()
        return Trial(
            mode,
            condition,
            len(acknowledged),
            lost,
            not_replicated,
            round((len(acknowledged) + not_replicated) / elapsed),
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"failover_loss: trials={args.trials} seed={args.seed}", file=sys.stderr)
    trials: list[Trial] = []
    with tempfile.TemporaryDirectory(prefix="redelay-failover-") as directory:
        for condition in ("natural", "stalled"):
            for mode in ("no-wait", "wait"):
                for n in range(args.trials):
                    kill_after_s = rng.uniform(0.2, 0.8)
                    where = Path(directory) / f"{condition}-{mode}-{n}"
                    trials.append(one_trial(where, mode, condition, kill_after_s))
                    if not args.json:
                        print(trials[-1], flush=True)
    if args.json:
        print(json.dumps([asdict(t) for t in trials], indent=2))
    else:
        print("\ncondition mode     acknowledged  lost  not-replicated  adds/s (mean)")
        for condition in ("natural", "stalled"):
            for mode in ("no-wait", "wait"):
                rows = [t for t in trials if t.condition == condition and t.mode == mode]
                print(
                    f"{condition:9} {mode:8} {sum(t.acknowledged for t in rows):>12} "
                    f"{sum(t.lost for t in rows):>5} {sum(t.not_replicated for t in rows):>15} "
                    f"{sum(t.adds_per_s for t in rows) / len(rows):>13.0f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
