"""The kinds of rule an option can declare: a range, a set of choices, a flag, a mapping, layer sizes, ...

Each rule is a small frozen dataclass with `check(key, value)`, which raises `ConfigError` with one line
naming the key, the bad value and what is valid (`gamma=2.0: expected a number in [0, 1]`), and `describe()`,
the valid values in words (for `--help` and the docs). A constructor puts them in its annotations
(`policies.options`); the aliases at the end (`Count`, `Probability`, ...) are the common ones.
This module imports neither torch nor anything of engram, so the command line can read run settings without them;
it sits in the lowest layer, `envs`, so that every layer checks its inputs with the same rules.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar, runtime_checkable


class ConfigError(ValueError, AssertionError):
    """A bad configuration key or value; the message names it and the valid choices.

    A `ValueError`, and an `AssertionError` too, since SB3 signals the same bad constructor arguments with
    `assert` (code that catches SB3's errors catches engram's)."""


class InputNotFoundError(ConfigError, FileNotFoundError):
    """An input file or folder that is not there: a `ConfigError`, and the `FileNotFoundError` of Python's own
    file functions."""


def one_line(text: str) -> str:
    """`text` on one line (messages of libraries may span several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def short(text: str, width: int = 100) -> str:
    """`text` on one line, cut to `width` characters (a message shows a value in at most that many)."""
    text = one_line(text)
    return text if len(text) <= width else text[:width - 1] + "…"


@runtime_checkable
class Rule(Protocol):
    """The valid values of one option: `check` refuses a bad one with `ConfigError`."""

    def describe(self) -> str:
        """The valid values in words."""

    def check(self, key: str, value: Any) -> None:
        """Raise `ConfigError` naming `key` if `value` is not valid."""


def is_linear_schedule(value: Any) -> bool:
    """Whether `value` is a linear schedule (SB3's `LinearSchedule`: callable, from `start` to `end`)."""
    return callable(value) and hasattr(value, "start") and hasattr(value, "end")


def linear_schedule(key: str, text: str) -> Any:
    """`lin_<start>` (to 0) or `lin_<start>_<end>`, as rl-zoo writes them: SB3's `LinearSchedule` of the training
    progress (imported here, so that reading settings without a schedule needs no torch)."""
    from stable_baselines3.common.utils import LinearSchedule

    try:
        parts = [float(part) for part in text.removeprefix("lin_").split("_")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2):
        raise ConfigError(f"{key}={shown(text)}: a linear schedule is written lin_<start> or lin_<start>_<end>, "
                          "e.g. lin_3e-4 or lin_2.75e-4_1e-5")
    return LinearSchedule(parts[0], parts[1] if len(parts) == 2 else 0.0, 1.0)


def shown(value: Any) -> str:
    """`value` as a message shows it: `lin_<start>_<end>` for a linear schedule, else its `short` repr."""
    return f"lin_{value.start}_{value.end}" if is_linear_schedule(value) else short(repr(value))


@contextmanager
def fitting_in_memory(what: str, cure: str) -> Iterator[None]:
    """Turn an allocation that fails inside (NumPy's `MemoryError`, torch's "can't allocate" `RuntimeError`) into a
    `ConfigError`: `what` does not fit in this machine's memory; `cure` says which settings to make smaller."""
    try:
        yield
    except (RuntimeError, MemoryError) as error:
        if isinstance(error, RuntimeError) and "allocate" not in str(error):
            raise
        raise ConfigError(f"{what} do not fit in this machine's memory ({short(one_line(error), 160)}); {cure}"
                          ) from None


V = TypeVar("V")


class UnknownNameError(ConfigError, KeyError):
    """A name a `Registry` does not hold: a `ConfigError`, and the `KeyError` any mapping's lookup raises."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(dict[str, V]):
    """Components by name; `kind` ("backbone", "algo") names them in messages. Looking up a name it does not hold
    raises `UnknownNameError` naming the valid ones (``BACKBONES["nope"]``)."""

    def __init__(self, kind: str, entries: Mapping[str, V] | None = None) -> None:
        super().__init__(entries or {})
        self.kind = kind

    def entry(self, name: Any, key: str | None = None) -> V:
        """The component `name`; `UnknownNameError` for any other value (a bool, a list), naming the argument `key`
        (default: the kind)."""
        if isinstance(name, str) and name in self:
            return self[name]
        raise UnknownNameError(f"{key or self.kind}={shown(name)}: unknown {self.kind} {shown(name)}; "
                               f"valid {self.kind}s: {', '.join(self)}")

    def __missing__(self, name: Any) -> V:
        return self.entry(name)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _is_number(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and (isinstance(value, numbers.Integral) or math.isfinite(value)))  # an int of any size is finite


INTEGER_LIMIT = 2**31 - 1
"""the largest count an integer setting without a bound of its own takes: torch, numpy and the env libraries
hold counts in C ints, and a larger one would overflow there or run without end"""


SCHEDULE_PROBES = (1.0, 0.5, 0.0)
"""the progress remaining at which a schedule given as a function is checked (SB3's: 1 at the start, 0 at the end)"""


@dataclass(frozen=True)
class Range:
    """A finite number in an interval; `integer` for counts, `optional` to allow `None` (meaning: the
    default of the component), `schedule` to allow a schedule of the training progress (SB3's: a linear
    `lin_<start>_<end>` must start in the interval and may end at its closed lower bound, a decay to 0; any other
    function of the progress remaining must give such numbers at `SCHEDULE_PROBES`)."""

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

    def read(self, key: str, value: Any) -> Any:
        """`value` as the learner takes it: a schedule written `lin_<start>[_<end>]` becomes SB3's `LinearSchedule`."""
        if self.schedule and isinstance(value, str) and value.startswith("lin_"):
            return linear_schedule(key, value)
        return value

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if callable(value):
            if not self.schedule:
                self._fail(key, value, "not a schedule")
            if is_linear_schedule(value):
                self._check_number(key, value.start, value, end=False)
                self._check_number(key, value.end, value, end=True)
                return
            for progress in SCHEDULE_PROBES:  # the caller's own function, called where training starts, halves, ends
                self._check_given(key, value, progress)
            return
        self._check_number(key, value, value, end=False)

    def _check_given(self, key: str, schedule: Any, progress: float) -> None:
        """The value of `schedule` at `progress` (remaining), checked as a number of this range."""
        at = f"at progress_remaining={progress:g}"
        try:
            number = schedule(progress)
        except Exception as error:  # the caller's function, whatever it raises
            self._fail(key, schedule, f"at every progress: the schedule raised {type(error).__name__} {at}")
        try:
            self._check_number(key, number, schedule, end=progress < 1)
        except ConfigError:
            self._fail(key, schedule, f"at every progress: the schedule gave {shown(number)} {at}")

    def _check_number(self, key: str, number: Any, value: Any, end: bool) -> None:
        if not _is_number(number) or (self.integer and not isinstance(number, numbers.Integral)):
            self._fail(key, value)
        if self.integer and self.high is None and number > INTEGER_LIMIT:
            self._fail(key, value, f"at most {INTEGER_LIMIT} (a C int)")
        low_open = self.low_open and not end  # a schedule may decay to its lower bound
        if self.low is not None and (number < self.low or (low_open and number == self.low)):
            self._fail(key, value)
        if self.high is not None and (number > self.high or (self.high_open and number == self.high)):
            self._fail(key, value)
        if self.multiple_of is not None and number % self.multiple_of:
            self._fail(key, value)

    def _fail(self, key: str, value: Any, why: str = "") -> None:
        raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}" + (f", {why}" if why else ""))


@dataclass(frozen=True)
class OneOf:
    """A value from a list of choices; `choices` is called when checking, so registries filled at import time
    (attentions, gates) are read when they are complete. `optional`: `None` too (the component's default)."""

    choices: Callable[[], Iterable[Any]]
    optional: bool = False

    def describe(self) -> str:
        return "one of " + ", ".join(map(str, self.choices())) + (" (or null for the default)" if self.optional
                                                                   else "")

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if isinstance(value, bool) or value not in list(self.choices()):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


@dataclass(frozen=True)
class Text:
    """A non-empty string (`empty_ok`: the empty string too; `optional`: or `None`, the component's default)."""

    empty_ok: bool = False
    note: str = ""
    forbidden: str = ""
    """characters the string may not hold"""
    optional: bool = False

    def describe(self) -> str:
        return (("a string" if self.empty_ok else "a non-empty string")
                + (f" without {' or '.join(map(repr, self.forbidden))}" if self.forbidden else "")
                + (f" ({self.note})" if self.note else "") + (" (or null for the default)" if self.optional else ""))

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if (not isinstance(value, str) or not (value or self.empty_ok)
                or any(c in value for c in "\0" + self.forbidden)):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


@dataclass(frozen=True)
class Flag:
    """`true` or `false` (`optional`: or `None`, the component's default)."""

    optional: bool = False

    def describe(self) -> str:
        return "true or false" + (" (or null for the default)" if self.optional else "")

    def check(self, key: str, value: Any) -> None:
        if not (isinstance(value, bool) or (value is None and self.optional)):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


@dataclass(frozen=True)
class Entries:
    """A mapping (or `None` when `optional`) whose values each pass `each` (if given)."""

    each: Range | None = None
    optional: bool = True

    def describe(self) -> str:
        inner = f" of name to {self.each.describe()}" if self.each else ""
        return f"a mapping{inner}" + (" (or null for the default)" if self.optional else "")

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")
        for name, item in value.items():
            if self.each is not None:
                self.each.check(f"{key}.{name}", item)


@dataclass(frozen=True)
class Items:
    """A list whose items each pass `each`; non-empty unless `empty_ok`; `optional`: or `None`."""

    each: Rule
    empty_ok: bool = False
    optional: bool = False

    def describe(self) -> str:
        return (f"a {'' if self.empty_ok else 'non-empty '}list, each {self.each.describe()}"
                + (" (or null for the default)" if self.optional else ""))

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, list | tuple) or not (value or self.empty_ok):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")
        for i, item in enumerate(value):
            try:
                self.each.check(f"{key}[{i}]", item)
            except ConfigError as error:
                raise ConfigError(f"{error}, in {key}={shown(value)}") from None


