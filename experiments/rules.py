"""The kinds of check a setting can declare: a range, a set of choices, a device, layer sizes, ...

Each rule is a small frozen dataclass with ``check(key, value)``, which raises :class:`ConfigError`
with one line naming the key, the bad value and what is valid (``ppo.gamma=2: expected a number in
[0, 1]``), and ``describe()``, the valid values in words (for ``docs/validation.md`` and ``--help``).
The tables that attach rules to settings are in :mod:`experiments.config` (run settings, as
dataclass-field metadata) and :mod:`experiments.validation` (options of learners, backbones,
attentions and the policy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stable_baselines3.common.utils import LinearSchedule


class ConfigError(ValueError):
    """A bad configuration key or value; the message names it and the valid choices."""


def one_line(text: str) -> str:
    """``text`` on one line (messages of libraries may span several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def short(text: str, width: int = 100) -> str:
    """``text`` on one line, cut to ``width`` characters (a message shows a value in at most that many)."""
    text = one_line(text)
    return text if len(text) <= width else text[:width - 1] + "…"


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Range:
    """A finite number in an interval; ``integer`` for counts, ``optional`` to allow ``None``
    (meaning: the default of the component), ``schedule`` to allow ``lin_<start>_<end>``, whose
    start must lie in the interval and whose end may reach its closed lower bound (a decay to 0)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    optional: bool = False
    schedule: bool = False
    multiple_of: int | None = None
    note: str = ""
    """what special values mean, e.g. ``0: only at the end``"""

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            text = (f"{kind} in {'(' if self.low_open else '['}{_number(self.low)}, "
                    f"{_number(self.high)}{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {_number(self.low)}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {_number(self.high)}"
        else:
            text = f"a finite {kind.split()[-1]}"
        if self.multiple_of is not None:
            text += f", a multiple of {self.multiple_of}"
        extras = [self.note] if self.note else []
        extras += ["or null for the default"] if self.optional else []
        extras += ["or a schedule lin_<start>[_<end>]"] if self.schedule else []
        return text + (f" ({'; '.join(extras)})" if extras else "")

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if isinstance(value, LinearSchedule):
            if not self.schedule:
                self._fail(key, f"lin_{value.start}_{value.end}", "not a schedule")
            self._check_number(key, value.start, f"lin_{value.start}_{value.end}", end=False)
            self._check_number(key, value.end, f"lin_{value.start}_{value.end}", end=True)
            return
        self._check_number(key, value, value, end=False)

    def _check_number(self, key: str, number: Any, shown: Any, end: bool) -> None:
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            self._fail(key, shown)
        if self.integer and not isinstance(number, int):
            self._fail(key, shown)
        low_open = self.low_open and not end  # a schedule may decay to its lower bound
        if self.low is not None and (number < self.low or (low_open and number == self.low)):
            self._fail(key, shown)
        if self.high is not None and (number > self.high or (self.high_open and number == self.high)):
            self._fail(key, shown)
        if self.multiple_of is not None and number % self.multiple_of:
            self._fail(key, shown)

    def _fail(self, key: str, shown: Any, why: str = "") -> None:
        shown = shown if isinstance(shown, str) and shown.startswith("lin_") else repr(shown)
        raise ConfigError(f"{key}={shown}: expected {self.describe()}" + (f", {why}" if why else ""))


@dataclass(frozen=True)
class OneOf:
    """A value from a list of choices; ``choices`` is called when checking, so registries filled
    at import time (attentions, gates) are read when they are complete."""

    choices: Callable[[], Iterable[Any]]

    def describe(self) -> str:
        return "one of " + ", ".join(map(str, self.choices()))

    def check(self, key: str, value: Any) -> None:
        if isinstance(value, bool) or value not in list(self.choices()):
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}")


@dataclass(frozen=True)
class Text:
    """A non-empty string (``empty_ok``: the empty string too)."""

    empty_ok: bool = False
    note: str = ""
    forbidden: str = ""
    """characters the string may not hold"""

    def describe(self) -> str:
        return (("a string" if self.empty_ok else "a non-empty string")
                + (f" without {' or '.join(map(repr, self.forbidden))}" if self.forbidden else "")
                + (f" ({self.note})" if self.note else ""))

    def check(self, key: str, value: Any) -> None:
        if (not isinstance(value, str) or not (value or self.empty_ok)
                or any(c in value for c in "\0" + self.forbidden)):
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}")


@dataclass(frozen=True)
class Flag:
    """``true`` or ``false``."""

    def describe(self) -> str:
        return "true or false"

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}")


@dataclass(frozen=True)
class Entries:
    """A mapping (or ``None`` when ``optional``) whose values each pass ``each`` (if given)."""

    each: Range | None = None
    optional: bool = True

    def describe(self) -> str:
        inner = f" of name to {self.each.describe()}" if self.each else ""
        return f"a mapping{inner}" + (" (or null for the default)" if self.optional else "")

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, dict):
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}")
        for name, item in value.items():
            if self.each is not None:
                self.each.check(f"{key}.{name}", item)


@dataclass(frozen=True)
class LayerSizes:
    """Hidden layer widths: a list of positive integers, or ``{pi: [...], vf: [...]}`` (SB3's ``net_arch``)."""

    def describe(self) -> str:
        return "a list of positive layer widths, e.g. [64, 64], or {pi: [64], vf: [64]} (or null for the default)"

    def check(self, key: str, value: Any) -> None:
        if value is None:
            return
        lists = value.values() if isinstance(value, dict) and set(value) <= {"pi", "vf"} and value else [value]
        for sizes in lists:
            if not isinstance(sizes, list) or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes):
                raise ConfigError(f"{key}={value!r}: expected {self.describe()}")


@dataclass(frozen=True)
class SavedModel:
    """Empty (none) or the path of a saved model: a run directory holding ``model.zip``, or a ``.zip``."""

    def describe(self) -> str:
        return "a run directory holding model.zip, or a .zip file (empty: none)"

    def check(self, key: str, value: Any) -> None:
        if value == "":
            return
        if not isinstance(value, str):
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}")
        path = Path(value)
        if not (path / "model.zip" if path.is_dir() else path).is_file():
            raise ConfigError(f"{key}={value!r}: no saved model there; expected {self.describe()}")


