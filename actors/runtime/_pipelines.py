"""The ack-and-lease pipelines a pool keeps on Redis while it leases its own freed slots.

While a topic has more ready jobs than the pool has slots, the pool sends each batch of results
as one pipeline: the acks, and a lease of the slots they free (``Store.send_ack_and_lease``),
without waiting for the replies. Up to ``DEPTH_MAX`` pipelines are on their way, each with at
most that share of the pool's slots, so Redis runs the next ones while the pool starts the jobs
of the first instead of the two sides taking turns (`make bench`'s `redelay-tuned` entry).

Below ``CHUNK_MIN`` acks a pipeline costs Redis more per job than the overlap saves, so a pool
with fewer than two chunks' worth of slots sends one at a time, and while pipelines are on their
way only full chunks go out: the rest wait for the next reply.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from actors.storage.sent import SentAckAndLease
from actors.storage.store import Store
from actors.tracing import Span

DEPTH_MAX = 4
CHUNK_MIN = 32

Ack = tuple[str, str, str, str]  # topic, id, token, detail


@dataclass(frozen=True, slots=True)
class Flight:
    """Acks and a lease sent together, replies not read yet."""

    sent: SentAckAndLease
    acks: list[Ack]
    spans: list[Span | None]  # beside acks: each ack's consumer span
    limit: int  # the slots set aside for the lease


class AckLeasePipelines:
    """The pipelines of one pool, oldest first. Used on the pool's thread only."""

    def __init__(self, store: Store, topic: str, slots: int) -> None:
        self.store = store
        self.topic = topic
        self.depth = max(1, min(DEPTH_MAX, slots // CHUNK_MIN))
        self.chunk = max(CHUNK_MIN, slots // self.depth)  # acks per pipeline at most
        self.most = 0  # the most on their way at once, for the pool's Stats
        self._flights: deque[Flight] = deque()

    def __len__(self) -> int:
        return len(self._flights)

    @property
    def full(self) -> bool:
        return len(self._flights) >= self.depth

    def send(self, acks: list[Ack], spans: list[Span | None], limit: int, consumer: str) -> None:
        """Sends ``acks`` and a lease of up to ``limit`` jobs for ``consumer``; a connection
        error is raised, and then nothing is on its way for them."""
        sent = self.store.send_ack_and_lease(acks, self.topic, limit, consumer)
        self._flights.append(Flight(sent, acks, spans, limit))
        self.most = max(self.most, len(self._flights))

    def oldest(self) -> Flight:
        """Takes the oldest pipeline off the list; its ``sent.result()`` reads the replies."""
        return self._flights.popleft()
