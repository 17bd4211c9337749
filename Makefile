# Everything runs from a project-local virtual environment, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test browser lint typecheck pytest oldest demo simulate bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,embedded,dashboard]'
	touch $(STAMP)

test: browser lint typecheck pytest oldest

# The dashboard's browser tests drive Debian's chromium through chromium-driver: installed with
# apt when missing (as root, or through sudo), never downloaded by the tests themselves.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif command -v apt-get >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -q chromium chromium-driver; \
	else echo "no apt-get: the browser tests will be skipped (install chromium and chromedriver)"; fi

lint: $(STAMP)
	$(BIN)/ruff check actors tests simulations
	$(BIN)/ruff format --check actors tests simulations

typecheck: $(STAMP)
	$(BIN)/mypy --strict

pytest: $(STAMP)
	$(BIN)/pytest -q

# The client layer again on the oldest redis-py pyproject.toml admits (5.3): redis-py 8 renamed
# what the held async connections call (can_read_destructive -> can_read), and the main
# environment, which gets the newest, would never see such a break. There a Redis Cluster is
# refused (tests/test_cluster_redis_py.py), so the cluster tests run again on the oldest redis-py
# that runs one (actors/storage/topology.py, CLUSTER_MIN_REDIS_PY), in an environment of their own.
OLDEST_VENV ?= .venv-oldest
OLDEST_REDIS_PY := 5.3.1
OLDEST_TESTS := tests/test_held_connections.py tests/test_async_held_connections.py \
	tests/test_async_queue.py tests/test_async_topologies.py tests/test_store.py \
	tests/test_add_stream.py tests/test_async_add_stream.py tests/test_if_exists.py \
	tests/test_lazy_connect.py tests/test_cluster_redis_py.py \
	tests/test_topology.py tests/test_lost_replies.py
OLDEST_CLUSTER_VENV ?= .venv-oldest-cluster
OLDEST_CLUSTER_REDIS_PY := 7.2.1
OLDEST_CLUSTER_TESTS := tests/test_cluster.py tests/test_async_topologies.py \
	tests/test_cluster_redis_py.py

# $(call venv_on_redis_py,VENV,VERSION): the project, with its test extras, on that redis-py.
define venv_on_redis_py
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -e '.[test,embedded]' 'redis[hiredis]==$(2)'
	$(1)/bin/python -c 'import redis; assert redis.__version__ == "$(2)", redis.__version__'
	touch $(1)/.installed-stamp
endef

$(OLDEST_VENV)/.installed-stamp: pyproject.toml
	$(call venv_on_redis_py,$(OLDEST_VENV),$(OLDEST_REDIS_PY))

$(OLDEST_CLUSTER_VENV)/.installed-stamp: pyproject.toml
	$(call venv_on_redis_py,$(OLDEST_CLUSTER_VENV),$(OLDEST_CLUSTER_REDIS_PY))

oldest: $(OLDEST_VENV)/.installed-stamp $(OLDEST_CLUSTER_VENV)/.installed-stamp
	$(OLDEST_VENV)/bin/pytest -q -p no:cacheprovider $(OLDEST_TESTS)
	$(OLDEST_CLUSTER_VENV)/bin/pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
		$(OLDEST_CLUSTER_TESTS)

# The order-timeout demo on the embedded default: needs no redis-server on PATH (the `embedded`
# extra installed by $(STAMP) ships one).
demo: $(STAMP)
	$(BIN)/redelay demo

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(OLDEST_CLUSTER_VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis build dist

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

# Full sizes (111 and 114 minutes on 2 cores in two runs on 2026-11-24; of it about 6 for the 10M-pending and worker-process
# sections, skipped with --no-pending-scale / --no-worker-scale; the producers section, about 1
# more, with --no-producers): rewrites docs/benchmarks.md, .json and the PNGs. Refuses (exit 3)
# on a host over 1.5 times slower than the page's by its speed reference, and after its first
# scenario when that cost over 1.5 times the page's CPU per job: BENCH_ARGS=--slow-host.
bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m simulations.bench --full $(BENCH_ARGS)

# Small sizes (a couple of minutes): writes to simulations/out/bench-quick/.
bench-quick: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m simulations.bench --quick

# Crash simulations (docs/simulations.md): the deterministic simulator on a fake clock, then
# process chaos with real workers. CI-sized, a minute or so each; `make test` runs both at CI size
# through tests/test_simulations.py (chaos for 30 s there). SEED picks the run (a failure prints its seed).
SEED ?= 1
.PHONY: soak

simulate: $(STAMP)
	$(BIN)/python -m simulations.deterministic --seed $(SEED) --ci
	$(BIN)/python -m simulations.chaos --seed $(SEED) --duration 40

# The long mode: 48 simulated hours, then ten minutes of process chaos.
soak: $(STAMP)
	$(BIN)/python -m simulations.deterministic --seed $(SEED) --soak
	$(BIN)/python -m simulations.chaos --seed $(SEED) --duration 600
