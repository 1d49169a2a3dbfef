"""What exists, with a one-line summary each: backbones, attentions, position schemes, environments,
configuration files, learners and the entries of the hyper-parameter files, read from their registries and files
(``train_rl.py list``).

Each catalogue imports its registry only when asked for, so listing configs loads no torch.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments import strict_yaml
from experiments.config_files import shipped_dir

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
WIDTH = 110
"""longest summary shown; a longer first sentence is cut at a word and ends with …"""


def first_sentence(text: str, width: int = WIDTH) -> str:
    """The first sentence of the first paragraph of `text`, on one line of at most `width` characters."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    sentence = SENTENCE_END.split(paragraph, maxsplit=1)[0]
    return sentence if len(sentence) <= width else sentence[:width - 1].rsplit(" ", 1)[0] + " …"


def summary(entry: Any) -> str:
    """The summary of a registry entry: its `summary` attribute, else its docstring's first sentence."""
    text = getattr(entry, "summary", None)
    return text if isinstance(text, str) else first_sentence(entry.__doc__ or "")


def _registry(module: str, name: str) -> dict[str, str]:
    return {key: summary(entry) for key, entry in getattr(importlib.import_module(module), name).items()}


def backbones() -> dict[str, str]:
    """`policies.BACKBONES` (`--backbone`)."""
    return _registry("policies", "BACKBONES")


def attentions() -> dict[str, str]:
    """`policies.ATTENTIONS` (a Transformer backbone's `attention` option)."""
    return _registry("policies", "ATTENTIONS")


def positions() -> dict[str, str]:
    """`policies.POSITIONS`, the position schemes of the attentions."""
    return _registry("policies", "POSITIONS")


def learners() -> dict[str, str]:
    """`agents.ALGOS` (`--algo`)."""
    return _registry("agents", "ALGOS")


def envs() -> dict[str, str]:
    """Every id `--env` accepts: engram's tasks with their summary, the adapted families by name, and every
    other id in gymnasium's registry with the module that provides it (modules of `--gym-packages` included,
    once imported). Entry points (`module.path:EnvClass`) are not listed: any env class is one."""
    import gymnasium as gym

    from envs import ENV_IDS, list_env_ids

    families = {"minigrid": "MiniGrid (gymnasium, DummyVecEnv)", "popgym": "POPGym (gymnasium, DummyVecEnv)",
                "memory_gym": "Memory Gym (optional: pip install memory-gym)"}
    listed = {env_id: summary(task) for env_id, task in ENV_IDS.items()}
    for family, text in families.items():
        listed.update({env_id: text for env_id in list_env_ids(family)})
    for env_id in list_env_ids("gymnasium"):
        entry_point = gym.spec(env_id).entry_point
        module = entry_point.split(":")[0] if isinstance(entry_point, str) else getattr(entry_point, "__module__", "?")
        listed[env_id] = f"gymnasium ({module})"
    return listed


def config_summary(path: Path) -> str:
    """The first sentence of a configuration file's leading comment, up to its first indented (command) line."""
    comment = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or line.startswith("#  "):
            break
        comment.append(line.lstrip("#").strip())
    return first_sentence("\n".join(comment))


def configs(directory: Path | None = None) -> dict[str, str]:
    """The shipped YAML files (`directory`: `shipped_dir`) as `configs/NAME.yaml`,
    a name every command accepts (run configs for `--config`, study files under `studies/`, search spaces under
    `tune/`, LM configs under `lm/`), with their summary; each must parse as YAML."""
    directory = directory or shipped_dir()
    listed = {}
    for path in sorted(directory.rglob("*.yaml")):
        strict_yaml.load(path.read_text())
        listed[f"configs/{path.relative_to(directory).as_posix()}"] = config_summary(path)
    return listed


def hyperparams() -> dict[str, str]:
    """The entries of the shipped hyper-parameter files as `FILE#KEY` (what `--hyperparams` takes), each with the
    first sentence of the comment above it and its conditions (`experiments.hyperparams.catalogue`)."""
    from experiments.hyperparams import catalogue

    return catalogue()


CATALOGUES: dict[str, Callable[[], dict[str, str]]] = {
    "backbones": backbones, "attentions": attentions, "positions": positions, "envs": envs, "configs": configs,
    "learners": learners, "hyperparams": hyperparams,
}
"""what ``train_rl.py list WHAT`` shows, by name"""
