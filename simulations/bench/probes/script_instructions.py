"""Redis's instructions per job in each transition script, counted by valgrind, not timed.

A shared virtual machine's speed moves by a third between runs minutes apart (docs/benchmarks.md,
"Machine and versions"), so a change to a script that saves a few percent of Redis's time is lost
in the noise of a timed run. Instructions are not: ``valgrind --tool=callgrind`` counts the same
total for the same binary and inputs whatever else the machine does (here to within about one
percent: what differs is how the requests happen to arrive). This runs a private
redis-server under callgrind and drives one delayed job's life through the Store on a fake clock:
``add_many`` (``--add-batch`` per call), ``carry``, ``lease`` and ``ack`` (``--batch`` per call),
zeroing the counters before each phase and reading them after it (``callgrind_control``), so each
script's instructions per job are its own: its Lua, the commands it calls, and reading the request
and writing the reply. ``--lua DIR`` adds the scripts of another directory (an older checkout's
``lua/``) as a variant beside this checkout's, each on a fresh server. ``--due-order`` says how
the jobs' due times fall: all at one moment (the default, as before 2026-11-28), one ms apart in
the order added, or at random; the last two spread the delayed set over many buckets
(lua/_delayed.lua), as a queue in use does. ``--ids`` says how the jobs are named: zero-padded
(``job-00000012``, the default), so that ids made in order are in byte order too, or unpadded
(``job-12``, as the benchmarks and most order numbers name them): then a call's jobs due at one
moment fall between jobs already in the set, the costly case for an add.

Needs valgrind (Debian's package ``valgrind``) and a redis-server; about 30 s per variant at the
defaults (valgrind runs Redis some 50 times slower).

    python -m simulations.bench probe script_instructions  # this checkout's scripts
    python -m simulations.bench probe script_instructions --lua /tmp/old/lua
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from actors.clock import FakeClock
from actors.server.embedded import RedisProcess, find_redis_server
from actors.storage.scripts import load_sources, lua_dir
from actors.storage.store import Store
from actors.values import Lease

PHASES = ("add", "carry", "lease", "ack")
_BODY = {"order": 1, "note": "x" * 80}  # about 100 bytes of JSON, as measure_memory's bodies
_DELAY_MS = 60_000
_WARM = 600  # jobs per warm-up group: over the 512 fields a hash holds as a listpack
ID_FORMATS = {"padded": "job-%08d", "unpadded": "job-%d"}


@dataclass(frozen=True)
class Count:
    """One variant's instructions per job, phase by phase (``total``: one delayed job's life)."""

    variant: str
    jobs: int
    per_job: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.per_job.values())


def use_scripts(store: Store, directory: Path) -> None:
    """Makes the store run the scripts of ``directory`` (same names, same keys): another
    version's lua/ beside this checkout's."""
    runner = store._batch.runner
    runner._scripts = {
        name: (keys, store.client.register_script(source))
        for name, (keys, source) in load_sources(directory).items()
    }


def _callgrind_binary(directory: Path, redis_server: str) -> str:
    """A wrapper that starts ``redis-server`` under callgrind (RedisProcess takes a binary)."""
    wrapper = directory / "redis-under-callgrind"
    out = directory / "callgrind.out.%p"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'exec valgrind --tool=callgrind --callgrind-out-file="{out}" -q "{redis_server}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def _control(pid: int, *args: str) -> str:
    done = subprocess.run(
        ["callgrind_control", *args, str(pid)], capture_output=True, text=True, check=True
    )
    return done.stdout


def _instructions(pid: int) -> int:
    """Instructions (Ir) since the last zeroing, summed over the running server's threads (the
    main thread's and the background threads' that free and close for it): callgrind_control
    prints a "Th <n> <count>" line per thread under "Totals:"."""
    lines = _control(pid, "-e", "Ir").splitlines()
    counts = [int(line.split()[2].replace(",", "")) for line in lines if line.split()[:1] == ["Th"]]
    if not counts:
        raise RuntimeError(f"callgrind_control printed no counts for pid {pid}: {lines}")
    return sum(counts)


def _offsets(order: str, count: int, span_ms: int, seed: int) -> list[int]:
    """Each job's due time after the first, in ms: all at once ("same"), one ms apart in the
    order they are added ("ascending", as jobs given one delay arrive), or spread at random
    over ``span_ms`` ("random")."""
    if order == "same":
        return [0] * count
    if order == "ascending":
        return list(range(count))
    rng = random.Random(seed)
    return [rng.randrange(span_ms) for _ in range(count)]


def _warm_up(store: Store, batch: int, due_order: str = "same") -> None:
    """Loads every script and grows each key past Redis's small encodings before counting.

    A hash of at most 512 fields (a sorted set: 128 members) is a listpack, searched entry by
    entry: while the history index's current generation was one, a carry paid over 20,000
    instructions a field to look it up, which a 5,000-job count spread over every job. So, as on
    a queue in use: jobs far in the future keep the delayed set large, leased jobs the leased set
    and the tokens, and the jobs leased after the first ending call (which starts a generation,
    lua/_lib.lua) the current generation of the index.
    """
    later_ms = 365 * 24 * 3_600_000
    parked = [
        store.new_job("parked", f"p{n}", _BODY, delay_ms=later_ms + offset)
        for n, offset in enumerate(_offsets(due_order, _WARM, later_ms, seed=2))
    ]
    store.add_many(parked + [store.new_job("warm", f"w{n}", _BODY) for n in range(_WARM)])
    for round_size in (1, _WARM - 1):
        leases = store.lease("warm", round_size, "instructions")
        ended = leases[: max(1, round_size // 2)]  # the rest stay leased
        store.ack_many([(x.topic, x.id, x.token) for x in ended])
    store.carry(batch)


def count(
    lua: Path,
    label: str,
    jobs: int,
    add_batch: int,
    batch: int,
    redis_server: str,
    due_order: str = "same",
    id_format: str = ID_FORMATS["padded"],
) -> Count:
    """Instructions per job of each phase, for the scripts in ``lua``, on a fresh server;
    ``due_order`` as in ``_offsets``; ``id_format`` one of ``ID_FORMATS``."""
    with tempfile.TemporaryDirectory(prefix="redelay-instructions-") as tmp:
        binary = _callgrind_binary(Path(tmp), redis_server)
        # hz 1: Redis's timed housekeeping (serverCron) would otherwise run ten times a second,
        # and a phase slowed down fifty-fold by valgrind would count more of it.
        redis_dir = Path(tmp) / "redis"
        with RedisProcess(redis_dir, binary=binary, extra_args=("--hz", "1")) as server:
            assert server.process is not None
            pid = server.process.pid
            clock = FakeClock(1_700_000_000_000)
            client = redis.Redis.from_url(server.url, socket_timeout=600)
            store = Store(client, "instructions", clock)
            use_scripts(store, lua)
            _warm_up(store, batch, due_order)
            offsets = _offsets(due_order, jobs, _DELAY_MS, seed=1)

            def phase(work: Callable[[], int]) -> float:
                # A full collection of Lua's heap first, so a phase pays for its own garbage and
                # not for a cycle the phases before it left due (one landing in an ack phase or
                # not moved its count by 2,000 instructions a job at 300 jobs).
                client.eval("collectgarbage('collect') return 0", 0)
                _control(pid, "-z")
                moved = 0
                while step := work():
                    moved += step
                if moved != jobs:
                    raise RuntimeError(f"{label}: a phase moved {moved} of {jobs} jobs")
                return _instructions(pid) / jobs

            added = iter(range(0, jobs, add_batch))

            def add() -> int:
                start = next(added, None)
                if start is None:
                    return 0
                ids = range(start, min(start + add_batch, jobs))
                store.add_many(
                    [
                        store.new_job("t", id_format % n, _BODY, delay_ms=_DELAY_MS + offsets[n])
                        for n in ids
                    ]
                )
                return len(ids)

            held: list[Lease] = []

            def lease_and_keep() -> int:
                leases = store.lease("t", batch, "instructions")
                held.extend(leases)
                return len(leases)

            acks = iter(range(0, jobs, batch))

            def ack() -> int:
                start = next(acks, None)
                if start is None:
                    return 0
                chunk = held[start : start + batch]
                store.ack_many([(x.topic, x.id, x.token) for x in chunk])
                return len(chunk)

            per_job = {"add": phase(add)}
            clock.advance(_DELAY_MS + max(offsets))
            per_job["carry"] = phase(lambda: store.carry(batch)[0])
            per_job["lease"] = phase(lease_and_keep)
            per_job["ack"] = phase(ack)
            client.close()
    return Count(label, jobs, per_job)


NOOP_SCRIPT = "return 0"


def count_noop(calls: int, redis_server: str) -> float:
    """Instructions per call of an empty script (EVALSHA of ``return 0``), request and reply
    included: the least any script call costs Redis, the floor a job's life is held to."""
    with tempfile.TemporaryDirectory(prefix="redelay-instructions-") as tmp:
        binary = _callgrind_binary(Path(tmp), redis_server)
        with RedisProcess(Path(tmp) / "redis", binary=binary, extra_args=("--hz", "1")) as server:
            assert server.process is not None
            client = redis.Redis.from_url(server.url, socket_timeout=600)
            sha = str(client.script_load(NOOP_SCRIPT))
            for _ in range(50):  # the first calls grow the client's query buffer
                client.evalsha(sha, 0)
            _control(server.process.pid, "-z")
            for _ in range(calls):
                client.evalsha(sha, 0)
            found = _instructions(server.process.pid) / calls
            client.close()
    return found


