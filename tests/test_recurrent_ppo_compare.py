"""``notebooks/recurrent_ppo_compare.py`` gives RecurrentPPO what the engram run gets (nothing trained, nothing
timed): the env spec with its wrappers and copies, the shared PPO settings, the policy's options; and its summary
keeps every learner's worst and best seed."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from experiments.config import build_config

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CONFIG = {"env": "Pendulum-v1", "env_wrapper": "envs.wrappers.MaskVelocity", "n_envs": 3,
          "ppo": {"n_steps": 32, "batch_size": 48, "gamma": 0.9, "learning_rate": 1e-3, "segment_length": 16},
          "policy": {"ortho_init": False, "activation_fn": "relu", "net_arch": {"pi": [16], "vf": [8]}},
          "gtrxl": {"d_model": 24}}


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    sys.path.insert(0, str(NOTEBOOKS))  # the script imports its sibling ``common``
    try:
        return importlib.import_module("recurrent_ppo_compare")
    finally:
        sys.path.remove(str(NOTEBOOKS))


def test_recurrent_ppo_gets_the_runs_env_settings_and_policy(compare: ModuleType) -> None:
    config = build_config(None, {key: value for key, value in CONFIG.items() if key not in ("ppo", "policy", "gtrxl")},
                          [f"{section}.{k}={v!r}" for section in ("ppo", "policy", "gtrxl")
                           for k, v in CONFIG[section].items()])
    model = compare.contrib_learner(config, {"ent_coef": 0.01})
    assert model.observation_space.shape == (2,)  # the velocity masked, as the engram run sees it
    assert model.n_envs == 3 and model.n_steps == 32 and model.batch_size == 48 and model.gamma == 0.9
    assert model.ent_coef == 0.01  # the extra arguments win
    policy = model.policy
    assert policy.lstm_actor.hidden_size == 24 and policy.lstm_critic is not None  # as wide as the backbone
    assert not policy.ortho_init and policy.activation_fn is torch.nn.ReLU
    assert [layer.out_features for layer in policy.mlp_extractor.policy_net if hasattr(layer, "out_features")] == [16]


def test_the_summary_keeps_every_learners_worst_and_best_seed(compare: ModuleType) -> None:
    rows = [{"learner": "engram gtrxl", "mean_return": r, "cpu_s": 10.0} for r in (-400.0, -200.0, -900.0)]
    rows += [{"learner": "RecurrentPPO", "mean_return": r, "cpu_s": 30.0} for r in (-700.0, -650.0)]
    summary = compare.summary(rows)
    assert summary["engram gtrxl"] == {"mean_return": -500.0, "min": -900.0, "max": -200.0, "cpu_s": 10.0}
    assert summary["RecurrentPPO"]["mean_return"] == -675.0
