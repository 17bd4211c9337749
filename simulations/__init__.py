"""What runs redelay to test and measure it, outside the test suite.

- ``crash/``: the crash simulators (deterministic on a fake clock, and process chaos), shipped in
  the wheel as ``actors.simulate`` (``redelay simulate``); docs/simulations.md.
- ``examples/``: an application's handlers written to be simulated (docs/simulations.md).
- ``bench/``: the benchmark against the peers (``make bench``, docs/benchmarks.md) and the
  hand-run measurements, ``python -m simulations.bench probe NAME``.
"""
