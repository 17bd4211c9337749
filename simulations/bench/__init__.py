"""Benchmarks: redelay side by side with the job queues people would pick instead.

``python -m simulations.bench --quick`` (or ``make bench-quick``) runs every scenario at small
sizes; ``--full`` (``make bench``) runs the sizes of issue 6 and writes docs/benchmarks.md,
docs/benchmarks.json and docs/benchmarks-lateness.png.

Layout: ``scenarios`` (what is run), ``jobs`` (the job bodies and the pacing of producers),
``recorder`` (what a worker writes down per delivery), ``agent`` (the process that runs one
system's producer or worker), ``systems/`` (one adapter per system), ``server`` (a private pinned
redis-server and its stats), ``runner`` (drives one scenario and builds its record),
``redis_limit`` (redis-benchmark and script costs), ``profiling`` (py-spy on redelay's worker),
``report`` and ``chart`` (the docs page, the JSON and the PNG).
"""
