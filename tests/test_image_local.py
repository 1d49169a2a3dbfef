"""The Image Transformer's local attention (Parmar et al. 2018), 1D and 2D, laid out in episode time: the
pattern against the paper's query and memory blocks written out as sets, the sliding window it reduces to,
the backbone applying it, and bad options. The memory invariants run for it with every other attention
(``gtrxl-image-local`` and ``gtrxl-image-local-2d`` in tests/test_backbones.py, tests/test_ppo.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import build_attention

from policies import make_backbone
from policies.attention.layer import MultiHeadAttention
from policies.window import attention_mask
from tests.conftest import inputs_seen_last

T, M = 6, 9
"""queries and memory slots of the pattern tests"""
FIRST = 7
"""the episode time of the first query"""


def memory_block_1d(i: int, l_q: int, l_m: int) -> set[int]:
    """Query ``i``'s query block of ``l_q`` steps and the ``l_m`` steps before it."""
    start = i // l_q * l_q
    return set(range(start - l_m, start + l_q))


def memory_block_2d(i: int, W: int, h_q: int, w_q: int, h_m: int, w_m: int) -> set[int]:
    """Query ``i``'s ``h_q × w_q`` query block extended ``h_m`` rows up and ``w_m`` columns left and right, clipped
    to the image ``W`` pixels wide, as raster positions."""
    top, left = i // W // h_q * h_q, i % W // w_q * w_q
    return {row * W + column for row in range(top - h_m, top + h_q)
            for column in range(max(0, left - w_m), min(W, left + w_q + w_m))}


def assert_pattern(attention: MultiHeadAttention, block: set[int] | None = None, **sizes: int) -> None:
    """Queries at episode times ``FIRST … FIRST + T − 1`` with ``M`` keys before them see exactly the keys
    ``j ≤ i`` of their memory block (``memory_block_1d`` or ``memory_block_2d`` called with ``sizes``)."""
    reference = memory_block_2d if "W" in sizes else memory_block_1d
    pattern = attention.pattern.episode_pattern(torch.arange(FIRST, FIRST + T).view(1, T), M + T)[0]
    for q in range(T):
        i = FIRST + q
        block = reference(i, **sizes)
        for key in range(M + q + 1):  # the keys up to the query itself (slot M + q)
            j = i - (M + q - key)
            assert bool(pattern[q, key]) == (j in block), (i, j)


@pytest.mark.parametrize(("l_q", "l_m"), [(3, 2), (4, 0), (1, 3), (5, 7)])
def test_1d_pattern_is_the_papers_query_and_memory_blocks(l_q, l_m):
    """Mutations caught: query blocks counted from the segment's start instead of the episode's, a memory block
    one step short (``>`` for ``>=``), the memory extent counted from the query instead of its block."""
    attention = build_attention("image-local", 8, 2, 4, max_distance=M, query_length=l_q, memory_extent=l_m)
    assert_pattern(attention, l_q=l_q, l_m=l_m)


@pytest.mark.parametrize(("W", "h_q", "w_q", "h_m", "w_m"),
                         [(4, 1, 1, 1, 1), (4, 2, 2, 1, 1), (6, 1, 3, 0, 2), (3, 2, 3, 1, 0), (5, 1, 1, 2, 0)])
def test_2d_pattern_is_the_papers_query_and_memory_blocks(W, h_q, w_q, h_m, w_m):
    """Rectangles at every position of the image, clipped at its left and right edges (mutations caught: the right
    margin left out, the memory block extended from the query's own row or column instead of its block's)."""
    attention = build_attention("image-local", 8, 2, 4, max_distance=M, width=W, query_rows=h_q, query_columns=w_q,
                                    memory_rows=h_m, memory_columns=w_m)
    assert_pattern(attention, W=W, h_q=h_q, w_q=w_q, h_m=h_m, w_m=w_m)


