# `make test` works on a fresh clone: it builds .venv, installs the project with its
# dev extras (and, where it can, the system libraries some tests use) and runs the lint,
# the type check and every test tier against a PostgreSQL server the tests start.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := pgworkerd tests bench examples
# Extra pytest options, e.g. `make test PYTEST_ARGS=-x`.
PYTEST_ARGS ?= --durations=15

# Django 6 needs Python >= 3.12 (the package itself keeps 3.11): its tier runs in a venv
# of its own, from the Python 3.12 scripts/find-python312 finds; with none, `make test` fails.
DJANGO_VENV := .venv-django
DJANGO_STAMP := $(DJANGO_VENV)/.installed
PYTHON312 ?= $(shell bash scripts/find-python312)

.PHONY: test checks test-django test-fast test-slow test-deps lint typecheck format bench demo stop-db clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(DJANGO_STAMP): pyproject.toml | $(STAMP)
	@test -n "$(PYTHON312)" || { echo "make: the Django tier needs Python 3.12 (python3.12 on PATH, or ~/.pyenv/versions/3.12*/bin/python3.12); none found" >&2; exit 1; }
	$(PYTHON312) -m venv $(DJANGO_VENV)
	$(DJANGO_VENV)/bin/pip install --quiet --upgrade pip
	$(DJANGO_VENV)/bin/pip install --quiet -e '.[django]' 'pytest>=8' 'pytest-timeout>=2.3'
	touch $(DJANGO_STAMP)

# Best effort, never fails itself: libfaketime, chromium, systemd-analyze and unshare,
# with apt-get as root. A test whose tool is still missing fails (tests/tools.py).
test-deps:
	@bash scripts/install-test-deps

# Everything: lint, format, types, then all tiers (unit, integration, process), slow
# scenarios included; then the Django tier (tests/django) in its Python 3.12 venv.
# Once .venv is built, the lint and the type check (mypy's first run on a fresh clone:
# ~25 s), the Django venv and the system packages do not depend on each other: a
# sub-make runs them side by side, each one's output printed whole when it ends. (The
# two venvs are never built at once, even when pyproject.toml looks newer than .venv's
# stamp: the Django venv's rule waits for .venv's, since each editable install writes
# pgworkerd.egg-info in this directory.) Then the tests: all but the slow scenarios on
# two pytest-xdist workers, each with a PostgreSQL of its own (most tests wait on a
# process or a timeout: one at a time, the suite kept 2 cores a quarter busy); then the
# slow scenarios one at a time, nothing beside them, since they judge work under a held
# snapshot, kill storms and restarts against deadlines; then the Django tier.
XDIST := -n 2 --dist loadfile
test: $(STAMP)
	$(MAKE) --no-print-directory -j3 --output-sync=target checks $(DJANGO_STAMP) test-deps
	$(BIN)/pytest --ignore=tests/django -m "not slow" $(XDIST) $(PYTEST_ARGS)
	$(BIN)/pytest --ignore=tests/django -m slow $(PYTEST_ARGS)
	$(DJANGO_VENV)/bin/pytest tests/django $(PYTEST_ARGS)

# Only the Django tier.
test-django: $(DJANGO_STAMP)
	$(DJANGO_VENV)/bin/pytest tests/django $(PYTEST_ARGS)

# For development: every tier but the long scenarios marked slow.
test-fast: $(STAMP) test-deps
	$(BIN)/pytest --ignore=tests/django -m "not slow" $(XDIST) $(PYTEST_ARGS)

# Only the long fault and kill-storm scenarios.
test-slow: $(STAMP) test-deps
	$(BIN)/pytest --ignore=tests/django -m slow $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

# mypy --strict over the files [tool.mypy] names in pyproject.toml: the package and
# tests/unit. tests/integration and tests/process are not type-checked (their fixtures
# and helpers are untyped pytest plumbing).
typecheck: $(STAMP)
	$(BIN)/mypy

# What `make test` runs before the tests.
checks: lint typecheck

format: $(STAMP)
	$(BIN)/ruff check --select I --fix $(SOURCES)
	$(BIN)/ruff format $(SOURCES)

# The quick start: embedded PostgreSQL under .pgworkerd/ (kept, reused), schema, a job of
# each fate, and the daemon in the foreground. Ctrl-C drains and stops it.
demo: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/pgworkerd migrate -c config/pgworkerd.yaml
	PYTHONPATH=$(CURDIR) $(BIN)/python -m examples.enqueue_demo config/pgworkerd.yaml
	PYTHONPATH=$(CURDIR) $(BIN)/pgworkerd run -c config/pgworkerd.yaml

# Stops the embedded cluster that `make demo` left running.
stop-db: $(STAMP)
	$(BIN)/python -c "from pgworkerd.storage.embedded import local_cluster; local_cluster().stop()"

# pgworkerd beside its peers on a throwaway durable cluster (~3 min; `--peers all`,
# `--reps 3`, `--scale` via BENCH_ARGS). Prints the table, writes bench/results/.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(DJANGO_VENV) .pytest_cache .mypy_cache
