"""The memory rollout buffer (agents/buffer.py), driven by hand without a learner: the window it rebuilds for a
step is the window that step received, its minibatches cover every step once in either order, and a bad order
is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agents.buffer import MemoryRolloutBuffer
from policies import make_backbone
from policies.policy import PolicyState
from policies.window import windows

N_STEPS, N_ENVS, M = 8, 3, 3


def filled_buffer() -> tuple[MemoryRolloutBuffer, list[dict[str, torch.Tensor]]]:
    """A buffer filled by a tiny GTrXL's steps (episode starts at step 0 everywhere, at step 4 for env 1 and at
    step 6 for env 2), and the state each step received, after its episode start was applied."""
    torch.manual_seed(0)
    backbone = make_backbone("gtrxl", 2, d_model=8, n_heads=2, n_layers=2, memory_length=M)
    buffer = MemoryRolloutBuffer(N_STEPS, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), device="cpu", n_envs=N_ENVS)
    starts = np.zeros((N_STEPS, N_ENVS), dtype=bool)
    starts[0], starts[4, 1], starts[6, 2] = True, True, True
    state = backbone.initial_state(N_ENVS)
    buffer.start_rollout(PolicyState(state))
    seen = []
    with torch.no_grad():
        for t in range(N_STEPS):
            obs = torch.randn(N_ENVS, 2)
            seen.append(state)
            _, state = backbone.step(obs, state, torch.as_tensor(starts[t]))
            buffer.add_records({"pi": state.memory[:, -1]})
            buffer.add(obs.numpy(), np.zeros((N_ENVS, 1)), np.zeros(N_ENVS), starts[t], torch.zeros(N_ENVS),
                       torch.zeros(N_ENVS))
    buffer.compute_returns_and_advantage(torch.zeros(N_ENVS), np.zeros(N_ENVS))
    return buffer, seen


def test_a_one_step_sample_gets_the_window_its_step_received():
    """Every step's stored window (memory and validity, before the step's own episode start) is rebuilt
    exactly from the history of records (mutation caught: the history's validity not cleared by a start)."""
    buffer, seen = filled_buffer()
    env, t = np.repeat(np.arange(N_ENVS), N_STEPS), np.tile(np.arange(N_STEPS), N_ENVS)
    state = buffer._segment_batch(env, t, 1).states.pi
    rebuilt = windows(state)
    for n, (e, step) in enumerate(zip(env, t, strict=True)):
        valid = seen[step].valid[e]
        assert torch.equal(state.valid[n], valid), (e, step)
        assert torch.equal(rebuilt[n][valid], seen[step].memory[e][valid]), (e, step)


@pytest.mark.parametrize("order", ["shuffled", "by-env"])
def test_minibatches_cover_every_step_once(order):
    buffer, _ = filled_buffer()
    observations = [batch.observations for batch in buffer.segments(6, 2, order=order)]
    assert [len(o) for o in observations] == [6] * (N_STEPS * N_ENVS // 6)
    stored = torch.as_tensor(buffer.observations.reshape(-1, 2))
    drawn = torch.cat(observations)
    assert sorted(map(tuple, drawn.tolist())) == sorted(map(tuple, stored.tolist()))


def test_an_unknown_order_names_the_valid_ones():
    buffer, _ = filled_buffer()
    with pytest.raises(ValueError, match="unknown minibatch order 'random'; valid orders: shuffled, by-env"):
        next(buffer.segments(6, 2, order="random"))
