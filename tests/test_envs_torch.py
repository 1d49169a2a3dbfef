"""The torch tasks (envs/torch_tasks.py) equal the numpy cores step for step on the same seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from envs import CopyStreams, make_vec_env
from envs.torch_tasks import TORCH_TASKS, TorchStreams, make_torch_vec_env

KWARGS = {"TMaze-v0": {"length": 5}, "TMazeActive-v0": {"length": 4}, "MemoryChain-v0": {"length": 3, "num_bits": 3},
          "RepeatFirst-v0": {"length": 4}, "RepeatPrevious-v0": {"k": 2}, "CountRecall-v0": {"length": 5}}


def test_every_torch_task_is_checked():
    assert set(KWARGS) == set(TORCH_TASKS)


def test_streams_draw_the_numpy_words():
    numpy, torch_ = CopyStreams(5), TorchStreams(5, torch.device("cpu"))
    idx = np.arange(5)
    numpy.seed(idx, [0, 1, 2**40, None, 7])
    torch_.seed(idx, [0, 1, 2**40, None, 7])
    torch_.state[3] = int(numpy.state[3].astype(np.int64))  # the unseeded copy drew fresh entropy
    for high, size in ((2, None), (4, 3), (2**31 - 1, None), (7, 2)):
        mask = torch.tensor([True, False, True, True, False])
        expected = numpy.integers(np.array([0, 2, 3]), high, size)
        assert np.array_equal(torch_.integers(mask, high, size).numpy()[[0, 2, 3]], expected)
    assert np.array_equal(torch_.state.numpy(), numpy.state.astype(np.int64))


@pytest.mark.parametrize("env_id", sorted(KWARGS))
@pytest.mark.parametrize("max_episode_steps", [None, 3])
def test_torch_env_equals_numpy_env_step_for_step(env_id, max_episode_steps):
    kwargs = {**KWARGS[env_id], "max_episode_steps": max_episode_steps}
    numpy_env, torch_env = make_vec_env(env_id, 6, seed=3, **kwargs), make_torch_vec_env(env_id, 6, seed=3, **kwargs)
    assert np.array_equal(numpy_env.reset(), torch_env.reset().numpy())
    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(120):
        actions = rng.integers(0, numpy_env.action_space.n, 6)
        obs, rewards, dones, infos = numpy_env.step(actions)
        t_obs, t_rewards, t_dones, _ = torch_env.step(torch.as_tensor(actions))
        assert np.array_equal(obs, t_obs.numpy())
        assert np.array_equal(rewards, t_rewards.numpy()) and t_rewards.dtype == torch.float32
        assert np.array_equal(dones, t_dones.numpy())
        for i in np.flatnonzero(dones):
            assert np.array_equal(infos[i]["terminal_observation"], torch_env.terminal_obs[i].numpy())
            assert infos[i]["TimeLimit.truncated"] == bool(torch_env.truncated[i])
            episodes.append((infos[i]["episode"]["l"], infos[i]["is_success"], infos[i]["episode"]["r"]))
    popped = torch_env.pop_episodes()
    assert [(e["l"], e["is_success"]) for e in popped] == [e[:2] for e in episodes]
    assert np.allclose([e["r"] for e in popped], [e[2] for e in episodes], atol=1e-5)
    assert torch_env.pop_episodes() == []


def test_unknown_id_is_refused_by_name():
    with pytest.raises(ValueError, match="'CartPole-v1' has no torch implementation; those that do: TMaze-v0"):
        make_torch_vec_env("CartPole-v1", 2)
