# Two entry points for a fresh machine: `make demo` and `make test`. Both set everything up.
PYTHON ?= python3
VENV   ?= .venv
LOGDIR ?= runs
HOST   ?= 127.0.0.1
PORT   ?= 6006

PY  := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: setup demo demo-runs serve test lint typecheck pytest bench clean

# The stamp is rebuilt when the package's requirements change.
$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip setuptools wheel
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

## demo: set up, profile the built-in demo sweep into $(LOGDIR)/, and serve it with TensorBoard.
demo: demo-runs serve

demo-runs: setup
	$(PY) -m runner --demo --logdir $(LOGDIR)

serve: setup
	@echo
	@echo "TensorBoard is starting on http://$(HOST):$(PORT)/ (Ctrl-C to stop)"
	$(BIN)/tensorboard --logdir $(LOGDIR) --host $(HOST) --port $(PORT)

## test: set up (with test tools) and run ruff, mypy and the whole pytest suite.
test: lint typecheck pytest

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy

pytest: setup
	$(PY) -m pytest

bench: setup
	$(PY) bench/runner_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
