"""The layers import only downwards: envs → policies → agents → experiments → lm → train_rl.py
(docs/design.md, "Layers"); inside experiments/, the run core imports neither the studies nor the CLI. Every
import of every module is read from its source, those inside functions included, so a hidden upward import fails
here."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ["envs", "policies", "agents", "experiments", "lm"]
"""the packages, lowest first; train_rl.py, benchmarks/ and notebooks/ sit above them all"""
ABOVE_ALL = ["train_rl", "benchmarks", "notebooks", "tests"]


def imported_modules(path: Path) -> set[str]:
    """The modules a module imports, and each name it imports from one (absolute imports; relative ones stay in
    the package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # ``from pkg import module``
    return names


def imported_packages(path: Path) -> set[str]:
    """The top-level names a module imports."""
    return {name.partition(".")[0] for name in imported_modules(path)}


@pytest.mark.parametrize("package", LAYERS)
def test_packages_import_only_lower_layers(package):
    forbidden = set(LAYERS[LAYERS.index(package) + 1:]) | set(ABOVE_ALL)
    files = sorted((REPO / package).rglob("*.py"))
    assert files
    upward = {f"{path.relative_to(REPO)} imports {name}" for path in files
              for name in imported_packages(path) & forbidden}
    assert not upward, sorted(upward)


def test_the_run_core_imports_neither_the_studies_nor_the_cli():
    """experiments/ is split by job: the run core (its top-level modules) sits below experiments.studies and
    experiments.cli (mutation caught: run_dir importing the study's run records)."""
    files = sorted((REPO / "experiments").glob("*.py"))
    upward = {f"{path.relative_to(REPO)} imports {name}" for path in files for name in imported_modules(path)
              if name.startswith(("experiments.studies", "experiments.cli"))}
    assert not upward, sorted(upward)


def test_config_parsing_writes_through_no_run_directory():
    """Reading a configuration writes nothing: experiments/config.py imports neither the run directory nor the
    atomic file helpers (a run's ``config.yaml`` is written by :class:`experiments.run_dir.RunDirectory`)."""
    imported = imported_modules(REPO / "experiments" / "config.py")
    assert not imported & {"experiments.run_dir", "envs.atomic"}, sorted(imported)


def test_the_report_loads_neither_torch_nor_the_learners():
    code = ("import sys, experiments.studies.report\n"
            "print(sorted({'torch', 'stable_baselines3', 'agents'} & set(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