def report(counts: list[Count], add_batch: int, batch: int) -> str:
    lines = [
        f"instructions per job in redis-server (callgrind), add_many of {add_batch}, "
        f"carry, lease and ack of {batch} per call",
        f"{'variant':<24}" + "".join(f"{p:>10}" for p in PHASES) + f"{'life':>11}  vs first",
    ]
    base = counts[0].total
    for c in counts:
        cells = "".join(f"{c.per_job[p]:>10,.0f}" for p in PHASES)
        change = "" if c is counts[0] else f"  {c.total / base - 1:+.1%}"
        lines.append(f"{c.variant:<24}{cells}{c.total:>11,.0f}{change}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per variant")
    parser.add_argument("--add-batch", type=int, default=200, help="jobs per add_many call")
    parser.add_argument("--batch", type=int, default=100, help="jobs per carry, lease, ack")
    parser.add_argument("--lua", type=Path, action="append", default=[], help="another lua/")
    parser.add_argument(
        "--due-order",
        choices=("same", "ascending", "random"),
        default="same",
        help="the jobs' due times: all at once (the default), one ms apart as added, or at random"
        " over a minute (the parked jobs then over a year)",
    )
    parser.add_argument(
        "--ids",
        choices=tuple(ID_FORMATS),
        default="padded",
        help="job ids zero-padded (the default: made in order, they are in byte order) or not",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} not found: install Debian's valgrind package")
    variants = {"this checkout": lua_dir(), **{str(p): p for p in args.lua}}
    redis_server = find_redis_server()
    counts = [
        count(
            path,
            label,
            args.jobs,
            args.add_batch,
            args.batch,
            redis_server,
            args.due_order,
            ID_FORMATS[args.ids],
        )
        for label, path in variants.items()
    ]
    if args.json:
        print(json.dumps({"redis_server": redis_server, "counts": [asdict(c) for c in counts]}))
    else:
        print(f"redis-server: {redis_server} (pid-independent counts; {os.cpu_count()} cores)")
        print(report(counts, args.add_batch, args.batch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
