"""What the runner tells an agent process (a JSON file, so Node.js agents read the same thing)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .scenarios import Scenario

Role = Literal["producer", "worker"]

QUEUE_NAME = "bench"  # the queue / topic / task name every system uses
# A system named "<peer>-tuned" is that peer configured for throughput the way its own docs advise.
TUNED_SUFFIX = "-tuned"


@dataclass(frozen=True, slots=True)
class AgentSpec:
    system: str
    role: Role
    socket_path: str  # the private redis-server's Unix socket
    scenario: Scenario
    out_path: str  # the agent's result (JSON)
    ready_path: str  # a worker writes this once it is about to consume
    expected: int  # deliveries a worker waits for
    burst_due_ms: int  # the one due time of the burst scenario (0 otherwise)
    seed: int

    @property
    def tuned(self) -> bool:
        return self.system.endswith(TUNED_SUFFIX)

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "role": self.role,
            "socket_path": self.socket_path,
            "scenario": self.scenario.to_json(),
            "out_path": self.out_path,
            "ready_path": self.ready_path,
            "expected": self.expected,
            "burst_due_ms": self.burst_due_ms,
            "seed": self.seed,
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1))

    @staticmethod
    def read(path: Path) -> AgentSpec:
        data = json.loads(path.read_text())
        data["scenario"] = Scenario.from_json(data["scenario"])
        return AgentSpec(**data)
