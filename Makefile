# Two commands do all set-up on a fresh Debian/Ubuntu machine with Python 3.11+:
#   make demo   - venv + install (compiled), start the local MariaDB + Redis, run the mirror with demo writes
#   make test   - venv + install (compiled), then ruff, mypy and the whole pytest suite (real servers)
# bash: test-latest diffs with <(...)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installs are what was tested: every pip run here (and in the build environments pip makes for
# the project's build requirements) takes the exact versions of constraints.txt.
LOCK := $(CURDIR)/constraints.txt
LATEST := .venv-latest
APT_PACKAGES := mariadb-server mariadb-client redis-server python3-venv default-jre-headless
# Only the tests need these: the dashboard's browser test (chromium), the image test (buildah,
# mmdebstrap) and the alert-rule tests (promtool, in prometheus).
TEST_APT_PACKAGES := chromium buildah mmdebstrap prometheus

.PHONY: demo test check test-latest lock lint typecheck pytest bench bench-stream bench-e2e bench-fanout bench-memory bench-table-ops bench-redis-floor fast pure wheel system-packages test-packages clean

$(BIN)/binlog-mirror: pyproject.toml constraints.txt
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || $(MAKE) system-packages
	$(PYTHON) -m venv $(VENV)
	PIP_CONSTRAINT=$(LOCK) $(BIN)/pip install --quiet --upgrade pip setuptools wheel
	PIP_CONSTRAINT=$(LOCK) $(BIN)/pip install --quiet -e '.[dev,spark]'
	@touch $@

# The compiled build (mypyc), in place: the venv's install is editable (pure), so the *.so files
# sit next to their .py in the working tree and are rebuilt whenever one of those sources changes.
# Without a C compiler it warns once and the pure-Python build runs (`binlog-mirror --version`).
COMPILED := $(VENV)/.compiled
$(COMPILED): $(BIN)/binlog-mirror $(shell $(PYTHON) service/devtools/build_decoder.py --list)
	$(BIN)/python -m service.devtools.build_decoder --if-possible
	@touch $@

system-packages:
	@missing=""; for b in mariadbd redis-server mariadb-binlog java; do \
	  command -v $$b >/dev/null || [ -x /usr/sbin/$$b ] || missing=1; done; \
	$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || missing=1; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	  else echo "run: sudo apt-get install -y $(APT_PACKAGES)"; exit 1; fi; fi

test-packages: system-packages
	@missing=""; for b in chromium buildah mmdebstrap promtool; do \
	  command -v $$b >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(TEST_APT_PACKAGES); \
	  else echo "run: sudo apt-get install -y $(TEST_APT_PACKAGES) (or the tests that need them skip)"; fi; fi

demo: system-packages $(COMPILED)
	$(BIN)/binlog-mirror demo

lint: $(BIN)/binlog-mirror
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(BIN)/binlog-mirror
	$(BIN)/mypy

# The whole suite on two xdist workers (measured on 2 cores: mostly waiting on servers, it takes
# about half the time of one process). Each worker has its own servers (the session fixtures: a
# stack, a redis-server, a Redis Cluster, a Spark session, in temp dirs and on free ports) and runs
# a file at a time, so a module's fixtures and its tests' order stay as in one process; the files
# of the minutes-long tests are handed out first (tests/conftest.py). `make test WORKERS=0` runs
# the suite in one process.
WORKERS ?= 2
SUITE := $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadfile --no-loadscope-reorder)
pytest: test-packages $(COMPILED)
	$(BIN)/pytest $(SUITE)

test: lint typecheck pytest

# The fast loop: lint, types and every test that needs no MariaDB, JVM, browser, build or image
# (the `redis` tests share one redis-server and one Redis Cluster per worker), on every core, with
# the line coverage of the sink and the pipeline: at least 75 %. Under coverage the tests import the
# .py sources, never a compiled .so (tests/conftest.py). Under two minutes on 2 cores; `make test`
# runs everything.
CHECK_TESTS := not integration and not spark and not browser and not image and not build
check: lint typecheck
	$(BIN)/pytest -n auto -m "$(CHECK_TESTS)" --cov=service/sink --cov=service/pipeline \
	  --cov-report=term:skip-covered --cov-fail-under=75

# The newest versions pyproject.toml's ranges allow, in a venv of their own, through the same
# checks and the whole suite: an upstream release reaches the project's tests before its users.
# When it passes, `make lock` makes those versions the tested set (constraints.txt).
test-latest: test-packages
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install --quiet --upgrade pip setuptools wheel
	$(LATEST)/bin/pip install --quiet --upgrade -e '.[dev,spark]'
	@$(LATEST)/bin/pip freeze --all --exclude-editable | sort -f | diff <(sed '/^#/d' constraints.txt) - \
	  && echo "the newest allowed versions are the locked ones" || true
	$(LATEST)/bin/ruff check .
	$(LATEST)/bin/mypy
	BINLOG_MIRROR_UNLOCKED=1 $(LATEST)/bin/pytest $(SUITE)

lock:
	@test -x $(LATEST)/bin/pip || { echo "run make test-latest first: the lock is what its suite passed on"; exit 1; }
	{ sed -n '/^#/p' constraints.txt; $(LATEST)/bin/pip freeze --all --exclude-editable | sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	-$(BIN)/binlog-mirror stack down 2>/dev/null
	-$(PYTHON) service/devtools/build_decoder.py --clean
	rm -rf $(VENV) $(LATEST) .stack .mypy_cache .ruff_cache .pytest_cache .coverage build dist

bench: system-packages $(COMPILED)
	$(BIN)/python -m benchmarks.decode

# `make fast` rebuilds the compiled modules now (an error, not a fallback, without a compiler);
# `make pure` removes them, until a source changes or `make fast`. The pure-Python source stays
# the reference and the fallback.
fast: $(BIN)/binlog-mirror
	$(BIN)/python -m service.devtools.build_decoder
	@touch $(COMPILED)

pure: $(BIN)/binlog-mirror
	$(BIN)/python -m service.devtools.build_decoder --clean
	@touch $(COMPILED)

# The wheel users install without a compiler: the compiled build for this platform (setup.py).
wheel: $(BIN)/binlog-mirror
	$(BIN)/pip wheel --no-deps -w dist .

bench-stream bench-e2e bench-fanout bench-memory: system-packages $(COMPILED)
	$(BIN)/python -m benchmarks.$(@:bench-%=%)

bench-table-ops: system-packages $(COMPILED)
	$(BIN)/python -m benchmarks.table_ops

bench-redis-floor: system-packages $(COMPILED)
	$(BIN)/python -m benchmarks.redis_floor
