# engram: every target creates and uses a virtual environment in .venv/
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch threads of `make demo` (THREADS=2 ...); empty: the run's default, one thread (docs/notes/threads.md)
THREADS ?=
# Where torch comes from (docs/installation.md). Empty: pip's configured indexes, so the build is whatever they
# hold; from PyPI alone on Linux x86_64 that is the CUDA build with its multi-GB nvidia-* packages (CI's machine
# has a CPU wheel on disk, so CI gets that). PyTorch's own index picks the build:
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cpu     the CPU build (about 190 MB)
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cu128   a CUDA 12.8 build (or another cuXYZ)
TORCH_INDEX ?=
# Test worker processes of `make test` (pytest-xdist; one torch thread each). 0: the tests run in pytest's own process.
WORKERS ?= 2

.PHONY: install demo test test-slow lint bench docs docs-serve clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# torch first, from TORCH_INDEX if given (see above); engram's own install then keeps it.
	$(BIN)/pip install torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	# The ray extra too: the tests start a two-node Ray cluster (tests/test_retries.py).
	$(BIN)/pip install -e ".[dev,ray]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/python train_rl.py --config configs/demo.yaml --log-dir runs/demo --progress $(if $(THREADS),--threads $(THREADS))

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/env_throughput.py
	$(BIN)/python benchmarks/speed.py

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
	rm -rf $(VENV) runs site build dist .pytest_cache .ruff_cache *.egg-info
