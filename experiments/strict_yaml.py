"""YAML as engram reads it: PyYAML's safe loader, made strict.

PyYAML keeps the last of two equal keys of a mapping silently (`n_envs: 4` then `n_envs: 8` gives 8; a second
`ppo:` section replaces the first); `load` refuses the document instead, naming the key and both lines. It
also refuses a document whose aliases would expand to more than `MAX_VALUES` values (an "alias bomb": a
700-byte file of nested anchors is billions of values once written out), or an alias inside its own anchor,
before anything reads it. Merge keys (`<<: *defaults`) keep their meaning: what they bring in may be overridden.

Every YAML file engram reads goes through `load`: run configurations, study files, search spaces, language
model configurations, a run's own `config.yaml`, and values given on the command line.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from experiments.rules import beyond_float

MAX_VALUES = 100_000
"""the most values (scalars, lists and mappings, each alias counted as what it stands for) a document may hold"""
MERGE_TAG = "tag:yaml.org,2002:merge"
OCTAL_1_1 = re.compile(r"[-+]?0[0-7]+")
"""YAML 1.1's octal integers (`017`), which engram reads in base 10 as Python's `int` and YAML 1.2 do"""


class StrictYAMLError(yaml.MarkedYAMLError):
    """A document that PyYAML would read but engram refuses; `problem` says why, `problem_mark` where."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's `SafeLoader` whose documents are checked (`check_node`) before they are constructed."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        """An integer as Python and the command line read it: `017` is 17, not YAML 1.1's octal 15, and
        `12:30:00` is that text, not YAML 1.1's base-60 number 45000, so a setting refuses it as no number."""
        text = node.value.replace("_", "")
        if ":" in text:
            return node.value
        if OCTAL_1_1.fullmatch(text):
            return int(text)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> Any:
        """A float; the text as written where it is base 60 (`1:30.5`) or too large for one (`1.0e+999`), for a
        message to show."""
        if ":" in node.value or beyond_float(node.value):
            return node.value
        return super().construct_yaml_float(node)

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        check_node(self, node)
        return self.construct_document(node)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)


def load(text: str) -> Any:
    """The value of the YAML document `text`; `yaml.YAMLError` (a `StrictYAMLError` for a repeated
    key, an alias bomb, an alias in its own anchor, or collections nested deeper than Python's stack allows) when it
    is not one engram reads."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except RecursionError:
        raise StrictYAMLError(problem="its collections are nested deeper than can be read") from None


def described(error: yaml.YAMLError) -> str:
    """Where and why a document is not valid YAML: ` at line L, column C: problem`."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{where}: {getattr(error, 'problem', None) or ' '.join(str(error).split())}"


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _key(loader: StrictLoader, node: yaml.Node) -> Any:
    """A mapping key as Python compares it (`1` and `1.0` are one key), or `None` for a key that is not a
    scalar (a list or mapping as a key, which the constructor refuses by itself)."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    key = loader.construct_object(node)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def check_node(loader: StrictLoader, root: yaml.Node) -> None:
    """Refuse (`StrictYAMLError`) a document with a repeated mapping key, more than `MAX_VALUES`
    values once its aliases are expanded, or an alias inside its own anchor. Each node is visited once: an alias
    is counted by the size of what it stands for, so the check costs the size of the text, not of the expansion."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node, path: str) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise StrictYAMLError(problem=f"{path or 'the document'} is an alias of the anchor it sits in",
                                  problem_mark=node.start_mark)
        open_nodes.add(id(node))
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item, f"{path}[{index}]") for index, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, value_node in node.value:
                key = None if key_node.tag == MERGE_TAG else _key(loader, key_node)
                if key_node.tag != MERGE_TAG and not isinstance(key, str):
                    shown_key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a collection"
                    raise StrictYAMLError(problem=f"key {shown_key!r}{f' in {path}' if path else ''} is not a string "
                                                  "(settings, options and env ids are named by strings; quote it)",
                                          problem_mark=key_node.start_mark)
                if key is not None:
                    if key in seen:
                        name = f"{path}.{key}" if path else str(key)
                        raise StrictYAMLError(problem=f"key {name!r} repeats the one at line {_line(seen[key])} "
                                                      "(a key may appear once in a mapping)",
                                              problem_mark=key_node.start_mark)
                    seen[key] = key_node
                child = f"{path}.{key}" if path and key is not None else str(key) if key is not None else path
                total += size(key_node, path) + size(value_node, child)
        open_nodes.discard(id(node))
        if total > MAX_VALUES:
            raise StrictYAMLError(problem=f"its aliases expand to more than {MAX_VALUES:,} values (anchors repeated "
                                          "within one another); write the values out", problem_mark=node.start_mark)
        sizes[id(node)] = total
        return total

    size(root, "")
