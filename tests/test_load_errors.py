"""Mistakes in loading or building a learner name what to use: a model saved by another learner names
both classes, and SB3's policy aliases point to MemoryPolicy."""

from __future__ import annotations

import pytest

from agents import VMPO, MemoryPPO, saved_learner
from envs import make_vec_env

TINY = {"n_steps": 8, "batch_size": 16, "segment_length": 4, "policy_kwargs": {"backbone": "mlp"}}


@pytest.fixture
def env():
    venv = make_vec_env("TMaze-v0", 2, 0, length=3)
    yield venv
    venv.close()


@pytest.mark.parametrize("saver,loader", [(VMPO, MemoryPPO), (MemoryPPO, VMPO)])
def test_loading_another_learners_model_names_both_classes(saver, loader, env, tmp_path):
    saver("MemoryPolicy", env, **TINY).save(tmp_path / "model.zip")
    assert saved_learner(tmp_path / "model.zip") == saver.__name__
    with pytest.raises(TypeError, match=f"holds a {saver.__name__} model, which {loader.__name__}.load cannot load"):
        loader.load(tmp_path / "model")  # SB3 adds the .zip
    assert type(saver.load(tmp_path / "model.zip")) is saver


@pytest.mark.parametrize("alias", ["MlpPolicy", "CnnPolicy"])
def test_sb3_policy_aliases_suggest_memory_policy(alias, env):
    with pytest.raises(ValueError, match=f"policy '{alias}' is not one of MemoryPPO's .*'MemoryPolicy'"):
        MemoryPPO(alias, env, **TINY)
