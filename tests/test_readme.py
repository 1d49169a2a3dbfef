"""README.md documents every backbone, option, learner option, flag, task and config."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import ALGOS
from envs import list_env_ids
from experiments.cli import train as train_cli
from experiments.config import FIELDS, POLICY_OPTIONS, algo_defaults
from policies import BACKBONES

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def documented(name: str) -> bool:
    return f"`{name}`" in README or f"`{name} " in README or f"`{name}=" in README or f"`{name}," in README


@pytest.mark.parametrize("backbone", list(BACKBONES))
def test_backbones_and_their_options(backbone):
    assert documented(backbone)
    missing = [option for option in BACKBONES[backbone].options() if not documented(option)]
    assert not missing, f"{backbone}: {missing}"


@pytest.mark.parametrize("algo", list(ALGOS))
def test_learner_options(algo):
    missing = [option for option in algo_defaults(algo) if option not in README]
    assert not missing, f"{algo}: {missing}"


def test_flags_run_settings_and_policy_options():
    flags = [a for action in train_cli.make_parser()._actions for a in action.option_strings if a.startswith("--")]
    missing = [flag for flag in flags if flag not in README and flag != "--help"]
    missing += [name for name in FIELDS if name not in README]
    missing += [f"policy.{name}" for name in POLICY_OPTIONS if name not in README]
    assert not missing


def test_tasks_and_configs():
    missing = [env_id for env_id in list_env_ids("engram") if f"`{env_id}`" not in README]
    missing += [path.name for path in (REPO / "configs").glob("*.yaml") if path.name not in README]
    assert not missing
    assert "SECTION" not in README
