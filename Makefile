# Two entry points for a fresh machine: `make demo` and `make test`. Both set everything up.
PYTHON ?= python3
VENV   ?= .venv
LOGDIR ?= runs
HOST   ?= 127.0.0.1
PORT   ?= 6006

PY  := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: setup demo demo-runs serve test lint typecheck pytest bench clean frontend frontend-deps frontend-check browser-deps

# The stamp is rebuilt when the package's requirements change.
$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip setuptools wheel
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

## demo: set up, profile the built-in demo sweep into $(LOGDIR)/, and serve it with TensorBoard.
demo: demo-runs serve

# The demo sweep, then two ranks under torchrun with the attention heads split over them and
# rank 1 slowed on purpose: the Ranks view.
demo-runs: setup
	$(PY) -m runner --demo --logdir $(LOGDIR)
	OMP_NUM_THREADS=1 $(PY) -m torch.distributed.run --standalone --nproc_per_node 2 -m runner --logdir $(LOGDIR) \
		--name multirank --parallel tp --impl naive --size small --seq 256 --slow-rank 1 --slow-ms 5 --overwrite \
		--no-progress

serve: setup
	@echo
	@echo "TensorBoard is starting: open http://$(HOST):$(PORT)/#tb_attn for the Attention tab (Ctrl-C to stop)"
	$(BIN)/tensorboard --logdir $(LOGDIR) --host $(HOST) --port $(PORT)

## test: set up (with test tools, Node packages and Debian's chromium), then ruff, mypy, tsc and pytest.
test: lint typecheck frontend-check browser-deps pytest

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy

pytest: setup frontend-deps browser-deps
	$(PY) -m pytest

# The tab's UI: TypeScript in frontend/, built into tb_attn_plugin/static/ (shipped, so that
# pip install needs no Node.js). A test checks that the shipped build matches a fresh one.
frontend/node_modules/.package-lock.json: frontend/package.json frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error

frontend-deps: frontend/node_modules/.package-lock.json

frontend: frontend-deps
	cd frontend && npm run build

frontend-check: frontend-deps
	cd frontend && npm run check

# Browser tests drive Debian's chromium through Python playwright; no browser is downloaded.
browser-deps:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

bench: setup
	$(PY) bench/runner_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
