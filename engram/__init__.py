"""engram: reinforcement learning with Transformer memories, on Stable-Baselines3.

The public API in one namespace, imported on first use (``import engram`` loads no torch)::

    from engram import MemoryPPO, make_vec_env

    env = make_vec_env("TMaze-v0", n_envs=16, seed=0, length=20)
    model = MemoryPPO("MemoryPolicy", env, policy_kwargs={"backbone": "gtrxl"})

- learners: ``MemoryPPO``, ``VMPO`` and ``ALGOS`` (by ``--algo`` name), from :mod:`agents`;
- environments: ``make_vec_env``, ``make_env``, ``ENV_IDS`` (engram's tasks) and ``list_env_ids``, from :mod:`envs`;
- memory backbones, attentions and position schemes by name: ``BACKBONES``, ``ATTENTIONS``, ``POSITIONS``,
  from :mod:`policies`;
- ``__version__``, the installed distribution's version.

The command line is the ``engram`` command (also ``python -m engram`` and ``python train_rl.py``); the shipped
configuration files are the package data ``engram.configs``.
"""

from __future__ import annotations

import configparser
import importlib
from importlib import metadata
from pathlib import Path
from typing import Any

EXPORTS = {
    "MemoryPPO": "agents", "VMPO": "agents", "ALGOS": "agents",
    "make_vec_env": "envs", "make_env": "envs", "ENV_IDS": "envs", "list_env_ids": "envs",
    "BACKBONES": "policies", "ATTENTIONS": "policies", "POSITIONS": "policies",
}
"""each public name, and the module that defines it"""

__all__ = ["__version__", *EXPORTS]


def _version() -> str:
    """The version of the installed distribution ``engram``, else (a source tree never installed) setup.cfg's."""
    try:
        return metadata.version("engram")
    except metadata.PackageNotFoundError:
        setup = configparser.ConfigParser()
        setup.read(Path(__file__).resolve().parents[1] / "setup.cfg")
        return setup["metadata"]["version"]


__version__ = _version()


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in EXPORTS:
        raise AttributeError(f"module 'engram' has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
