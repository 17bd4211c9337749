"""``redelay demo``: an order-timeout shop, run on the embedded default in about 15 seconds.

Customers place orders that must be paid within a few seconds (a compressed "30 minutes"). Each
order gets a timeout job; paying cancels it. Unpaid orders are closed by a handler when their
timeout fires. The shop's inventory service is flaky: some closes fail and are retried on the
first steps of the stepped schedule (15 s, 3 min, 10 min) divided by ``--speed``; one order's
close never succeeds, so it ends dead. What you watch scroll by is the audit stream itself.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import redis

from actors._constants import DEFAULT_RETRY_SCHEDULE_MS
from actors.cli.context import Context, data_dir, no_redis, not_redis, redis_url
from actors.cli.output import CliError, Exit, format_duration_ms, print_json, table, usage_error
from actors.errors import RedisServerNotFound
from actors.job import Job
from actors.lifecycle import PENDING_STATES, State
from actors.queue import DelayQueue
from actors.replay import compare, fold

TOPIC = "shop.order-timeout"
DEMO_NAMESPACE = "demo"
STEPPED_SCHEDULE_S = tuple(ms / 1000 for ms in DEFAULT_RETRY_SCHEDULE_MS[:3])  # 15s, 3m, 10m
FINISH_TIMEOUT_S = 60.0
STATUS_EVERY_S = 3.0
POLL_S = 0.2  # how often the ticker reads new events


@dataclass
class Order:
    id: str
    customer: str
    total_cents: int
    placed_at_s: float  # seconds after the start
    pay_window_s: float
    pays_at_s: float | None  # None: never pays
    failures: int  # how many closes fail before one succeeds (a large number: never)

    @property
    def total(self) -> str:
        return f"€{self.total_cents / 100:.2f}"


def plan_orders(count: int, seed: int) -> list[Order]:
    """The shop's morning, all from one seed: who pays, whose close fails and how often."""
    rng = random.Random(seed)
    customers = ["ada", "bob", "chen", "dana", "eve", "farid", "gita", "hugo", "ines", "jon"]
    orders: list[Order] = []
    for n in range(count):
        window = round(rng.uniform(2.0, 4.0), 1)
        orders.append(
            Order(
                id=f"A{1001 + n}",
                customer=rng.choice(customers),
                total_cents=rng.randrange(500, 20_000),
                placed_at_s=round(n * 0.25, 2),
                pay_window_s=window,
                pays_at_s=None,
                failures=0,
            )
        )
    # Order 2 is the doomed one: placed early, so it is dead well before the end.
    doomed = orders[1] if count > 1 else orders[0]
    doomed.pay_window_s, doomed.failures = 2.0, 1_000
    others = [o for o in orders if o is not doomed]
    rng.shuffle(others)
    payers = others[: len(others) * 2 // 5]
    for order in payers:
        order.pays_at_s = round(order.placed_at_s + order.pay_window_s * rng.uniform(0.3, 0.8), 2)
    unpaid = others[len(payers) :]
    for n, order in enumerate(unpaid[:3]):
        order.failures = 1 if n < 2 else 2
    return orders


class Shop:
    """The orders' side of the story, and the handler the queue calls (on pool threads)."""

    def __init__(self, orders: list[Order]) -> None:
        self.orders = {o.id: o for o in orders}
        self.closed: set[str] = set()
        self.lock = threading.Lock()

    def close_order(self, job: Job) -> str:
        order = self.orders[job.body["order"]]
        if job.attempt <= order.failures:
            raise RuntimeError("inventory service unavailable (HTTP 503)")
        with self.lock:
            self.closed.add(order.id)
        return f"closed {order.id}, stock released"


class Ticker:
    """Prints the audit stream as it grows: the live progress of the demo."""

    def __init__(self, queue: DelayQueue, shop: Shop, start_s: float, out: TextIO) -> None:
        self.queue = queue
        self.shop = shop
        self.start_s = start_s
        self.out = out
        self.stop_event = threading.Event()
        self.last_id = "0-0"
        self.counts: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._run, name="redelay-demo-ticker", daemon=True)

    def _run(self) -> None:
        last_status = time.monotonic()
        while not self.stop_event.is_set():
            try:
                self.drain()
            except redis.RedisError:
                return
            if time.monotonic() - last_status >= STATUS_EVERY_S:
                last_status = time.monotonic()
                self._status()
            self.stop_event.wait(POLL_S)

    def drain(self) -> None:
        """Prints the events written since the last call, read through the store like every
        other read of the CLI."""
        for entry_id, fields in self.queue.store.iter_audit(start=f"({self.last_id}"):
            self.last_id = entry_id
            self.counts[fields["e"]] += 1
            line = self.describe(fields)
            if line:
                print(line, file=self.out, flush=True)

    def describe(self, f: dict[str, str]) -> str | None:
        order = self.shop.orders.get(f["i"])
        if order is None:
            return None
        at = f"{time.time() - self.start_s:5.1f}s"
        event, attempt = f["e"], f["a"]
        ms = int(f["ms"])
        if event == "added":
            return (
                f"{at}  {order.id} placed         by {order.customer:<5} {order.total:>8}, "
                f"must be paid within {order.pay_window_s:.1f}s"
            )
        if event == "cancelled":
            return f"{at}  {order.id} paid           -> its timeout job is cancelled"
        if event == "failed":
            retry = format_duration_ms(int(f["due"]) - ms)
            why = f["why"]
            return f"{at}  {order.id} close failed   attempt {attempt}: {why}; retry in {retry}"
        if event == "acked":
            detail = f.get("detail", "")
            return f"{at}  {order.id} not paid       -> {detail} (attempt {attempt})"
        if event == "dead":
            return f"{at}  {order.id} DEAD           after {attempt} attempts: {f['why']}"
        return None  # ready / leased: the steps in between

    def _status(self) -> None:
        stats = self.queue.stats().get(TOPIC, {})
        waiting = ", ".join(f"{stats.get(s, 0)} {s}" for s in PENDING_STATES)
        print(f"        ... {waiting}; {stats.get(State.DEAD, 0)} dead", file=self.out, flush=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)
        with contextlib.suppress(redis.RedisError):
            self.drain()  # the events of the last poll interval (the final one, often a death)


