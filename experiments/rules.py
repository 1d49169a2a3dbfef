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
        if Path(value).exists() and not Path(value).is_dir():
            raise ConfigError(f"{key}={shown(value)}: is a file; expected {self.describe()}")


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
