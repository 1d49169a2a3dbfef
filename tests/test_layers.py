"""The layers import only downwards: envs → policies → agents → experiments → train_rl.py
(docs/design.md, "Layers"). Every import of every module is read from its source, those inside
functions included, so a hidden upward import fails here."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ["envs", "policies", "agents", "experiments"]
"""the packages, lowest first; train_rl.py and benchmarks/ sit above them all"""
ABOVE_ALL = ["train_rl", "benchmarks", "tests"]


def imported_packages(path: Path) -> set[str]:
    """The top-level names a module imports (absolute imports; relative ones stay in the package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


@pytest.mark.parametrize("package", LAYERS)
def test_packages_import_only_lower_layers(package):
    forbidden = set(LAYERS[LAYERS.index(package) + 1:]) | set(ABOVE_ALL)
    files = sorted((REPO / package).rglob("*.py"))
    assert files
    upward = {f"{path.relative_to(REPO)} imports {name}" for path in files
              for name in imported_packages(path) & forbidden}
    assert not upward, sorted(upward)


def test_the_report_loads_neither_torch_nor_the_learners():
    code = "import sys, experiments.report; print(sorted({'torch', 'stable_baselines3', 'agents'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
