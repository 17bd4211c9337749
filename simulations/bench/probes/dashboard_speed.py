"""How fast the dashboard answers on a big namespace: the overview and a topic page.

Fills a private redis-server with ``--jobs`` delayed jobs spread over ``--topics`` topics (the
audit stream fills with their ``added`` events, up to its default retention), serves
``actors.dashboard.create_app`` with uvicorn on loopback, and times ``--requests`` GETs of the
overview, of a topic's first page, and of its second page (following the cursor). Prints the
median and p95 per page, in ms, measured from the client (HTTP included). The overview's chart
cache (two seconds) is defeated by spacing nothing: most overview requests in a burst reuse it,
so the first, uncached request is printed separately too.

    python -m simulations.bench probe dashboard_speed  # 100 topics, 1,000,000 jobs
    python -m simulations.bench probe dashboard_speed --jobs 100000 --requests 50

One ``--seed`` drives the ids and due times. The target (issue 13): the overview under 200 ms.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from actors.clock import SystemClock
from actors.dashboard import create_app
from actors.storage.store import Store

from ..server import BenchServer

NAMESPACE = "speed"
BATCH_JOBS = 10_000
HOUR_MS = 3_600_000


def fill(store: Store, jobs: int, topics: int, rng: random.Random) -> None:
    added = 0
    while added < jobs:
        batch = [
            store.new_job(
                f"topic-{rng.randrange(topics):03d}",
                f"job-{added + n:07d}",
                {"n": added + n},
                delay_ms=HOUR_MS + rng.randrange(30 * 24 * HOUR_MS),
            )
            for n in range(min(BATCH_JOBS, jobs - added))
        ]
        store.add_many(batch, replace=True)  # a retried batch (a slow server) is no error
        added += len(batch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_ms(url: str) -> tuple[float, str]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read().decode()
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}")
    return (time.perf_counter() - start) * 1000, body


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"{name:<22} median {statistics.median(ordered):7.1f} ms   p95 {p95:7.1f} ms"
        f"   (n={len(ordered)})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    def say(text: str) -> None:
        if not args.json:  # --json prints one object and nothing else
            print(text, flush=True)

    say(f"seed {args.seed}: {args.jobs:,} jobs over {args.topics} topics")
    with tempfile.TemporaryDirectory() as directory, BenchServer(Path(directory)) as server:
        client = server.process.client()
        store = Store(client, NAMESPACE, SystemClock())
        started = time.perf_counter()
        fill(store, args.jobs, args.topics, rng)
        version = client.info()["redis_version"]
        say(
            f"redis {version}: filled in {time.perf_counter() - started:.1f} s, "
            f"audit stream {store.audit_length():,} entries"
        )
        port = free_port()
        config = uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning")
        web = uvicorn.Server(config)
        thread = threading.Thread(target=web.run, daemon=True)
        thread.start()
        while not web.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        try:
            first_ms, _ = get_ms(base + "/")
            overview = [get_ms(base + "/")[0] for _ in range(args.requests)]
            topic_url = base + "/topic?name=topic-000&state=delayed"
            _, page = get_ms(topic_url)
            found = re.search(r'id="next" href="([^"]+)"', page)
            if found is None:
                print("the topic page has no next page: too few jobs", file=sys.stderr)
                return 1
            second_url = base + found.group(1).replace("&amp;", "&")
            topic = [get_ms(topic_url)[0] for _ in range(args.requests)]
            second = [get_ms(second_url)[0] for _ in range(args.requests)]
        finally:
            web.should_exit = True
            thread.join(timeout=10)
        target = statistics.median(overview) < 200
        if args.json:
            timings = {"overview": overview, "topic_first_page": topic, "topic_second_page": second}
            print(json.dumps({"redis_version": version, "first_ms": first_ms, **timings}))
            return 0 if target else 2
        print(f"overview, first (uncached charts)  {first_ms:7.1f} ms")
        print(summary("overview", overview))
        print(summary("topic, first page", topic))
        print(summary("topic, second page", second))
        print(f"overview median under 200 ms: {'yes' if target else 'NO'}")
        return 0 if target else 2


if __name__ == "__main__":
    sys.exit(main())
