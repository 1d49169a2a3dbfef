"""The window operations (policies/window.py): the banded, causal, episode-aware mask, windows rebuilt by
index, the episode clock, and shared records."""

from __future__ import annotations

import pytest
import torch

from policies import make_backbone
from policies.window import (
    SharedWindows,
    Window,
    attention_mask,
    episode_clock,
    gather_windows,
    shared_windows,
    window_before,
    window_history,
    windows,
)

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def test_mask_is_banded_causal_and_episode_aware():
    valid = torch.ones(1, 3, dtype=torch.bool)
    starts = torch.tensor([[False, False, True, False]])
    mask = attention_mask(valid, starts, memory_length=3)[0].int()
    expected = torch.tensor([
        # memory m0 m1 m2 | segment s0 s1 s2 s3
        [1, 1, 1, 1, 0, 0, 0],  # s0 sees 3 memory slots and itself
        [0, 1, 1, 1, 1, 0, 0],  # s1: m0 is 4 steps back, outside the window
        [0, 0, 0, 0, 0, 1, 0],  # s2 starts an episode
        [0, 0, 0, 0, 0, 1, 1],
    ])
    assert torch.equal(mask, expected)


def test_window_before_rebuilds_states_by_index():
    memory = torch.arange(3.0).view(1, 3, 1)  # records of times -3, -2, -1
    valid = torch.tensor([[False, True, True]])
    records = torch.arange(10.0, 14.0).view(1, 4, 1)  # times 0..3
    starts = torch.tensor([[False, False, True, False]])
    windows, window_valid = window_before(memory, valid, records, starts, torch.arange(5))
    assert windows[0, :, :, 0].tolist() == [[0, 1, 2], [1, 2, 10], [2, 10, 11], [10, 11, 12], [11, 12, 13]]
    assert window_valid[0].int().tolist() == [[0, 1, 1], [1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 1, 1]]


def test_the_episode_clock_counts_from_each_start():
    """Env 0 continues an episode at time 5 and starts one at step 2; env 1 starts at step 0 and again at 3."""
    starts = torch.tensor([[False, False, True, False], [True, False, False, True]])
    assert episode_clock(torch.tensor([5, 9]), starts).tolist() == [[5, 6, 0, 1], [0, 1, 2, 0]]


def test_a_state_without_its_clock_is_refused():
    """An episode-time backbone never runs without the time: a silent fallback would drop it."""
    backbone = make_backbone("gtrxl", 3, d_model=8, n_heads=2, memory_length=4, episode_time="sinusoidal")
    state = backbone.initial_state(2)
    state = state._replace(clock=None)
    with pytest.raises(ValueError, match="encodes episode time.*no 'clock'"):
        backbone.step(torch.randn(2, 3), state, torch.ones(2, dtype=torch.bool))


def test_windows_that_share_little_are_handed_as_plain_windows():
    """Shared records only pay when windows overlap (``SHARED_RECORDS_MIN`` slots per distinct record)."""
    history = window_history(torch.randn(3, M, 2), torch.ones(3, M, dtype=torch.bool), torch.randn(3, 8, 2),
                             torch.zeros(3, 8, dtype=torch.bool))
    apart = shared_windows(history, torch.tensor([0, 1, 2]), torch.tensor([0, 4, 8]), M)
    steps = [0, 1, 2, 3] * 4  # 16 windows of 5 slots over 8 distinct records
    together = shared_windows(history, torch.zeros(16, dtype=torch.long), torch.tensor(steps), M)
    assert isinstance(apart, Window) and isinstance(together, SharedWindows)
    for state, (env, t) in ((apart, ([0, 1, 2], [0, 4, 8])), (together, ([0] * 16, steps))):
        memory, valid = gather_windows(history, torch.tensor(env), torch.tensor(t), M)
        torch.testing.assert_close(windows(state), memory)
        assert torch.equal(state.valid, valid)


def test_a_state_crosses_the_predict_boundary_as_a_dict_and_back():
    """`Window.as_dict` and `Window.from_dict` round-trip every field, the cache included; a cache whose envs
    hold different parameter generations is dropped (mutation caught: it kept as if current)."""
    backbone = make_backbone("gtrxl", 3, d_model=8, n_heads=2, n_layers=2, memory_length=4, episode_time="sinusoidal")
    with torch.no_grad():
        _, state = backbone.step(torch.randn(2, 3), backbone.initial_state(2), torch.ones(2, dtype=torch.bool))
    entries = state.as_dict()
    assert set(entries) == {"memory", "valid", "clock", "cache_keys_0", "cache_values_0", "cache_keys_1",
                            "cache_values_1", "cache_generation"}
    back = Window.from_dict(entries)
    for name in ("memory", "valid", "clock"):
        assert torch.equal(getattr(back, name), getattr(state, name))
    assert back.cache.generation == state.cache.generation
    assert all(torch.equal(a, b) for a, b in zip(back.cache.keys + back.cache.values,
                                                 state.cache.keys + state.cache.values, strict=True))
    mixed = {**entries, "cache_generation": torch.tensor([state.cache.generation, state.cache.generation + 1])}
    assert Window.from_dict(mixed).cache is None
    arrays = state.as_dict(lambda t: t.numpy())  # as `predict` returns it, and lifted back
    assert Window.from_dict(arrays, torch.from_numpy).cache.generation == state.cache.generation
    arrays["cache_generation"] = mixed["cache_generation"].numpy()
    assert Window.from_dict(arrays, torch.from_numpy).cache is None
    for dropped in ("cache_keys_0", "cache_values_1"):  # a depth's keys without its values, or values without keys
        assert Window.from_dict({k: v for k, v in entries.items() if k != dropped}).cache is None, dropped