def _schedule(orders: list[Order]) -> Iterator[tuple[float, str, Order]]:
    steps = [(o.placed_at_s, "place", o) for o in orders]
    steps += [(o.pays_at_s, "pay", o) for o in orders if o.pays_at_s is not None]
    yield from sorted(steps, key=lambda s: (s[0], s[1] == "place"))


def _summary(queue: DelayQueue, shop: Shop) -> list[dict[str, Any]]:
    """Each order's outcome, read back from the audit stream (the source of truth)."""
    first: dict[str, int] = {}
    last: dict[str, dict[str, str]] = {}
    for _, fields in queue.store.iter_audit():
        if fields["t"] != TOPIC or fields["i"] not in shop.orders:
            continue
        first.setdefault(fields["i"], int(fields["ms"]))
        last[fields["i"]] = fields
    outcome_of = {"cancelled": "paid", "acked": "closed", "dead": "dead"}
    rows = []
    for order in shop.orders.values():
        end = last.get(order.id, {})
        outcome = outcome_of.get(end.get("e", ""), "pending")
        rows.append(
            {
                "order": order.id,
                "customer": order.customer,
                "total": order.total,
                "outcome": outcome,
                "attempts": int(end["a"]) if outcome in ("closed", "dead") else 0,
                "after_ms": int(end.get("ms", 0)) - first.get(order.id, 0),
            }
        )
    return rows


def _finished(queue: DelayQueue) -> bool:
    stats = queue.stats().get(TOPIC, {})
    return not any(stats.get(s, 0) for s in PENDING_STATES)


def _open_queue(args: argparse.Namespace, namespace: str) -> DelayQueue:
    try:
        return DelayQueue(
            redis_url(args),
            namespace,
            data_dir=data_dir(args),
            sweep_interval_s=0.2,  # expired leases come back fast in a 15-second demo
        )
    except RedisServerNotFound as exc:
        raise no_redis(str(exc)) from None
    except redis.ConnectionError as exc:
        raise no_redis(f"cannot connect to Redis: {exc}") from None
    except redis.exceptions.InvalidResponse as exc:
        raise not_redis(redis_url(args) or "the embedded server", exc) from None


