"""Saliency, recall distance and attention maps (``experiments/saliency.py``): causal for every registered backbone,
the attention weights the layers really use, and on a trained GTrXL the decision reads the cue where a memoryless
MLP reads nothing before its own step (mutations caught: gradients taken through the whole batch so copies leak
into each other, rows and columns swapped, the weights of a layer recomputed without its position scheme)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from agents import MemoryPPO
from envs import make_vec_env
from experiments.saliency import episode_attention, recall_distance, saliency
from policies import BACKBONES
from tests.conftest import small_model, tmaze

T = 11


def episode(seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=2).astype(np.float32) for _ in range(T)], rng.integers(0, 4, T)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_saliency_is_causal_for_every_backbone(name):
    """``S[t, k] = 0`` exactly for every ``k > t``; the memoryless MLP reads only its own step; the others read back.
    Rows computed a few at a time equal rows computed all at once."""
    model = small_model(name, env=tmaze(n_envs=2, length=8))
    observations, actions = episode()
    S = saliency(model.policy, observations, actions, rows=4)
    assert S.shape == (T, T) and not np.triu(S, 1).any()
    np.testing.assert_allclose(S, saliency(model.policy, observations, actions, rows=T), rtol=1e-4, atol=1e-7)
    earlier = np.tril(S, -1)
    assert not earlier.any() if name == "mlp" else earlier[-1].any()
    assert np.diag(S).all()


class Cue(gym.Env):
    """A 2-float observation and an action space of any kind (its steps never end before the time limit)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def __init__(self, action_space: gym.Space) -> None:
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: object) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, False, False, {}


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiBinary(3),
                                   gym.spaces.Box(-1, 1, (2,), np.float32)], ids=lambda space: type(space).__name__)
def test_saliency_scores_the_actions_of_every_action_space(space):
    """Actions as the env takes them (a MultiBinary's int8 too) are scored, and the map stays causal."""
    env = DummyVecEnv([lambda: gym.wrappers.TimeLimit(Cue(space), 20)] * 2)
    model = MemoryPPO("MemoryPolicy", env, n_steps=16, batch_size=32, segment_length=4,
                      policy_kwargs={"backbone": "gru", "backbone_kwargs": {"hidden_size": 8}})
    observations = [Cue.observation_space.sample() for _ in range(T)]
    actions = np.stack([space.sample() for _ in range(T)])
    S = saliency(model.policy, observations, actions)
    assert S.shape == (T, T) and not np.triu(S, 1).any() and np.isfinite(S).all()


def test_recall_distance_weighs_lags_by_saliency():
    S = np.array([[1.0, 0, 0], [0, 0, 0], [3.0, 0, 1.0]])
    np.testing.assert_allclose(recall_distance(S), [0.0, np.nan, 1.5])


def test_attention_maps_are_the_weights_the_layers_use():
    """GTrXL with a memory shorter than the episode: each row is a distribution over the steps of its window, and
    the recomputed weights reproduced the layer's output (else they would have been left out)."""
    model = small_model("gtrxl", env=tmaze(n_envs=2, length=8), backbone_options={"n_layers": 2})
    maps = episode_attention(model.policy, episode()[0])
    assert [m.layer for m in maps] == ["layers.0.attn", "layers.1.attn"]
    M = model.policy.backbone.memory_length
    for record in maps:
        weights = record.weights.numpy()  # [H, T, T]
        assert weights.shape == (2, T, T)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        lag = np.arange(T)[:, None] - np.arange(T)[None, :]
        assert not weights[:, (lag < 0) | (lag > M)].any()


@pytest.mark.parametrize("attention", ["compressive", "lsh"])
def test_patterns_that_read_their_keys_their_own_way_are_left_out_saying_so(attention):
    model = small_model("gtrxl", env=tmaze(n_envs=2, length=8), backbone_options={"attention": attention})
    (record,) = episode_attention(model.policy, episode()[0])
    assert record.weights is None and record.why == (f"attention {attention!r} reads its keys its own way (its "
                                                     "`read`), which the map does not recompute")


def trained(backbone: str, options: dict, steps: int) -> MemoryPPO:
    """``configs/demo.yaml``'s learner on T-Maze-5: the goal side shown at step 0, chosen at the junction 5 later."""
    env = make_vec_env("TMaze-v0", n_envs=16, seed=0, length=5)
    model = MemoryPPO("MemoryPolicy", env, seed=0, n_steps=64, batch_size=256, n_epochs=4, segment_length=16,
                      learning_rate=1e-3, ent_coef=0.01, uniform_kl_coef=0.01,
                      policy_kwargs={"backbone": backbone, "backbone_kwargs": options})
    return model.learn(steps)


def decision_saliency(model: MemoryPPO, episodes: int = 8) -> tuple[np.ndarray, float]:
    """The saliency of the last step's decision (the goal chosen) over the steps before it, averaged over played
    episodes, and the share of them that reached the goal shown."""
    env = make_vec_env("TMaze-v0", n_envs=1, seed=7, length=5)
    rows, successes = [], 0
    for _ in range(episodes):
        obs, state, start, observations, actions = env.reset(), None, np.ones(1, dtype=bool), [], []
        while not observations or not start[0]:
            action, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
            observations.append(obs[0])
            actions.append(int(action[0]))
            obs, reward, start, _ = env.step(action)
        successes += int(reward[0] == 1)
        rows.append(saliency(model.policy, observations, np.array(actions))[-1][:-1])
    return np.mean(rows, axis=0), successes / episodes


@pytest.mark.slow
def test_a_trained_gtrxl_reads_the_cue_and_an_mlp_does_not():
    """About 10 s on one core: GTrXL trained 20k steps on T-Maze-5 reaches the goal shown, and its decision's
    saliency over the earlier steps peaks at the cue, step 0, above twice any corridor step's; a memoryless MLP's
    decision reads no earlier step at all."""
    torch.manual_seed(0)
    gtrxl = trained("gtrxl", {"memory_length": 16, "d_model": 32, "n_heads": 2, "n_layers": 1,
                              "episode_time": "none"}, 20_000)
    row, success = decision_saliency(gtrxl)
    assert success == 1.0 and row.argmax() == 0 and row[0] > 2 * row[1:].max(), (success, row)
    mlp = trained("mlp", {"hidden_size": 32}, 1_024)
    assert not decision_saliency(mlp, episodes=2)[0].any()