@pytest.mark.parametrize("window", [2, M])
def test_query_blocks_of_one_step_are_the_sliding_window(window):
    """``l_q = 1``, ``l_m = w``: with the memory mask the visibility is ``local``'s window of ``w`` steps, and with
    ``w = M`` the whole window of ``relative`` (mutation caught: a memory block one step longer)."""
    attention = build_attention("image-local", 8, 2, 4, max_distance=M, query_length=1, memory_extent=window)
    starts = torch.zeros(2, T, dtype=torch.bool)
    starts[1, 3] = True  # env 1's episode restarts inside the segment
    mask = attention_mask(torch.ones(2, M, dtype=torch.bool), starts, M)
    clock = torch.stack([torch.arange(FIRST, FIRST + T), torch.tensor([20, 21, 22, 0, 1, 2])])
    sliding = build_attention("local", 8, 2, 4, max_distance=M, local_window=window).pattern.mask(T, M + T, mask)
    assert torch.equal(mask & attention.pattern.episode_pattern(clock, M + T), mask & sliding)
    if window == M:
        assert torch.equal(mask & attention.pattern.episode_pattern(clock, M + T), mask)


def test_defaults_and_reach():
    """1D: ``l_q = ⌈√M⌉``, ``l_m = M + 1 − l_q``; 2D: ``1 × 1`` blocks, one column each side, the rows the window
    holds; either reaches exactly ``M`` steps back, and the memory length cuts longer memory blocks (mutations
    caught: a default ``l_m`` one step short, the reach not cut at the memory length)."""
    one_d = build_attention("image-local", 8, 2, 4, max_distance=10)
    assert (one_d.pattern.query_block, one_d.pattern.memory_margins, one_d.reach) == ((1, 4), (0, 7), 10)
    two_d = build_attention("image-local", 8, 2, 4, max_distance=10, width=3)
    assert (two_d.pattern.query_block, two_d.pattern.memory_margins, two_d.reach) == ((1, 1), (3, 1), 10)
    attention = build_attention("image-local", 8, 2, 4, max_distance=10, width=4, memory_rows=2, memory_columns=2)
    assert attention.reach == 10
    assert build_attention("image-local", 8, 2, 4, max_distance=10, width=4, memory_rows=1, memory_columns=0).reach == 4


@pytest.mark.parametrize(("options", "memory", "query_time", "seen"), [
    ({"query_length": 3, "memory_extent": 4}, 9, 10, [5, 6, 7, 8, 9, 10]),
    ({"width": 4, "query_rows": 2, "query_columns": 2, "memory_rows": 1, "memory_columns": 1}, 12, 12,
     [4, 5, 6, 8, 9, 10, 12]),
], ids=["1d", "2d"])
def test_the_backbone_sees_exactly_the_pattern(options, memory, query_time, seen):
    """One GTrXL layer; the output at one episode time moves with the inputs of its memory block and no other.
    1D: time 10's block is 9–11, its memory block starts 4 steps earlier, at 5 (a sliding window of 4 would
    start at 6). 2D, 4 wide: time 12 is pixel (3, 0) of the 2 × 2 block at rows 2–3, columns 0–1, whose memory
    block spans rows 1–3 and columns 0–2 (mutations caught: the backbone ignoring the pattern, a memory block one
    step short, the top row counted from the query's own row, the right margin left out)."""
    torch.manual_seed(0)
    backbone = make_backbone("gtrxl", 3, d_model=16, n_heads=2, n_layers=1, memory_length=memory,
                             attention="image-local", attention_options=options)
    assert inputs_seen_last(backbone, torch.randn(query_time + 1, 1, 3)) == seen


@pytest.mark.parametrize(("options", "message"), [
    ({"query_length": 0}, "query_length=0: expected an integer >= 1"),
    ({"memory_extent": -1}, "memory_extent=-1: expected an integer >= 0"),
    ({"width": 0}, "width=0: expected an integer >= 1"),
    ({"width": 5, "query_columns": 2}, "width=5: expected a multiple of query_columns=2"),
    ({"width": 4, "query_rows": 0}, "query_rows=0: expected an integer >= 1"),
    ({"width": 4, "memory_rows": -2}, "memory_rows=-2: expected an integer >= 0"),
    ({"width": 4, "memory_columns": -1}, "memory_columns=-1: expected an integer >= 0"),
    ({"query_rows": 2}, "query_rows only apply to 2D local attention \\(set width\\)"),
    ({"width": 4, "query_length": 2, "memory_extent": 1},
     "query_length, memory_extent only apply to 1D local attention \\(leave width unset\\)"),
])
def test_bad_options_name_the_value_and_the_valid_range(options, message):
    """Mutation caught: a check left out (``query_columns`` not dividing ``width``)."""
    with pytest.raises(ValueError, match=message):
        build_attention("image-local", 8, 2, 4, max_distance=9, **options)
