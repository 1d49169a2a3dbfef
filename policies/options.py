"""Options and their rules, declared once in the constructor that takes them.

A constructor annotates each option with the rule of its valid values (`envs.rules`) and is decorated
with `checked`::

    class LocalPattern(Pattern):
        @checked()
        def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                     local_window: CountOrNone = None) -> None:

When the constructor runs, `checked` binds its arguments, checks each against the rule in its annotation,
then the component's relations between its options (`Relation`), and only then runs its body; a bad value
raises `ConfigError` (a `ValueError`) with one line naming it: `local_window=0: expected
an integer >= 1 (or null for the default)`. The command line reads the same declarations (`option_rules`,
`relations`) and names each key with its section (`gtrxl.attention_options.local_window=0`).
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from envs.rules import ConfigError, Rule, Spelled, shown

F = TypeVar("F", bound=Callable[..., None])


class Options:
    """The options of one component as a `Relation` reads them: `options["d_model"]`, and each named
    with the prefix of its section (`options.name("d_head")` → `gtrxl.d_head` on the command line)."""

    def __init__(self, values: Mapping[str, Any], prefix: str = "") -> None:
        self.values, self.prefix = values, prefix

    def __getitem__(self, option: str) -> Any:
        return self.values[option]

    def name(self, option: str) -> str:
        return self.prefix + option

    def show(self, option: str) -> str:
        """`gtrxl.d_model=16`."""
        return f"{self.name(option)}={shown(self[option])}"


@dataclass(frozen=True)
class Relation:
    """A rule between options of one component, checked after each option passed its own rule: where `holds`
    is false, `key` is refused and the message says what was `expected`. `needs`: the options it reads."""

    key: str
    needs: tuple[str, ...]
    holds: Callable[[Options], bool]
    expected: Callable[[Options], str]

    def check(self, values: Mapping[str, Any], prefix: str = "") -> None:
        """Refuse `values` (every option of the component) where the relation does not hold; a relation that
        needs an option the component does not take (a registry entry fixed it) is not checked."""
        options = Options(values, prefix)
        if all(option in values for option in self.needs) and not self.holds(options):
            raise ConfigError(f"{options.show(self.key)}: expected {self.expected(options)}")


def checked(*component_relations: Relation) -> Callable[[F], F]:
    """Decorator of a constructor: each call checks its arguments against the rules in their annotations, then
    `component_relations`, before the body runs (`ConfigError`, one line naming the option)."""

    def decorate(init: F) -> F:
        signature = inspect.signature(init)

        @functools.wraps(init)
        def check_then_init(*args: Any, **kwargs: Any) -> None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # a wrong call: Python's own message
                return init(*args, **kwargs)
            bound.apply_defaults()
            _read_spelled(init, signature, bound.arguments)
            values = arguments(signature, bound.arguments)
            check_options(init, values)
            for relation in component_relations:
                relation.check(values)
            return init(*bound.args, **bound.kwargs)

        check_then_init.option_relations = component_relations  # type: ignore[attr-defined]
        return check_then_init  # type: ignore[return-value]

    return decorate


def _read_spelled(init: Callable[..., Any], signature: inspect.Signature, bound: dict[str, Any]) -> None:
    """Each argument written as the command line writes it (a `lin_` schedule) turned, in place, into the value its
    rule reads it as (`Range.read`), so that the Python API takes what the rule's message offers."""
    rules = option_rules(init)
    for name, value in list(bound.items()):
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            bound[name] = {key: _read(rules.get(key), key, item) for key, item in value.items()}
        else:
            bound[name] = _read(rules.get(name), name, value)


def _read(rule: Rule | None, key: str, value: Any) -> Any:
    read = getattr(rule, "read", None)
    return value if read is None else read(key, value)


def arguments(signature: inspect.Signature, bound: Mapping[str, Any]) -> dict[str, Any]:
    """Bound arguments with the `**kwargs` mapping spread out (its keys are options too)."""
    values = {}
    for name, value in bound.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            values.update(value)
        else:
            values[name] = value
    return values


def is_checked(init: Callable[..., Any]) -> bool:
    """Whether the constructor `init` is decorated with `checked`."""
    return hasattr(init, "option_relations")


@functools.cache
def option_rules(init: Callable[..., Any], spelled: bool = False) -> dict[str, Rule]:
    """The rule of each annotated option of the constructor `init`, by name; a `**kwargs` annotated
    `Unpack[SomeTypedDict]` adds the options of that `TypedDict`. `spelled`: the rule of the form a
    configuration file writes (`Spelled`) where the option has one."""
    init = inspect.unwrap(init)
    hints = _evaluated(inspect.get_annotations(init), init.__globals__)
    for name, hint in list(hints.items()):
        if typing.get_origin(hint) is typing.Unpack:
            (options,) = typing.get_args(hint)
            del hints[name]
            hints.update(_evaluated(inspect.get_annotations(options), vars(sys.modules[options.__module__])))
    return _rules(hints, spelled)


def _evaluated(annotations: Mapping[str, Any], namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Each annotation evaluated in `namespace` (the module that wrote it). Only its outer level is evaluated:
    a rule sits there, and a forward reference inside a library's alias (SB3's `GymEnv`) need not resolve. An
    annotation that names what the module imports only for type checkers is left out: it holds no rule."""
    hints = {}
    for name, annotation in annotations.items():
        text = annotation.__forward_arg__ if isinstance(annotation, typing.ForwardRef) else annotation
        try:
            hints[name] = eval(text, dict(namespace)) if isinstance(text, str) else text  # noqa: S307
        except NameError:
            if "Annotated[" in text:
                raise
    return hints


def _rules(hints: Mapping[str, Any], spelled: bool) -> dict[str, Rule]:
    found = {}
    for name, hint in hints.items():
        metadata = getattr(hint, "__metadata__", ())
        rules = [item for item in metadata if isinstance(item, Rule)]
        written = [item.rule for item in metadata if isinstance(item, Spelled)]
        if spelled and written:
            found[name] = written[0]
        elif rules:
            found[name] = rules[0]
    return found


def check_options(init: Callable[..., Any], values: Mapping[str, Any], prefix: str = "") -> None:
    """Check each of `values` that has a rule in `init`'s annotations; keys are named `prefix + option`."""
    rules = option_rules(init)
    for name, value in values.items():
        if name in rules:
            rules[name].check(prefix + name, value)


def relations(cls: type) -> tuple[Relation, ...]:
    """The relations between options that the constructors of `cls` and of its bases declare (`checked`)."""
    found: list[Relation] = []
    for klass in cls.__mro__:
        found += getattr(vars(klass).get("__init__"), "option_relations", ())
    return tuple(dict.fromkeys(found))
