"""sb3-contrib RecurrentPPO parity: its LSTM policy options in engram's terms (and those refused, naming why), load
with them, the stateful ``evaluate_actions`` equal to the rollout, and memory carried through ``predict`` as
RecurrentPPO carries ``lstm_states``."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.evaluation import evaluate_policy

from agents import MemoryPPO
from policies.backbones.mlp import MLPMemoryless
from policies.policy import SB3_CONTRIB_OPTIONS
from tests.conftest import LogpGaps, small_options, tmaze

TINY = {"n_steps": 8, "batch_size": 16, "segment_length": 4, "n_epochs": 1, "seed": 0}


def model_with(backbone: str = "lstm", env: Any = None, **policy: Any) -> MemoryPPO:
    """A tiny learner on a short T-Maze with ``backbone`` and the policy options ``policy``."""
    return MemoryPPO("MemoryPolicy", env if env is not None else tmaze(n_envs=2),
                     policy_kwargs={"backbone": backbone, **policy}, **TINY)


LSTM = {"hidden_size": 8, "n_layers": 1}


@pytest.mark.parametrize("contrib,expected", [
    ({"lstm_hidden_size": 8, "n_lstm_layers": 2},
     {"backbone_kwargs": {"hidden_size": 8, "n_layers": 2}, "share_backbone": True, "critic_backbone": None}),
    ({"lstm_hidden_size": 8, "shared_lstm": True, "enable_critic_lstm": False},
     {"backbone_kwargs": LSTM, "share_backbone": True, "critic_backbone": None}),
    ({"lstm_hidden_size": 8, "enable_critic_lstm": True},
     {"share_backbone": False, "critic_backbone": "lstm", "critic_backbone_kwargs": LSTM}),
    ({"lstm_hidden_size": 8, "enable_critic_lstm": False},
     {"share_backbone": False, "critic_backbone": "mlp", "critic_backbone_kwargs": LSTM}),
], ids=["width-layers", "shared", "critic-lstm", "critic-without-memory"])
def test_sb3_contrib_lstm_options_map_onto_engrams(contrib, expected):
    """Saved in engram's terms only; the model trains with rollout equals training."""
    model = model_with(**contrib)
    saved = model.policy_kwargs
    assert {name: saved[name] for name in expected} == expected
    assert not set(SB3_CONTRIB_OPTIONS) & set(saved)
    assert model.policy.backbone.rnn.hidden_size == 8
    if expected["critic_backbone"] == "mlp":  # sb3-contrib's critic without memory
        assert isinstance(model.policy.critic_backbone, MLPMemoryless)
        assert model.policy.critic_backbone.memory_length == 0
    gaps = LogpGaps()
    model.learn(3 * 8 * 2, callback=gaps)
    assert max(gaps.gaps) < 1e-5


@pytest.mark.parametrize("backbone,policy,message", [
    ("gtrxl", {"lstm_hidden_size": 8}, "lstm_hidden_size: sb3-contrib's LSTM options apply with backbone='lstm', "
                                       "got backbone='gtrxl'"),
    ("lstm", {"shared_lstm": True, "enable_critic_lstm": True}, "choose one LSTM shared by actor and critic"),
    ("lstm", {"lstm_hidden_size": 8, "backbone_kwargs": {"hidden_size": 16}},
     "lstm_hidden_size sets hidden_size=8, which contradicts hidden_size=16"),
    ("lstm", {"enable_critic_lstm": True, "share_backbone": True},
     "enable_critic_lstm sets share_backbone=False, which contradicts share_backbone=True"),
    ("lstm", {"lstm_kwargs": {"dropout": 0.5}}, "lstm_kwargs=.*no dropout, which would break rollout equals training"),
])
def test_sb3_contrib_options_that_cannot_mean_the_same_are_refused(backbone, policy, message):
    with pytest.raises(ValueError, match=message):
        model_with(backbone, **policy)


def test_load_takes_the_sb3_contrib_options_the_model_was_trained_with(tmp_path):
    policy = {"lstm_hidden_size": 8, "enable_critic_lstm": False}
    model_with(**policy).save(tmp_path / "model")
    loaded = MemoryPPO.load(tmp_path / "model", policy_kwargs={"backbone": "lstm", **deepcopy(policy)})
    assert loaded.policy.critic_backbone_name == "mlp"
    with pytest.raises(ValueError, match="do not equal the stored policy kwargs"):
        MemoryPPO.load(tmp_path / "model", policy_kwargs={"backbone": "lstm", "lstm_hidden_size": 16})


