"""Where a configuration file named on the command line is: a path, or the name of a file engram ships.

engram ships its configuration files (`configs/` of the repository) as the package data `engram.configs`,
found with `importlib.resources` wherever engram is installed. Every command that reads one (`--config`,
`study FILE`, `tune --suite` and `--space`, `lm train -c`, `--hyperparams`) turns its argument into a path
with `config_path`:

1. an existing path wins (`--config my_task.yaml`, or `configs/demo.yaml` in a clone);
2. else a shipped file by its name under `configs/`, with or without its suffix (`.yaml`; `.yml` for the
   hyper-parameter files) and a leading `configs/`, looked up in the command's folder first (`studies`,
   `tune`, `lm`, `hyperparams`), then at the top:
   `--config demo`, `--config demo.yaml`, `--config configs/demo.yaml`, `study demo`,
   `study studies/demo`, `tune --space ppo`, `lm train -c python`, `--hyperparams ppo`;
3. else `ConfigError`, one line naming the shipped files of the command's folder.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

FOLDERS = {"": "run config", "studies": "study file", "tune": "search space", "lm": "LM config",
           "hyperparams": "hyper-parameter file"}
"""the folders of the shipped files, and what each holds"""
SUFFIXES = {"hyperparams": ".yml"}
"""the suffix of a folder's files where it is not ``.yaml`` (rl-zoo3 names its hyper-parameter files ``<algo>.yml``)"""


def shipped_dir() -> Path:
    """The directory of the shipped configuration files: the installed package data `engram.configs`, or
    `configs/` beside this package when it runs from a source tree that was never installed."""
    try:
        return Path(str(resources.files("engram.configs")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / "configs"


def shipped_names(folder: str = "") -> list[str]:
    """The names of the shipped files of `folder` (`""`: the run configs at the top), without their suffix."""
    return sorted(path.stem for path in (shipped_dir() / folder).glob(f"*{SUFFIXES.get(folder, '.yaml')}"))


def config_path(name: str | None, folder: str = "") -> str | None:
    """The path of the file `name` stands for (`None` for `None`): `name` itself if it exists, else the
    shipped file of that name, in `folder` first (a key of `FOLDERS`), then at the top of the shipped files.
    A string, as paths given on the command line are (a study records it in `study.yaml`)."""
    from envs.rules import ConfigError, shown  # here: resolving a name loads no torch (``list configs``)

    if name is not None and not name.strip():
        raise ConfigError(f"config file {shown(name)}: an empty name; expected a file path or the name of a shipped "
                          f"{FOLDERS[folder]} ({', '.join(shipped_names(folder))})")
    if name is None:
        return name
    try:
        if Path(name).exists():
            return name
    except OSError as error:  # a name too long for the file system, ...
        raise ConfigError(f"config file {shown(name)}: {error.strerror}; expected a file path or the name of a "
                          f"shipped {FOLDERS[folder]} ({', '.join(shipped_names(folder))})") from None
    suffix = SUFFIXES.get(folder, ".yaml")
    stem = name.removeprefix("configs/").removesuffix(suffix)
    root = shipped_dir()
    for candidate in (root / folder / f"{stem}{suffix}", root / f"{stem}{suffix}"):
        if candidate.is_file():
            return str(candidate)
    raise ConfigError(f"config file {shown(name)} does not exist, nor is it the name of a shipped {FOLDERS[folder]} "
                      f"({', '.join(shipped_names(folder))})")
