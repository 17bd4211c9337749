"""Redis CPU per delivered job, by what the scripts do: the lease and ack of a job on the Store.

One private redis-server; one namespace per variant of the scripts, each with ``--jobs`` ready
jobs; the variants lease (``--batch`` at a time) and ack in turns of ``--chunk`` jobs, so a change
in the machine's load hits them all alike, and the server's CPU (INFO cpu) is summed per variant.
With ``--carry`` the jobs are delayed instead and the variants carry them, ``--batch`` per call.
The variants are this checkout's scripts with one part of ``lua/_lib.lua`` turned off in a copy
(never the scripts Redis runs for anyone else), to show what each part costs:

- ``as is``: the scripts as they are;
- ``no history rotation``: ``rotate_history_index`` returns at once;
- ``no history index``: ``index_entry`` too (the per-job index of the audit stream);
- ``no audit``: ``audit`` too (no stream entry at all).

The last three are not options: every transition must write its audit entry. What is left under
``no audit`` is the lease and ack work itself and the round trips. ``--lua DIR`` adds the scripts
of another directory as a variant (e.g. an older checkout's ``lua/``), to compare versions.

    python -m simulations.script_cost --batch 10 100
    python -m simulations.script_cost --carry --batch 1000 --lua ../old/lua   # carry, two versions
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis

from actors import DelayQueue
from actors.clock import FakeClock
from actors.server.embedded import RedisProcess
from actors.storage.scripts import load_sources, lua_dir
from actors.storage.store import Store

# Each variant turns off one more helper of _lib.lua: a `do return end` as its first line.
_OFF = {
    "no history rotation": ["rotate_history_index"],
    "no history index": ["rotate_history_index", "index_entry"],
    "no audit": ["rotate_history_index", "index_entry", "audit"],
}


def _variant_dir(base: Path, functions: list[str], into: Path) -> Path:
    into.mkdir(parents=True)
    for path in base.glob("*.lua"):
        text = path.read_text()
        if path.name == "_lib.lua":
            for name in functions:
                text, found = re.subn(
                    rf"^(local function {name}\(.*\)\n)", r"\1  do return end\n", text, flags=re.M
                )
                if found != 1:
                    raise SystemExit(f"_lib.lua: no function {name} to turn off")
        (into / path.name).write_text(text)
    return into


def _redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def use_scripts(store: Store, directory: Path) -> None:
    """Makes the store run the scripts of ``directory`` (same names, same keys)."""
    runner = store._batch.runner
    runner._scripts = {
        name: (keys, store.client.register_script(source))
        for name, (keys, source) in load_sources(directory).items()
    }


def _alternate(
    admin: redis.Redis, stores: dict[str, Store], chunk: int, step: Callable[[Store], int]
) -> dict[str, float]:
    """Redis CPU microseconds per job for each variant: ``step`` (which returns the jobs it
    moved, 0 once there are none) runs in turns of ``chunk`` jobs per variant, so a change in
    the machine's load hits them all alike."""
    spent = dict.fromkeys(stores, 0.0)
    moved = dict.fromkeys(stores, 0)
    left = set(stores)
    while left:
        for label in sorted(left):
            store, before, turn = stores[label], _redis_cpu_s(admin), 0
            while turn < chunk:
                done = step(store)
                if not done:
                    left.discard(label)  # every job done
                    break
                turn += done
            spent[label] += _redis_cpu_s(admin) - before
            moved[label] += turn
    return {label: spent[label] / max(1, moved[label]) * 1e6 for label in stores}


def measure(
    url: str, variants: dict[str, Path], jobs: int, batch: int, chunk: int
) -> dict[str, float]:
    """Redis CPU microseconds per job (lease + ack) for each variant."""
    admin = redis.Redis.from_url(url)
    queues: list[DelayQueue] = []
    stores: dict[str, Store] = {}
    for n, (label, directory) in enumerate(variants.items()):
        queue = DelayQueue(url, f"cost{batch}x{n}", producer_only=True)
        queues.append(queue)
        for start in range(0, jobs, 1_000):
            queue.add_many(
                {"topic": "t", "id": str(k)} for k in range(start, min(start + 1_000, jobs))
            )
        stores[label] = queue.store
        use_scripts(queue.store, directory)

    def lease_and_ack(store: Store) -> int:
        leases = store.lease("t", batch, "cost")
        if leases:
            store.ack_many([(x.topic, x.id, x.token) for x in leases])
        return len(leases)

    try:
        return _alternate(admin, stores, chunk, lease_and_ack)
    finally:
        for queue in queues:
            queue.close()
        admin.close()


def measure_carry(
    url: str, variants: dict[str, Path], jobs: int, batch: int, chunk: int
) -> dict[str, float]:
    """Redis CPU microseconds per job carried, ``batch`` per carry call, for each variant: the
    jobs are added delayed on a fake clock, which then moves past their due time."""
    admin = redis.Redis.from_url(url)
    clock = FakeClock(1_700_000_000_000)
    stores: dict[str, Store] = {}
    for n, (label, directory) in enumerate(variants.items()):
        store = Store(redis.Redis.from_url(url), f"carry{batch}x{n}", clock)
        for start in range(0, jobs, 1_000):
            ids = range(start, min(start + 1_000, jobs))
            store.add_many([store.new_job("t", str(k), delay_ms=60_000) for k in ids])
        use_scripts(store, directory)
        stores[label] = store
    clock.advance(60_000)
    try:
        return _alternate(admin, stores, chunk, lambda store: store.carry(batch)[0])
    finally:
        for store in stores.values():
            store.client.close()
        admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per variant")
    parser.add_argument("--batch", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--chunk", type=int, default=500, help="jobs per turn")
    parser.add_argument("--lua", type=Path, action="append", default=[], help="another lua/")
    parser.add_argument(
        "--carry", action="store_true", help="carry delayed jobs (--batch per call) instead"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, RedisProcess(directory) as server:
        variants = {"as is": lua_dir()}
        for label, functions in _OFF.items():
            variants[label] = _variant_dir(lua_dir(), functions, Path(directory) / label)
        for extra in args.lua:
            variants[str(extra)] = extra
        what = "carry" if args.carry else "lease + ack"
        for batch in args.batch:
            run = measure_carry if args.carry else measure
            costs = run(server.url, variants, args.jobs, batch, args.chunk)
            for label, us in costs.items():
                print(f"batch {batch}: {label}: Redis CPU {us:.1f} us per job ({what})")


if __name__ == "__main__":
    main()
