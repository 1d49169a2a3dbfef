"""Objects named by import path: a user's environment, wrapper or registering module.

`module.path:Name` and `module.path.Name` both name attribute `Name` of module `module.path`.
Modules are imported with the working directory on `sys.path` (as `python -m` does), so a file
`my_envs.py` beside the command is found whether engram runs as `engram` or `python train_rl.py`.
A failure is an `ImportPathError` (a `ConfigError`) whose one-line message names the path and the cause:
the last line of the import's traceback (`ModuleNotFoundError: No module named 'my_envs'`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from envs.rules import ConfigError, Items, Text, short, shown

MODULE_NAMES = Items(Text(note="a module name"), empty_ok=True)
"""the rule of `gym_packages`: a list (or tuple) of module names; a bare string is not a list of names"""


class ImportPathError(ConfigError):
    """An import path that names nothing importable; the message names the path and why."""


def cause(error: BaseException) -> str:
    """The last line of `error`'s traceback: `TypeName: message` on one line."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def import_module(name: str) -> Any:
    """Import module `name` with the working directory on `sys.path`; `ImportPathError` naming the
    module and the cause if it is not found or raises while importing."""
    if not name or any(not part.isidentifier() for part in name.split(".")):
        raise ImportPathError(f"{shown(name)} is not a module path (expected dotted names, e.g. my_package.envs)")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(name)
    except Exception as error:  # anything the module raises while importing is the user's error to see
        raise ImportPathError(f"module {shown(name)} does not import ({short(cause(error), 200)})") from None


def split_path(path: str) -> tuple[str, str]:
    """`"pkg.mod:Name"` or `"pkg.mod.Name"` → `("pkg.mod", "Name")`."""
    module, colon, name = path.partition(":")
    if not colon:
        module, _, name = path.rpartition(".")
    if not module or not name:
        raise ImportPathError(f"{shown(path)} is not an import path (expected module.path:Name or module.path.Name)")
    return module, name


def load_object(path: str) -> Any:
    """The object an import path names; `ImportPathError` if its module does not import or lacks it."""
    module_name, name = split_path(path)
    module = import_module(module_name)
    target: Any = module
    for part in name.split("."):
        if not hasattr(target, part):
            raise ImportPathError(f"module {shown(module_name)} has no attribute {shown(name)}")
        target = getattr(target, part)
    return target


def import_packages(packages: Sequence[str], key: str = "gym_packages") -> None:
    """Import each module of `packages` for its side effects (gymnasium registrations), as rl-zoo3's
    `--gym-packages`: `ConfigError` naming `key` unless `packages` is a list or tuple of module names
    (`MODULE_NAMES`), then `ImportPathError` naming the first that fails."""
    MODULE_NAMES.check(key, packages)
    for name in packages:
        import_module(name)
