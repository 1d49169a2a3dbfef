"""A catalogue of components by name: the registry shape that `policies.POSITIONS` and
`policies.ATTENTIONS` share. A component registers itself with a decorator in its own module, and the
package that holds it imports every module it contains (`import_package`), so adding one is one new file.
The two catalogues are defined here, below the packages that fill them, so that the attention layer, which
registers the interfaces and Transformer-XL's relative positions, and the modules that subclass them can import
them in any order."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from envs.rules import ConfigError, Registry, shown

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A registered component: its class and a one-line summary (what `train_rl.py list` prints)."""

    cls: type[T]
    summary: str

    def options(self, shared: tuple[str, ...] = ()) -> dict[str, Any]:
        """The keyword-only settings of the component's `__init__` beyond `shared`, with their defaults."""
        params = inspect.signature(self.cls.__init__).parameters
        return {name: p.default for name, p in params.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in shared}


class Catalogue(Registry[Entry[T]]):
    """name → `Entry`; `kind` ("position", "attention") names the components in messages, `shared`
    the constructor settings every member takes from the backbone (not options a user sets)."""

    def __init__(self, kind: str, shared: tuple[str, ...]) -> None:
        super().__init__(kind)
        self.shared = shared

    def register(self, name: str, summary: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: make a component selectable by `name`."""

        def register(cls: type[T]) -> type[T]:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            if not summary or "\n" in summary:
                raise ValueError(f"{self.kind} {name!r} needs a one-line summary")
            self[name] = Entry(cls, summary)
            cls.name = name  # type: ignore[attr-defined]
            return cls

        return register

    def options(self, name: str) -> dict[str, Any]:
        """The options of `name` a user may set, with their defaults (`ConfigError` for an unknown name)."""
        return self.entry(name).options(self.shared)

    def build(self, name: str, options: dict[str, Any] | None, **shared: Any) -> T:
        """The component `name` with the backbone's `shared` settings and the user's `options`.

        Raises:
            ConfigError: (a ValueError) unknown name, options that are not a mapping, or an unknown option; the
                message names it and lists the valid ones.
        """
        entry = self.entry(name)
        options = {} if options is None else options
        valid = ", ".join(self.options(name)) or "none"
        if not isinstance(options, dict):
            raise ConfigError(f"{self.kind}_options={shown(options)}: the options of {self.kind} {name!r} must be a "
                              f"mapping of option to value; valid options: {valid}")
        unknown = sorted(set(options) - set(self.options(name)))
        if unknown:
            raise ConfigError(f"{self.kind}_options={shown(options)}: unknown option(s) "
                              f"{', '.join(map(repr, unknown))} for {self.kind} {name!r}; valid options: {valid}")
        return entry.cls(**shared, **options)


def import_package(name: str, path: list[str]) -> None:
    """Import every module of package `name` (its `__path__`): each registers what it defines."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{name}.{module.name}")


SHARED = ("d_model", "n_heads", "d_head", "max_distance")
"""the settings every position scheme and attention takes from the backbone"""

POSITIONS: Catalogue = Catalogue("position", shared=SHARED)
"""name → :class:`Entry` (``.cls``, ``.summary``) of every position scheme (:mod:`policies.positions`; ``none`` and
``relative`` are in :mod:`policies.attention.layer`)"""

ATTENTIONS: Catalogue = Catalogue("attention", shared=SHARED)
"""name → :class:`Entry` (``.cls``, ``.summary``) of every key pattern and memory kind (:mod:`policies.attention`)"""
