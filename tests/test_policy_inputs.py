"""The policy's SB3 methods beside ``predict`` (``get_distribution``, ``predict_values``, ``evaluate_actions``) take a
state as ``predict`` does (``None``: new episodes, where one step allows it) and NumPy inputs, and name an input
whose number of envs is not the observation's in a ``ValueError`` (not a torch shape error)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents import MemoryPPO
from envs import make_vec_env


@pytest.fixture(scope="module")
def policy():
    return MemoryPPO("MemoryPolicy", make_vec_env("CartPole-v1", 2, 0), n_steps=16, batch_size=32).policy


def test_one_step_methods_start_new_episodes_from_none_and_take_numpy(policy):
    obs, starts = np.zeros((2, 4), np.float32), np.zeros(2, bool)
    assert policy.predict_values(obs, None, starts).shape == (2, 1)
    distribution, state = policy.get_distribution(torch.zeros(2, 4), None, [False, True])
    assert distribution.distribution.logits.shape == (2, 2) and len(state.pi.valid) == 2


@pytest.mark.parametrize("method", ["predict_values", "get_distribution"])
def test_one_step_methods_name_a_state_or_starts_for_other_envs(policy, method):
    call = getattr(policy, method)
    with pytest.raises(ValueError, match=r"^state holds the memory of 3 env\(s\), the observation 2$"):
        call(torch.zeros(2, 4), policy.initial_state(3), torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^episode_starts holds 3 flag\(s\), the observation 2 env\(s\)$"):
        call(torch.zeros(2, 4), policy.initial_state(2), torch.zeros(3, dtype=torch.bool))


def test_evaluate_actions_names_a_missing_state_and_starts_that_are_not_one_per_step(policy):
    obs, actions, state = torch.zeros(8, 4), torch.zeros(8), policy.initial_state(2)
    with pytest.raises(ValueError, match=r"^state=None: expected the state the segments start from"):
        policy.evaluate_actions(obs, actions, None, torch.zeros(8))
    with pytest.raises(ValueError, match=r"^episode_starts holds 7 flag\(s\) and actions 8: expected one per step"):
        policy.evaluate_actions(obs, actions, state, torch.zeros(7))
    values, log_prob, entropy = policy.evaluate_actions(obs, actions, state, torch.zeros(8))
    assert values.shape == (8, 1) and log_prob.shape == entropy.shape == (8,)
