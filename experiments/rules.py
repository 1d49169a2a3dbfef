"""The kinds of rule only run settings declare: a saved model, a directory, a torch device, env wrappers.

They complete the kinds of `policies.rules` (ranges, choices, flags, ...) for the fields of
`experiments.config.RunConfig`; like those, each has `check(key, value)`, raising
`ConfigError` with one line naming the key, and `describe()`. Each imports what it needs
(torch, the env wrappers) only when it checks a value, so reading a configuration loads neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.rules import ConfigError, Text, short, shown


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
        path = Path(value)
        model = path / "model.zip" if path.is_dir() else path
        if not model.is_file():
            raise ConfigError(f"{key}={shown(value)}: no saved model there; expected {self.describe()}")
        from experiments.model_files import damage

        if (why := damage(model)) is not None:
            raise ConfigError(f"{key}={shown(value)}: {str(model)!r} does not load: {why}; expected {self.describe()}")


@dataclass(frozen=True)
class Directory:
    """A directory path that is not an existing file (it is created when needed)."""

    def describe(self) -> str:
        return "a directory path (created when needed)"

    def check(self, key: str, value: Any) -> None:
        Text().check(key, value)
        path = Path(value)
        for folder in (path, *path.parents):  # the nearest existing one must be a directory
            if folder.exists():
                if not folder.is_dir():
                    where = "is a file" if folder == path else f"{str(folder)!r} on its way is a file"
                    raise ConfigError(f"{key}={shown(value)}: {where}; expected {self.describe()}")
                return


@dataclass(frozen=True)
class FolderName:
    """The name of one folder made under the log directory (a study's, a tune study's): one path component."""

    note: str = ""

    def describe(self) -> str:
        return "a folder name (not empty, . or .., without '/' or '\\')" + (f" ({self.note})" if self.note else "")

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, str) or not value.strip() or value in (".", "..") or any(c in value for c in "/\\\0"):
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
            raise ConfigError(f"{key}={short(repr(value))}: {error}; expected {self.describe()}") from None
