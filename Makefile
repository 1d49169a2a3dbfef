# engram: every target creates and uses a virtual environment in .venv/
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow lint bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# The CPU wheel of torch first: a plain `pip install torch` pulls a multi-GB CUDA build.
	$(BIN)/pip install torch==2.13.0
	# The ray extra too: the tests start a two-node Ray cluster (tests/test_retries.py).
	$(BIN)/pip install -e ".[dev,ray]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/python train_rl.py --config configs/demo.yaml --log-dir runs/demo --progress

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
