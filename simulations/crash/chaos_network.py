"""The network between each chaos worker and Redis, and its faults (``--production-faults``).

Each worker slot gets its own proxy (:mod:`.proxy`) in front of the one redis-server, and its
processes connect through it; the producer, the driver and the workers' oracle (Redis TIME read at
a handler's start, for the checkers) connect straight to Redis, so what they see is not the fault
under test. A slot's faults:

- ``network_blackhole``: its proxy stops forwarding, no FIN, no RST, sockets kept open, for a
  while drawn from the seed; then it heals (held bytes go first). The worker's leases expire and
  other workers run its jobs; its subscription falls silent.
- ``network_forget``: its proxy forgets every connection open now, as a middlebox that lost its
  table: nothing passes on them ever again and nobody is told. New connections pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .proxy import Proxy


@dataclass
class _Path:
    proxy: Proxy
    heal_at: float | None = None  # monotonic time the blackhole ends, while there is one


class WorkerNetwork:
    def __init__(self, slots: list[str], socket_path: str) -> None:
        self.paths = {slot: _Path(Proxy(socket_path).start()) for slot in slots}

    def url(self, slot: str) -> str:
        return self.paths[slot].proxy.url

    def urls(self) -> dict[str, str]:
        return {slot: path.proxy.url for slot, path in self.paths.items()}

    def blackhole(self, slot: str, for_s: float) -> None:
        path = self.paths[slot]
        path.proxy.blackhole()
        path.heal_at = time.monotonic() + for_s

    def forget(self, slot: str) -> int:
        """Forgets the slot's open connections; returns how many there were."""
        proxy = self.paths[slot].proxy
        open_links, _ = proxy.links()
        proxy.forget()
        return open_links

    def blackholed(self) -> list[str]:
        return [slot for slot, path in sorted(self.paths.items()) if path.heal_at is not None]

    def tend(self) -> list[str]:
        """Heals the blackholes whose time is up; returns their slots."""
        now = time.monotonic()
        healed = []
        for slot, path in sorted(self.paths.items()):
            if path.heal_at is not None and now >= path.heal_at:
                path.proxy.heal()
                path.heal_at = None
                healed.append(slot)
        return healed

    def heal_all(self) -> list[str]:
        healed = self.blackholed()
        for slot in healed:
            self.paths[slot].proxy.heal()
            self.paths[slot].heal_at = None
        return healed

    def close(self) -> None:
        for path in self.paths.values():
            path.proxy.close()
