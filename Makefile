# Two entry points for a fresh machine: `make demo` and `make test`. Both set everything up.
PYTHON ?= python3
VENV   ?= .venv
LOGDIR ?= runs
HOST   ?= 127.0.0.1
PORT   ?= 6006
# The torch build that setup installs, pinned in constraints/<build>.txt: cpu, cuda, or auto
# (cuda on a machine with a CUDA device; otherwise cpu when pip can find the CPU build, as it
# can from a local wheel or PyTorch's CPU index, else cuda: pip's default build).
TORCH  ?= auto

PY  := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: setup demo demo-runs serve test lint typecheck pytest bench clean frontend frontend-deps frontend-check browser-deps sanitize

# The stamp is rebuilt when the package's requirements or the pinned torch change. A plain
# torch==2.13.0 would get the CUDA build even without a GPU (a 5.6 GB venv instead of 1.8 GB):
# its version sorts above the CPU build's.
$(VENV)/.installed: setup.py pyproject.toml $(wildcard constraints/*.txt)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip setuptools wheel
	@build=$(TORCH); \
	if [ "$$build" = auto ]; then \
		if command -v nvidia-smi >/dev/null 2>&1 && [ -e /dev/nvidia0 ]; then build=cuda; \
		elif $(BIN)/pip install --dry-run --quiet --no-deps -r constraints/cpu.txt >/dev/null 2>&1; then build=cpu; \
		else build=cuda; echo "no CPU build of torch found: installing pip's default build (README: Quick start)"; fi; \
	fi; \
	test -f constraints/$$build.txt || { echo "TORCH=$$build: no constraints/$$build.txt (cpu, cuda or auto)"; exit 2; }; \
	echo "$(BIN)/pip install -c constraints/$$build.txt -e '.[test]'"; \
	$(BIN)/pip install --quiet -c constraints/$$build.txt -e '.[test]'
	touch $@

setup: $(VENV)/.installed

## demo: set up, profile the built-in demo sweep into $(LOGDIR)/, and serve it with TensorBoard.
demo: demo-runs serve

# The demo sweep, then two ranks under torchrun with the attention heads split over them and
# rank 1 slowed on purpose (relative to its own block time, so a busy machine flags it too): the Ranks view.
demo-runs: setup
	$(PY) -m runner --demo --logdir $(LOGDIR)
	OMP_NUM_THREADS=1 $(PY) -m torch.distributed.run --standalone --nproc_per_node 2 -m runner --logdir $(LOGDIR) \
		--name multirank --parallel tp --impl naive --size small --seq 256 --slow-rank 1 --slow-factor 2 --overwrite \
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

## sanitize: the compiled scanner built with AddressSanitizer and UBSan into build/sanitize/ (the build in
## the source tree is left alone), and its differential and fuzz tests run with it (devtools/sanitize.py).
SANITIZE_CC ?= gcc
sanitize: setup
	CC=$(SANITIZE_CC) $(PY) -m devtools.sanitize build
	LD_PRELOAD="$$($(SANITIZE_CC) -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONMALLOC=malloc $(PY) -m devtools.sanitize test -q

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
