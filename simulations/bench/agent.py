"""One system's producer or worker, in its own process: ``python -m simulations.bench.agent SPEC``.

A producer adds the scenario's jobs and writes a ProduceResult to ``out_path``, then exits.
A worker calls ``recorder.ready()`` when it is about to consume and runs until the runner stops it;
its recorder writes the deliveries to ``out_path`` once every expected job arrived (or on request).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from .jobs import DueTimes
from .recorder import Recorder, write_json_atomic
from .spec import AgentSpec
from .systems import BY_NAME


def main(argv: list[str]) -> int:
    spec = AgentSpec.read(Path(argv[0]))
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    module = BY_NAME[spec.system].load()
    if spec.role == "producer":
        due = DueTimes(spec.scenario, spec.burst_due_ms, spec.seed)
        result = module.produce(spec, due)
        result.batch_api = module.BATCH_API
        write_json_atomic(Path(spec.out_path), result.to_json())
        return 0
    recorder = Recorder(spec.expected, Path(spec.out_path), Path(spec.ready_path))
    module.work(spec, recorder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