@dataclass(frozen=True)
class LayerSizes:
    """Hidden layer widths: a list of positive integers, or `{pi: [...], vf: [...]}` (SB3's `net_arch`)."""

    def describe(self) -> str:
        return "a list of positive layer widths, e.g. [64, 64], or {pi: [64], vf: [64]} (or null for the default)"

    def check(self, key: str, value: Any) -> None:
        if value is None:
            return
        lists = value.values() if isinstance(value, dict) and set(value) <= {"pi", "vf"} and value else [value]
        for sizes in lists:
            if not isinstance(sizes, list) or not all(
                    isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1 for n in sizes):
                raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


@dataclass(frozen=True)
class Subclass:
    """A class derived from `base` (`name` names it in messages); `optional`: or `None`; `bare`: one built with no
    arguments (SB3 calls `activation_fn()`)."""

    base: type
    name: str
    optional: bool = False
    bare: bool = False

    def describe(self) -> str:
        return (f"a subclass of {self.name}" + (" built with no arguments" if self.bare else "")
                + (" (or null for the default)" if self.optional else ""))

    def check(self, key: str, value: Any) -> None:
        if not ((value is None and self.optional) or (isinstance(value, type) and issubclass(value, self.base)
                                                      and (not self.bare or _takes_no_arguments(value)))):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