@dataclass(frozen=True)
class Directory:
    """A directory path that is not an existing file (it is created when needed)."""

    def describe(self) -> str:
        return "a directory path (created when needed)"

    def check(self, key: str, value: Any) -> None:
        Text().check(key, value)
        if Path(value).exists() and not Path(value).is_dir():
            raise ConfigError(f"{key}={value!r}: is a file; expected {self.describe()}")


@dataclass(frozen=True)
class Device:
    """A torch device this machine has: ``auto`` (CUDA if available, else CPU), ``cpu``, ``cuda``,
    ``cuda:N`` or ``mps``. An explicit accelerator that is missing is an error, not a silent CPU run."""

    def describe(self) -> str:
        return "auto, cpu, cuda, cuda:N or mps"

    def check(self, key: str, value: Any) -> None:
        import torch

        if value == "auto":
            return
        try:
            device = torch.device(value)
        except (RuntimeError, TypeError, ValueError):
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}") from None
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                raise ConfigError(f"{key}={value!r}: CUDA is not available on this machine; expected cpu, or auto "
                                  "(CUDA when there is one, else the CPU)")
            if device.index is not None and device.index >= count:
                raise ConfigError(f"{key}={value!r}: this machine has {count} CUDA device(s), cuda:0 to "
                                  f"cuda:{count - 1}")
        elif device.type == "mps":
            if not torch.backends.mps.is_available():
                raise ConfigError(f"{key}={value!r}: MPS is not available on this machine; expected cpu or auto")
        elif device.type != "cpu":
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}")


@dataclass(frozen=True)
class Items:
    """A list whose items each pass ``each``; non-empty unless ``empty_ok``."""

    each: Any  # a Rule
    empty_ok: bool = False

    def describe(self) -> str:
        return f"a {'' if self.empty_ok else 'non-empty '}list, each {self.each.describe()}"

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, list) or not (value or self.empty_ok):
            raise ConfigError(f"{key}={value!r}: expected {self.describe()}")
        for i, item in enumerate(value):
            try:
                self.each.check(f"{key}[{i}]", item)
            except ConfigError as error:
                raise ConfigError(f"{error}, in {key}={value!r}") from None


@dataclass(frozen=True)
class EnvWrappers:
    """Wrappers of each environment copy as rl-zoo3 writes them (:func:`envs.wrappers.parse_env_wrapper`): null,
    an import path, a one-key mapping ``{path: {keyword: value}}``, or a list of them. Whether each imports and
    accepts the env is checked when one copy is built (:mod:`experiments.validation`)."""

    def describe(self) -> str:
        return "an import path (module.path.Wrapper), {module.path.Wrapper: {keyword: value}}, or a list of them"

    def check(self, key: str, value: Any) -> None:
        from envs.wrappers import EnvWrapperError, parse_env_wrapper

        try:
            parse_env_wrapper(value)
        except EnvWrapperError as error:
            raise ConfigError(f"{key}={short(repr(value))}: {error}; expected {self.describe()}") from None


@dataclass(frozen=True)
class AnyOf:
    """A value that passes one of ``rules`` (e.g. a count, or a list of seeds)."""

    rules: tuple[Any, ...]  # Rules

    def describe(self) -> str:
        return ", or ".join(rule.describe() for rule in self.rules)

    def check(self, key: str, value: Any) -> None:
        errors = []
        for rule in self.rules:
            try:
                rule.check(key, value)
                return
            except ConfigError as error:
                errors.append((rule, error))
        for rule, error in errors:  # a list fails as a list: its own message names the bad item
            if isinstance(rule, Items) and isinstance(value, list) and value:
                raise error
        raise ConfigError(f"{key}={value!r}: expected {self.describe()}")


Rule = (Range | OneOf | Text | Flag | Entries | LayerSizes | SavedModel | Directory | Device | Items | EnvWrappers
        | AnyOf)
"""Any of the rules above (each has ``check(key, value)`` and ``describe()``)."""
