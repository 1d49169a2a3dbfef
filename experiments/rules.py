"""The kinds of rule only run settings and commands declare: a saved model, a directory, a path, a thread count,
env wrappers.

They complete the kinds of `envs.rules` (ranges, choices, flags, ...) for the fields of
`experiments.config.RunConfig`; like those, each has `check(key, value)`, raising
`ConfigError` with one line naming the key, and `describe()`. Each imports what it needs
(torch, the env wrappers) only when it checks a value, so reading a configuration loads neither.
"""

from __future__ import annotations

import math
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.atomic import creation_error, nearest_existing
from envs.rules import ConfigError, Range, Text, short, shown


@dataclass(frozen=True)
class SavedModel:
    """Empty (none) or the path of a saved model: a run directory holding `model.zip`, or a `.zip`."""

    def describe(self) -> str:
        return "a run directory holding model.zip, or a .zip file (empty: none)"

    def check(self, key: str, value: Any) -> None:
        if value == "":
            return
        if not isinstance(value, str):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")
        check_name_lengths(key, value)
        path = Path(value)
        model = path / "model.zip" if path.is_dir() else path
        if not model.is_file():
            raise ConfigError(f"{key}={shown(value)}: no saved model there; expected {self.describe()}")
        from experiments.model_files import damage

        if (why := damage(model)) is not None:
            raise ConfigError(f"{key}={shown(value)}: {str(model)!r} does not load: {why}; expected {self.describe()}")


@dataclass(frozen=True)
class Directory:
    """A directory path that is not an existing file (it is created when needed); `check_writable` also asks that
    files can be created in it."""

    def describe(self) -> str:
        return "a directory path (created when needed)"

    def check(self, key: str, value: Any) -> None:
        Text().check(key, value)
        check_name_lengths(key, value)
        path = Path(value)
        if (problem := unwritten_name(path)) is not None:
            raise ConfigError(f"{key}={shown(value)}: {problem}; expected {self.describe()} written out")
        folder = nearest_existing(path)  # it must be a directory
        if not folder.is_dir():
            where = "is a file" if folder == path else f"{str(folder)!r} on its way is a file"
            raise ConfigError(f"{key}={shown(value)}: {where}; expected {self.describe()}")

    def check_writable(self, key: str, value: Any) -> None:
        """`check`, then refuse a path in whose nearest existing folder no file can be created now
        (`creation_error`). Called where a command is about to write there (a run's `validate`, an LM run's
        `check_lm_config`), not by `check`: settings are also read where nothing is written (a hyper-parameter
        entry's checks, on a configuration whose default log_dir no command uses)."""
        self.check(key, value)
        folder = nearest_existing(Path(value))
        if (error := creation_error(folder)) is not None:
            raise ConfigError(f"{key}={shown(value)}: cannot write in {str(folder)!r}: [Errno {error.errno}] "
                              f"{error.strerror}; expected {self.describe()} where files can be written")


def unwritten_name(path: Path) -> str | None:
    """Why a command would not make `path` as the user meant it, or `None`: a leading '~' that no shell expanded
    here (a folder named '~' would be made), or a folder or file it would make whose name begins or ends with white
    space (a stray space of a copy-paste)."""
    if path.parts and path.parts[0].startswith("~"):
        return (f"'~' is not expanded here (a folder named {path.parts[0]!r} would be made; write "
                f"{os.path.expanduser(str(path))!r})")
    folder = nearest_existing(path)
    for name in path.absolute().relative_to(folder.absolute()).parts:  # the names it would make
        if name != name.strip():
            return f"the name {name!r} it would make begins or ends with white space"
    return None


@dataclass(frozen=True)
class PathName:
    """The path of a file or a directory a command reads or writes: a non-empty string (the empty path names
    nothing; the current directory is `.`)."""

    def describe(self) -> str:
        return "a non-empty path"

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, str | os.PathLike) or not os.fspath(value) or "\0" in os.fspath(value):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


def beyond_float(text: str) -> bool:
    """Whether `text` writes a finite number too large for a float (`1e999`, `1.0e+999`), which `float` reads as
    infinite: where it is refused, the message shows the text, not `inf`."""
    try:
        return math.isinf(float(text)) and "inf" not in text.lower()
    except ValueError:
        return False


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system tells it, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class Threads:
    """A torch CPU thread count: 0 (every core this process may use) up to that many cores (`usable_cores`);
    more threads than cores only wait for each other, and a count far above them exhausts memory in OpenMP."""

    def describe(self) -> str:
        return f"an integer >= 0 (0: every core), at most the cores this process may use ({usable_cores()})"

    def check(self, key: str, value: Any) -> None:
        try:
            Range(0, usable_cores(), integer=True).check(key, value)
        except ConfigError:
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}") from None


def check_name_lengths(key: str, value: str) -> None:
    """Refuse a path that the file system cannot hold: a name longer than `NAME_MAX` bytes or a whole path longer
    than `PATH_MAX` (the nearest existing folder's limits, 255 and 4096 on Linux)."""
    path = Path(value).absolute()
    folder = nearest_existing(path)
    name_max, path_max = (_limit(folder, name, default) for name, default in (("PC_NAME_MAX", 255),
                                                                              ("PC_PATH_MAX", 4096)))
    for name in path.relative_to(folder).parts:
        if len(os.fsencode(name)) > name_max:
            raise ConfigError(f"{key}={shown(value)}: the name {short(name, 24)!r} is {len(os.fsencode(name))} bytes; "
                              f"expected names of at most {name_max} bytes")
    if len(os.fsencode(str(path))) >= path_max:
        raise ConfigError(f"{key}={shown(value)}: the path is {len(os.fsencode(str(path)))} bytes; expected fewer "
                          f"than {path_max}")


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return default


@dataclass(frozen=True)
class FolderName:
    """The name of one folder made under the log directory (a study's, a tune study's): one path component."""

    note: str = ""

    def describe(self) -> str:
        return ("a folder name (not empty, . or .., without '/', '\\' or control characters, at most 255 bytes)"
                + (f" ({self.note})" if self.note else ""))

    def check(self, key: str, value: Any) -> None:
        if (not isinstance(value, str) or not value.strip() or value in (".", "..")
                or any(c in "/\\" or unicodedata.category(c).startswith("C") for c in value)
                or len(os.fsencode(value)) > 255):
            raise ConfigError(f"{key}={shown(value)}: expected {self.describe()}")


@dataclass(frozen=True)
class EnvWrappers:
    """Wrappers of each environment copy as rl-zoo3 writes them (`envs.wrappers.parse_env_wrapper`): null,
    an import path, a one-key mapping `{path: {keyword: value}}`, or a list of them. Whether each imports and
    accepts the env is checked when one copy is built (`experiments.validation`)."""

    def describe(self) -> str:
        return "an import path (module.path.Wrapper), {module.path.Wrapper: {keyword: value}}, or a list of them"

    def check(self, key: str, value: Any) -> None:
        from envs.wrappers import EnvWrapperError, parse_env_wrapper

        try:
            parse_env_wrapper(value)
        except EnvWrapperError as error:
            expected = "" if "expected" in str(error) else f"; expected {self.describe()}"
            raise ConfigError(f"{key}={short(repr(value))}: {error}{expected}") from None
