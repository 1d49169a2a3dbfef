"""Training on a torch env (envs/torch_tasks.py), whose rollouts stay on the device, equals training on the numpy
env: same parameters, logs and episodes after the same steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import small_model

from agents.buffer import DeviceRolloutBuffer
from envs import make_vec_env
from envs.torch_tasks import make_torch_vec_env


@pytest.mark.parametrize("backbone,algo,env_id,kwargs", [
    ("gtrxl", "ppo", "TMaze-v0", {"length": 3}),
    ("gru", "ppo", "MemoryChain-v0", {"length": 3, "max_episode_steps": 3}),  # cut episodes are bootstrapped
    ("mlp", "vmpo", "RepeatPrevious-v0", {"k": 2}),
])
def test_device_rollouts_train_as_numpy_rollouts(backbone, algo, env_id, kwargs):
    numpy_model = small_model(backbone, make_vec_env(env_id, 4, seed=0, **kwargs), algo=algo)
    torch_model = small_model(backbone, make_torch_vec_env(env_id, 4, seed=0, **kwargs), algo=algo)
    assert isinstance(torch_model.rollout_buffer, DeviceRolloutBuffer)
    for model in (numpy_model, torch_model):
        torch.manual_seed(1)  # the same action samples and minibatches
        np.random.seed(1)
        model.learn(3 * 16 * 4)
    for (name, a), b in zip(numpy_model.policy.state_dict().items(), torch_model.policy.state_dict().values(),
                            strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    logged, device_logged = numpy_model.logger.name_to_value, torch_model.logger.name_to_value
    for key in ("train/loss", "train/value_loss", "train/grad_norm", "train/advantage_std"):
        assert device_logged[key] == pytest.approx(logged[key], abs=1e-6), key
    assert [e["l"] for e in torch_model.ep_info_buffer] == [e["l"] for e in numpy_model.ep_info_buffer]
    assert list(torch_model.ep_success_buffer) == list(numpy_model.ep_success_buffer)


def test_a_torch_env_resets_and_trains_again_after_learn():
    """A second ``learn`` (which resets the env) and a plain ``reset`` after training work on a torch env as on a
    numpy one (mutation caught: the env stepped inside inference mode, so its reset could not change its own running
    tensors in place)."""
    model = small_model("gru", make_torch_vec_env("TMaze-v0", 4, seed=0, length=3))
    model.learn(2 * 16 * 4)
    model.learn(2 * 16 * 4)
    obs = model.get_env().reset()
    assert obs.shape[0] == 4
