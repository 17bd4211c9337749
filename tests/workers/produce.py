"""A producer-only process for the integration tests: adds one job and exits, starting no
actor. ``python -m tests.workers.produce --url ... --namespace ... --id ... --delay 0.5``"""

from __future__ import annotations

import argparse
import json
import sys

import pykka

from actors import DelayQueue


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--topic", default="t")
    parser.add_argument("--id", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    queue = DelayQueue(args.url, namespace=args.namespace, producer_only=True)
    try:
        queue.add(args.topic, args.id, {"from": "producer"}, delay=args.delay)
        print(json.dumps({"actors": len(pykka.ActorRegistry.get_all())}), flush=True)
    finally:
        queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
