"""``set_env`` and ``set_parameters`` take what SB3's take (and an env id) and refuse, with a ``ValueError`` naming
the argument, an env or parameters this model cannot use; SB3 asserted, or raised torch's RuntimeError."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

from agents import VMPO, MemoryPPO
from envs import make_vec_env
from envs.rules import ConfigError


@pytest.fixture(scope="module", params=[MemoryPPO, VMPO], ids=["ppo", "vmpo"])
def model(request):
    return request.param("MemoryPolicy", make_vec_env("CartPole-v1", 2, 0), n_steps=16, batch_size=32,
                         policy_kwargs={"backbone": "gru"})


@pytest.mark.parametrize("env, message", [
    (lambda: make_vec_env("Acrobot-v1", 2), r"^env: its observation space Box\(.*\) is not the observation space "
                                            r"this model was trained on, Box\(.*\)$"),
    (lambda: make_vec_env("CartPole-v1", 3), r"^env: 3 copies; this model steps 2 \(set_env keeps the number; "),
    (lambda: gym.make("CartPole-v1"), r"^env: 1 copy; this model steps 2 "),
    (lambda: None, r"^env=None: expected an env id, a gymnasium env or a VecEnv$"),
    (lambda: 5, r"^env=5: expected an env id, a gymnasium env or a VecEnv$"),
])
def test_set_env_names_an_env_this_model_cannot_step(model, env, message):
    with pytest.raises(ConfigError, match=message):
        model.set_env(env())


def test_set_env_takes_an_env_id_with_the_models_copies_and_learns_on(model):
    model.set_env("CartPole-v1")
    assert model.get_env().num_envs == 2
    model.learn(32)
    with pytest.raises(ConfigError, match="^force_reset='no': expected true or false$"):
        model.set_env("CartPole-v1", force_reset="no")


def test_set_parameters_names_parameters_that_are_not_this_policys(model, tmp_path):
    other = MemoryPPO("MemoryPolicy", "CartPole-v1", n_steps=16, policy_kwargs={"backbone": "mlp"})
    other.save(tmp_path / "mlp")
    for given, shown in (({"policy": {"x": 1}}, "{'policy': {'x': 1}}"), ({"nope": {}}, "{'nope': {}}"),
                         (tmp_path / "mlp", repr(str(tmp_path / "mlp.zip"))), (tmp_path, repr(str(tmp_path)))):
        with pytest.raises(ConfigError, match=rf"^load_path_or_dict={re.escape(shown)}: "):
            model.set_parameters(given)
    with pytest.raises(ConfigError, match="^exact_match='x': expected true or false$"):
        model.set_parameters(model.get_parameters(), exact_match="x")
    with pytest.raises(FileNotFoundError, match="^load_path_or_dict: no saved model there"):
        model.set_parameters(tmp_path / "missing.zip")


def test_set_parameters_takes_a_save_a_run_directory_or_get_parameters(model, tmp_path):
    model.save(tmp_path / "run" / "model.zip")
    model.set_parameters(tmp_path / "run")
    model.set_parameters(tmp_path / "run" / "model")
    model.set_parameters(model.get_parameters())


@pytest.mark.parametrize("first", ["torch", "numpy"])
def test_set_env_between_a_torch_and_a_numpy_vec_env_keeps_learning(first):
    made = {kind: make_vec_env("TMaze-v0", 2, seed=0, length=2, **({"vec_env": "torch"} if kind == "torch" else {}))
            for kind in ("torch", "numpy")}
    other = "numpy" if first == "torch" else "torch"
    model = MemoryPPO("MemoryPolicy", made[first], n_steps=16, batch_size=32, policy_kwargs={"backbone": "mlp"})
    model.learn(32)
    model.set_env(made[other])
    model.learn(32)
    assert model.num_timesteps == 32  # learn counts afresh by default, as in SB3
