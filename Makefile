# `make test` works on a fresh clone: it builds .venv, installs the project with its
# dev extras and runs the suite against a PostgreSQL server the tests start themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-slow lint bench demo stop-db clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check pgworkerd tests bench examples
	$(BIN)/pytest -m "not slow"

test-slow: $(STAMP)
	$(BIN)/pytest -m slow

lint: $(STAMP)
	$(BIN)/ruff check pgworkerd tests bench examples

# The quick start: embedded PostgreSQL under .pgworkerd/ (kept, reused), schema, a job of
# each fate, and the daemon in the foreground. Ctrl-C drains and stops it.
demo: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/pgworkerd migrate -c config/pgworkerd.yaml
	PYTHONPATH=$(CURDIR) $(BIN)/python -m examples.enqueue_demo config/pgworkerd.yaml
	PYTHONPATH=$(CURDIR) $(BIN)/pgworkerd run -c config/pgworkerd.yaml

# Stops the embedded cluster that `make demo` left running.
stop-db: $(STAMP)
	$(BIN)/python -c "from pgworkerd.embedded import local_cluster; local_cluster().stop()"

# pgworkerd beside its peers on a throwaway durable cluster (~3 min; `--peers all`,
# `--reps 3`, `--scale` via BENCH_ARGS). Prints the table, writes bench/results/.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