def rollout(model: MemoryPPO, steps: int) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``steps`` steps of the model's policy from new episodes: observations and actions flattened time-major,
    their log-probabilities and values, and the episode starts ``[T, N]``."""
    env, policy = model.env, model.policy
    obs, state = env.reset(), policy.initial_state(env.num_envs)
    starts = np.ones(env.num_envs, dtype=bool)
    records: dict[str, list[torch.Tensor]] = {"obs": [], "actions": [], "log_prob": [], "values": [], "starts": []}
    for _ in range(steps):
        with torch.no_grad():
            step = policy(policy.obs_to_tensor(obs)[0], state, torch.as_tensor(starts))
        for name, value in (("obs", torch.as_tensor(obs)), ("actions", step.actions), ("log_prob", step.log_prob),
                            ("values", step.values.flatten()), ("starts", torch.as_tensor(starts))):
            records[name].append(value)
        obs, _, starts, _ = env.step(step.actions.numpy())
        state = step.state
    return (*(torch.cat(records[name]) for name in ("obs", "actions", "log_prob", "values")),
            torch.stack(records["starts"]))


@pytest.mark.parametrize("backbone,policy", [("lstm", {"enable_critic_lstm": True}),
                                             ("gtrxl", {"share_backbone": False}), ("ut-act", {})])
def test_evaluate_actions_recomputes_the_rollout_with_memory_and_gradients(backbone, policy):
    """Twelve steps, longer than the memory, with episode starts inside: the log-probabilities and values equal the
    rollout's; ``episode_starts`` may be ``[T, N]`` or flat; gradients reach the backbone."""
    model = model_with(backbone, **{"backbone_kwargs": small_options(backbone, d_model=8, n_heads=2, memory_length=4,
                                                                     max_steps=2, hidden_size=8), **policy})
    obs, actions, log_prob, values, starts = rollout(model, 12)
    assert starts[1:].any()
    policy_ = model.policy
    new_values, new_log_prob, entropy = policy_.evaluate_actions(obs, actions, policy_.initial_state(2), starts)
    assert new_values.shape == (24, 1) and new_log_prob.shape == entropy.shape == (24,)
    torch.testing.assert_close(new_log_prob, log_prob, atol=1e-5, rtol=0)
    torch.testing.assert_close(new_values.flatten(), values, atol=1e-5, rtol=0)
    flat = policy_.evaluate_actions(obs, actions, policy_.initial_state(2), starts.flatten())[1]
    torch.testing.assert_close(flat, new_log_prob)
    _, arrays = model.predict(np.zeros((2, 2), dtype=np.float32), episode_start=np.ones(2, dtype=bool))
    fresh = {name: {**entries, "valid": np.zeros_like(entries["valid"])} for name, entries in arrays.items()}
    from_predict = policy_.evaluate_actions(obs, actions, fresh, starts)[1]  # predict's dict of arrays is taken too
    torch.testing.assert_close(from_predict, new_log_prob)
    (new_log_prob.sum() + new_values.sum()).backward()
    assert all(p.grad is not None for p in policy_.backbone.parameters() if p.requires_grad)


def test_predict_carries_memory_like_lstm_states_and_episode_start_clears_it():
    """RecurrentPPO's loop (``state=None`` first, then the returned state and ``episode_start=dones``) with a
    critic LSTM: the state holds both memories as arrays, and an episode start equals a fresh state."""
    env = tmaze(n_envs=2, length=5)
    model = model_with(lstm_hidden_size=8, n_lstm_layers=2, enable_critic_lstm=True, env=env)
    obs, states, starts = env.reset(), None, np.ones(2, dtype=bool)
    for _ in range(3):
        actions, states = model.predict(obs, state=states, episode_start=starts, deterministic=True)
        obs, _, starts, _ = env.step(actions)
    assert set(states) == {"pi", "vf"} and states["pi"]["memory"].shape == (2, 1, 2, 2, 8)  # [N, M, (h, c), L, H]
    carried = model.predict(obs, state=states, episode_start=np.ones(2, dtype=bool), deterministic=True)
    fresh = model.predict(obs, state=None, episode_start=np.ones(2, dtype=bool), deterministic=True)
    np.testing.assert_array_equal(carried[0], fresh[0])
    for name in ("pi", "vf"):
        np.testing.assert_allclose(carried[1][name]["memory"], fresh[1][name]["memory"], atol=1e-6)
    mean, _ = evaluate_policy(model, env, n_eval_episodes=4)
    assert np.isfinite(mean)
