"""The fixed pattern of the Sparse Transformer (Child et al. 2019), laid out in episode time: the pattern
against the paper's index sets, the backbone applying it, and bad options. The memory invariants run
for it with every other attention (``gtrxl-fixed`` in tests/test_backbones.py and tests/test_ppo.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import build_attention

from policies import make_backbone
from tests.conftest import inputs_seen_last


def paper_pattern(i: int, j: int, l: int, c: int) -> bool:  # noqa: E741 (the paper's symbols)
    """Query ``i`` sees key ``j ≤ i``: the same block of ``l``, or one of the last ``c`` cells of a block."""
    return j <= i and (j // l == i // l or j % l >= l - c)


@pytest.mark.parametrize(("block_length", "summary_width"), [(3, 1), (4, 2), (1, 1)])
def test_pattern_is_the_papers_index_sets_in_episode_time(block_length, summary_width):
    """Queries at episode times 7…11 with a window of 9 keys before them (mutations caught: the summary
    test ``>`` for ``>=``, blocks counted from the window's start instead of the episode's)."""
    attention = build_attention("fixed", 8, 2, 4, max_distance=9, block_length=block_length,
                                summary_width=summary_width)
    T, M = 5, 9
    clock = torch.arange(7, 7 + T).view(1, T)
    pattern = attention.pattern.episode_pattern(clock, M + T)[0]
    for q in range(T):
        i = 7 + q
        for key in range(M + T):
            j = i - (M + q - key)  # key slot → episode time (the slot M + q is the query itself)
            if j <= i:
                assert bool(pattern[q, key]) == paper_pattern(i, j, block_length, summary_width), (i, j)


def test_defaults_follow_the_square_root_of_the_memory():
    attention = build_attention("fixed", 8, 2, 4, max_distance=10)
    assert (attention.pattern.block_length, attention.pattern.summary_width) == (4, 1)


def test_the_backbone_sees_exactly_the_pattern():
    """One GTrXL layer, memory 9, blocks of 3: the output at episode time 9 moves with the inputs at
    times 2, 5, 8 (summary cells) and 9 (its block), and with no other (mutation caught: the backbone
    ignoring the pattern)."""
    torch.manual_seed(0)
    backbone = make_backbone("gtrxl", 3, d_model=16, n_heads=2, n_layers=1, memory_length=9, attention="fixed",
                             attention_options={"block_length": 3})
    assert inputs_seen_last(backbone, torch.randn(10, 1, 3)) == [2, 5, 8, 9]


def test_bad_options_name_the_valid_range():
    with pytest.raises(ValueError, match="summary_width must be in 1..3 \\(the block length\\), got 4"):
        build_attention("fixed", 8, 2, 4, max_distance=9, block_length=3, summary_width=4)
    with pytest.raises(ValueError, match=r"block_length=0: expected an integer >= 1"):
        build_attention("fixed", 8, 2, 4, max_distance=9, block_length=0)


def test_a_state_without_the_clock_is_refused():
    backbone = make_backbone("gtrxl", 3, d_model=16, n_heads=2, n_layers=1, memory_length=4, attention="fixed")
    state = backbone.initial_state(2)
    assert state.clock is not None
    state = state._replace(clock=None)
    with pytest.raises(ValueError, match="attention 'fixed' is laid out in episode time, but the state has no 'clock'"):
        backbone.forward_sequence(torch.randn(3, 2, 3), state, torch.zeros(3, 2, dtype=torch.bool))
