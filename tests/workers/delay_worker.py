"""A worker process for the integration tests: ``python -m tests.workers.delay_worker --url ...``.

Every delivery is recorded in Redis (list ``<namespace>:deliveries``, "id:attempt:pid") before
the handler works, so the test sees what ran where even after this process is killed. A delivery
that cannot be recorded (Redis is down) raises: a failed attempt, retried on the schedule.
SIGTERM or SIGINT stop it gracefully; it prints one line when started and one when stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import redis

from actors import DelayQueue, Job


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument(
        "--record-url", help="where deliveries are recorded (default --url): around a proxy"
    )
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--topic", default="t")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--work-ms", type=float, default=0.0, help="each handler's work")
    parser.add_argument("--block", action="store_true", help="handlers never return")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--retry", default="1", help="comma-separated seconds")
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--sweep", type=float, default=1.0, help="sweep interval, seconds")
    parser.add_argument("--poison", help="the id of a job whose handler kills this process")
    return parser.parse_args(argv)


def deliveries_key(namespace: str) -> str:
    return f"{namespace}:deliveries"


def main(argv: list[str]) -> int:
    args = parse(argv)
    queue = DelayQueue(args.url, namespace=args.namespace, sweep_interval_s=args.sweep)
    recorder = redis.Redis.from_url(args.record_url or args.url, socket_timeout=2)
    key = deliveries_key(args.namespace)
    pid = os.getpid()
    forever = threading.Event()

    @queue.handler(
        args.topic,
        concurrency=args.concurrency,
        timeout=args.timeout,
        retry=[float(x) for x in args.retry.split(",")],
        lease=args.lease,
    )
    def handle(job: Job) -> None:
        recorder.rpush(key, f"{job.id}:{job.attempt}:{pid}")
        if job.id == args.poison:
            os._exit(3)  # what a segfault in an extension or the OOM killer does: no goodbye
        if args.block:
            forever.wait()
        if args.work_ms:
            time.sleep(args.work_ms / 1000)

    queue.install_signal_handlers(grace=args.grace)
    queue.start()
    print(json.dumps({"event": "started", "pid": pid}), flush=True)
    queue.wait()
    print(json.dumps({"event": "stopped", "pid": pid}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