def run_demo(ctx: Context, args: argparse.Namespace) -> int:
    if not 1 <= args.orders <= 200:
        raise usage_error("demo: --orders must be 1 to 200")
    if args.speed <= 0:
        raise usage_error("demo: --speed must be positive")
    out = sys.stderr if ctx.json else sys.stdout
    namespace = getattr(args, "namespace", None) or DEMO_NAMESPACE
    orders = plan_orders(args.orders, args.seed)
    shop = Shop(orders)
    schedule = [round(s / args.speed, 3) for s in STEPPED_SCHEDULE_S]
    queue = _open_queue(args, namespace)
    try:
        info: Any = queue.client.info("server")
        queue.store.erase()  # an earlier run's jobs and history (only this namespace's)
        where = redis_url(args) or f"embedded, data in {data_dir(args)}/ (append-only)"
        print(
            f"redis-server {info.get('redis_version')} ({info.get('executable', '?')}); {where}\n"
            f"{len(orders)} orders; unpaid ones close when their pay window ends; failed closes "
            f"retry after {', '.join(f'{s:g}s' for s in schedule)} (15s, 3m, 10m / "
            f"{args.speed:g}), then the order is dead\n",
            file=out,
        )
        queue.handler(TOPIC, concurrency=4, timeout=5, retry=schedule)(shop.close_order)
        start_s = time.time()
        ticker = Ticker(queue, shop, start_s, out)
        queue.start()
        ticker.start()
        try:
            _drive(queue, orders, start_s)
            deadline = time.monotonic() + FINISH_TIMEOUT_S
            while not _finished(queue):
                if time.monotonic() > deadline:
                    raise CliError(Exit.NOT_FOUND, "timeout", "demo: orders still pending at 60s")
                time.sleep(0.1)  # polling the demo's own progress, not a race fix
        finally:
            ticker.stop()
            queue.stop(grace=5)
        return _report(ctx, args, namespace, start_s, _reopen(args, namespace, shop), out)
    finally:
        queue.close()


def _drive(queue: DelayQueue, orders: list[Order], start_s: float) -> None:
    for at_s, action, order in _schedule(orders):
        time.sleep(max(0.0, start_s + at_s - time.time()))  # the shop's own timeline
        if action == "place":
            body = {"order": order.id, "customer": order.customer, "cents": order.total_cents}
            queue.add(TOPIC, order.id, body, delay=order.pay_window_s)
        else:
            queue.cancel(TOPIC, order.id)


def _reopen(args: argparse.Namespace, namespace: str, shop: Shop) -> tuple[list[Any], bool]:
    """Reads the outcome after the stop, through a fresh connection (the embedded server was
    restarted from its append-only file if this process was its only user)."""
    queue = _open_queue(args, namespace)
    try:
        rows = _summary(queue, shop)
        replay = fold(queue.store.iter_audit())
        agree = not compare(replay, queue.store.snapshot()) and not replay.anomalies
        return rows, agree
    finally:
        queue.close()


def _report(
    ctx: Context,
    args: argparse.Namespace,
    namespace: str,
    start_s: float,
    result: tuple[list[dict[str, Any]], bool],
    out: TextIO,
) -> int:
    rows, agree = result
    took_s = time.time() - start_s
    outcomes = Counter(row["outcome"] for row in rows)
    args.namespace = namespace  # the suggested commands name it, whether it was given or not
    dead = next((row["order"] for row in rows if row["outcome"] == "dead"), rows[0]["order"])
    history = ctx.suggest("history", TOPIC, dead)
    if ctx.json:
        print_json(
            {
                "seconds": round(took_s, 2),
                "outcomes": {k: outcomes[k] for k in ("paid", "closed", "dead", "pending")},
                "orders": rows,
                "replay_agrees": agree,
                "history_command": history,
            }
        )
    else:
        print(file=out)
        print(
            table(
                ["order", "customer", "total", "outcome", "attempts", "after"],
                [
                    [
                        r["order"],
                        r["customer"],
                        r["total"],
                        r["outcome"],
                        r["attempts"] or "-",
                        format_duration_ms(r["after_ms"]),
                    ]
                    for r in rows
                ],
            ),
            file=out,
        )
        print(
            f"\n{outcomes['paid']} paid, {outcomes['closed']} closed by the timeout handler, "
            f"{outcomes['dead']} dead, {outcomes['pending']} pending; {took_s:.1f}s\n"
            f"audit replay agrees with the live state: {'yes' if agree else 'NO'}\n\n"
            f"one order's story:  {history}\n"
            f"the dead job:       {ctx.suggest('dead', 'list')}\n"
            f"try again:          {ctx.suggest('dead', 'requeue', '--topic', TOPIC, '--id', dead)}",
            file=out,
        )
    ok = agree and outcomes["pending"] == 0
    return Exit.OK if ok else Exit.NOT_FOUND
