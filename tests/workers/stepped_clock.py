"""A process whose wall clock the test steps while it runs: ``python -m tests.workers.stepped_clock
[--producer-only] <delay_worker options>``.

The fault is the environment's, so it lives here, in the process's own entry point, never in
redelay: ``time.time`` and ``time.time_ns`` are replaced before anything runs by functions that
add an offset, and the offset changes when the test writes a command on stdin, as an NTP step or
an operator's ``date -s`` changes the clock of a running host. The monotonic clock is left alone:
no host steps it. Commands, one per line, each answered with one JSON line on stdout:

- ``step <seconds>``: the wall clock jumps by that much (either way) from where it is;
- ``add <topic> <id prefix> <count> <delay seconds>``: adds jobs ``<prefix>0``... with that delay
  from this process (a producer with the stepped clock).

Without ``--producer-only`` it also runs a worker of topic ``t`` that records each delivery as
tests/workers/delay_worker.py does (list ``<namespace>:deliveries``, "id:attempt:pid"). It
prints "started" once it runs.
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

_real_time, _real_time_ns = time.time, time.time_ns
_offset_s = 0.0
_print_lock = threading.Lock()


def _stepped_time() -> float:
    return _real_time() + _offset_s


def _stepped_time_ns() -> int:
    return _real_time_ns() + round(_offset_s * 1e9)


def say(message: dict[str, object]) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def serve_commands(producer: DelayQueue) -> None:
    """Reads the test's commands from stdin until it closes."""
    global _offset_s
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "step":
            _offset_s += float(words[1])
            say({"event": "stepped", "offset_s": _offset_s})
        elif words[0] == "add":
            topic, prefix, count, delay_s = words[1], words[2], int(words[3]), float(words[4])
            producer.add_many(
                {"topic": topic, "id": f"{prefix}{n}", "delay": delay_s} for n in range(count)
            )
            say({"event": "added", "count": count})
        else:
            say({"event": "unknown", "line": line.strip()})


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--producer-only", action="store_true")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--work-ms", type=float, default=0.0, help="each handler's work")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--retry", default="1", help="comma-separated seconds")
    parser.add_argument("--sweep", type=float, default=1.0, help="sweep interval, seconds")
    return parser.parse_args(argv)


def run_worker(args: argparse.Namespace) -> None:
    queue = DelayQueue(args.url, namespace=args.namespace, sweep_interval_s=args.sweep)
    recorder = redis.Redis.from_url(args.url, socket_timeout=2)
    pid = os.getpid()

    @queue.handler(
        "t",
        concurrency=args.concurrency,
        retry=[float(x) for x in args.retry.split(",")],
        lease=args.lease,
    )
    def handle(job: Job) -> None:
        recorder.rpush(f"{args.namespace}:deliveries", f"{job.id}:{job.attempt}:{pid}")
        if args.work_ms:
            time.sleep(args.work_ms / 1000)

    queue.start()


def main(argv: list[str]) -> int:
    time.time, time.time_ns = _stepped_time, _stepped_time_ns
    args = parse(argv)
    # Its clocks are synced with Redis now, before any step: a step is what happens after.
    producer = DelayQueue(args.url, namespace=args.namespace, producer_only=True)
    producer.clock.now_ms()
    if not args.producer_only:
        run_worker(args)
    say({"event": "started", "pid": os.getpid()})
    serve_commands(producer)  # until the test kills this process
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
