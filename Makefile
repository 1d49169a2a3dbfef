# engram: every target creates and uses a virtual environment in .venv/
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch threads of `make demo` (THREADS=2 ...); empty: the run's default, one thread (docs/notes/threads.md)
THREADS ?=

.PHONY: install demo test test-slow lint bench docs docs-serve clean

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

# The docs site: the docs extra (MkDocs, Material, mkdocstrings) on top of the install; --strict fails on a
# broken link, a missing page or a generated table that cannot be built.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/python -m mkdocs build --strict

docs-serve: $(DOCS_STAMP)
	$(BIN)/python -m mkdocs serve

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache *.egg-info
