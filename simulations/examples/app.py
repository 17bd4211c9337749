"""An application's handlers, written the way docs/simulations.md asks, to simulate them:

    python -m simulations.crash.deterministic --seed 3 --ci \
        --app simulations.examples.app:register \
        --bodies simulations.examples.app:body
    python -m simulations.crash.chaos --seed 3 --duration 30 \
        --app simulations.examples.app:register \
        --bodies simulations.examples.app:body

``register(queue)`` puts the handlers on whatever DelayQueue it is given: the application's own
at start-up, or each simulated worker's. The handler is idempotent (closing an order twice is
harmless), because at-least-once delivery means a crash can run it twice.
"""

from __future__ import annotations

import threading
from typing import Any

from actors import DelayQueue, Job

# Stands in for the application's database: which orders were closed, and how often.
_closed: dict[str, int] = {}
_lock = threading.Lock()


def register(queue: DelayQueue) -> None:
    @queue.handler("order.timeout", concurrency=4, timeout=10, retry=[5, 60, 600])
    def close_order(job: Job) -> str:
        order = job.body["order"]
        with _lock:
            already = order in _closed
            _closed[order] = _closed.get(order, 0) + 1
        return "already closed" if already else "closed"


def body(topic: str, job_id: str) -> Any:
    """The body of each simulated job of ``topic``."""
    return {"order": f"order-{job_id}", "amount_cents": 1999}
