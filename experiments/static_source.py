"""Values read from a module's source without importing it.

The command line shows the defaults and documentation of :class:`experiments.config.RunConfig` and of
a few constants, but importing their modules loads torch, SB3 or rliable (seconds); ``--help`` reads
them from the source instead, so it answers at once and stays in step with the code it describes.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FACTORIES = {"dict": dict, "list": list}
"""``field(default_factory=...)`` callables whose value is known without running the module"""


@dataclass(frozen=True)
class FieldInfo:
    """One dataclass field as written in the source: its default and its attribute docstring."""

    name: str
    default: Any
    doc: str


@cache
def _module_tree(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no source for module {module!r}")
    return ast.parse(Path(spec.origin).read_text(), filename=spec.origin)


def _value(node: ast.expr | None) -> Any:
    """A literal, or the default of a field-making call (``field(...)``, ``_rule(...)``): its literal
    ``default=``, or ``default_factory=dict|list`` as its empty value."""
    if node is None:
        return None
    if isinstance(node, ast.Call):
        keywords = {k.arg: k.value for k in node.keywords}
        if "default" in keywords:
            return ast.literal_eval(keywords["default"])
        factory = keywords.get("default_factory")
        if isinstance(factory, ast.Name) and factory.id in FACTORIES:
            return FACTORIES[factory.id]()
    return ast.literal_eval(node)


def literal_constant(module: str, name: str) -> Any:
    """The literal value of the module-level assignment ``name = ...`` in ``module``'s source."""
    for node in _module_tree(module).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return _value(node.value)  # type: ignore[union-attr]
    raise LookupError(f"{module} assigns no {name}")


def dataclass_fields(module: str, name: str) -> dict[str, FieldInfo]:
    """The fields of the dataclass ``name`` in ``module``: defaults and the docstrings written after them."""
    cls = next((node for node in _module_tree(module).body if isinstance(node, ast.ClassDef) and node.name == name),
               None)
    if cls is None:
        raise LookupError(f"{module} defines no class {name}")
    fields = {}
    for node, after in zip(cls.body, [*cls.body[1:], None], strict=True):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        doc = after.value.value if documented else ""  # type: ignore[union-attr]
        fields[node.target.id] = FieldInfo(node.target.id, _value(node.value), doc)
    return fields
