# engram: every target creates and uses a virtual environment in .venv/
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch threads of `make demo` (THREADS=2 ...); empty: the run's default, one thread (docs/notes/threads.md)
THREADS ?=

.PHONY: install demo test test-slow lint bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# The CPU wheel of torch first: a plain `pip install torch` pulls a multi-GB CUDA build.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/python train_rl.py --config configs/demo.yaml --log-dir runs/demo --progress $(if $(THREADS),--threads $(THREADS))

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/env_throughput.py
	$(BIN)/python benchmarks/step_cost.py
	$(BIN)/python benchmarks/train_throughput.py

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache *.egg-info