def _takes_no_arguments(cls: type) -> bool:
    try:
        inspect.signature(cls).bind()
    except TypeError:
        return False
    except ValueError:  # a class whose signature Python cannot read: trusted
        return True
    return True


@dataclass(frozen=True)
class AnyOf:
    """A value that passes one of `rules` (e.g. a count, or a list of seeds)."""

    rules: tuple[Rule, ...]

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
        raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


@dataclass(frozen=True)
class Spelled:
    """How a configuration file writes an option whose Python value is an object (a class): `rule` checks the
    written form (a name, an import path), which the command line turns into the object. Beside the option's own
    rule in its annotation, e.g. `Annotated[type[nn.Module], Subclass(nn.Module, ...), Spelled(OneOf(...))]`."""

    rule: Rule


Count = Annotated[int, Range(1, integer=True)]
"""an integer >= 1 (sizes, steps, layers)"""
CountOrNone = Annotated[int | None, Range(1, integer=True, optional=True)]
"""an integer >= 1, or ``None`` for the component's default"""
NonNegativeInt = Annotated[int, Range(0, integer=True)]
Probability = Annotated[float, Range(0.0, 1.0)]
Positive = Annotated[float, Range(0.0, low_open=True)]
FLOAT32_MAX = 3.4028234663852886e38
"""the largest float32"""
STEP_SIZE = Range(0.0, FLOAT32_MAX, low_open=True, note="a float32: the optimiser scales float32 weights by it")
"""a learning rate: positive, and one the optimiser's float32 arithmetic holds"""
StepSize = Annotated[float, STEP_SIZE]
NonNegative = Annotated[float, Range(0.0)]
Finite = Annotated[float, Range()]
Switch = Annotated[bool, Flag()]
OptionalMapping = Annotated[dict[str, Any] | None, Entries()]
"""the options of a sub-component (a mapping, or ``None`` for its defaults)"""
VERBOSITY = Range(0, 2, integer=True)
Verbosity = Annotated[int, VERBOSITY]
"""SB3's verbosity: 0 quiet, 1 info, 2 debug"""


@dataclass(frozen=True)
class Device:
    """A torch device this machine has: `auto` (CUDA if available, else CPU), `cpu`, `cuda`,
    `cuda:N` or `mps`. An explicit accelerator that is missing is an error, not a silent CPU run."""

    def describe(self) -> str:
        return "auto, cpu, cuda, cuda:N or mps"

    def check(self, key: str, value: Any) -> None:
        import torch

        if value == "auto":
            return
        try:
            device = torch.device(value)
        except (RuntimeError, TypeError, ValueError):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}") from None
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                raise ConfigError(f"{key}={shown(value)}: CUDA is not available on this machine; expected cpu, or auto "
                                  "(CUDA when there is one, else the CPU)")
            if device.index is not None and device.index >= count:
                raise ConfigError(f"{key}={shown(value)}: this machine has {count} CUDA device(s), cuda:0 to "
                                  f"cuda:{count - 1}")
        elif device.type == "mps":
            if not torch.backends.mps.is_available():
                raise ConfigError(f"{key}={shown(value)}: MPS is not available on this machine; expected cpu or auto")
        elif device.type != "cpu":
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")
