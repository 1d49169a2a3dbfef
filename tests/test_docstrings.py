"""Docstrings say what the code does in a few lines: in the packages, no function's docstring runs longer than
its code (the history and measurements behind a choice belong in the CHANGELOG and the docs)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["envs", "policies", "agents", "experiments", "lm"]


def longer_docstrings(path: Path) -> list[str]:
    """`name:line (docstring lines > code lines)` for each function of `path` whose docstring outruns its code."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or ast.get_docstring(node) is None:
            continue
        docstring, *code = node.body
        if not code:
            continue
        doc_lines = docstring.end_lineno - docstring.lineno + 1
        code_lines = code[-1].end_lineno - code[0].lineno + 1
        if doc_lines > code_lines:
            found.append(f"{node.name}:{node.lineno} ({doc_lines} > {code_lines})")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_docstring_runs_longer_than_its_code(package):
    found = {str(path.relative_to(REPO)): longer for path in sorted((REPO / package).rglob("*.py"))
             if (longer := longer_docstrings(path))}
    assert not found, found


def test_the_check_sees_a_docstring_longer_than_its_code(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('def f():\n    """One.\n\n    Two.\n    """\n    return 1\n\n\n'
                      'def g():\n    """One."""\n    return 1\n')
    assert longer_docstrings(module) == ["f:1 (4 > 1)"]
