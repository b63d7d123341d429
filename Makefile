# `make test` works on a fresh clone: it builds .venv, installs the project with its
# dev extras and runs the suite against a PostgreSQL server the tests start themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-slow lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check pgworkerd tests bench
	$(BIN)/pytest -m "not slow"

test-slow: $(STAMP)
	$(BIN)/pytest -m slow

lint: $(STAMP)
	$(BIN)/ruff check pgworkerd tests bench

bench: $(STAMP)
	$(BIN)/python -m bench.store

clean:
	rm -rf $(VENV) .pytest_cache
