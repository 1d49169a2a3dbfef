"""BigBird's sparse attention (Zaheer et al. 2020, ITC), causal and laid out in episode time: the pattern against
its index sets written out, the random block choice, the sliding window and full window it reduces to, the
backbone applying it, and bad options. The memory invariants run for it with every other attention
(``gtrxl-bigbird`` in tests/test_backbones.py, ``gtrxl-bigbird`` with default options in tests/test_ppo.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import build_attention

from policies import make_backbone
from policies.attention.bigbird import random_blocks
from policies.window import attention_mask
from tests.conftest import inputs_seen_last

T, M = 6, 30
"""queries and memory slots of the pattern tests"""
CLOCKS = torch.stack([torch.arange(3, 3 + T), torch.arange(40, 40 + T)])
"""episode times of the queries: early in the episode (few blocks yet), and 40 steps in"""


def chosen_blocks(b: int, r: int, seed: int) -> set[int]:
    """The earlier blocks the queries of block ``b`` see, from the member's own choice function."""
    return {c for c in random_blocks(torch.tensor(b), r, seed).tolist() if c >= 0}


def paper_pattern(i: int, j: int, W: int, g: int, l: int, r: int, seed: int) -> bool:  # noqa: E741
    """Query ``i`` sees key ``j ≤ i`` of the episode: at most ``W`` steps back, one of the first ``g`` steps, or in
    one of the ``r`` blocks of ``l`` steps chosen for ``i``'s block."""
    return 0 <= j <= i and (i - j <= W or j < g or j // l in chosen_blocks(i // l, r, seed))


@pytest.mark.parametrize(("W", "g", "l", "r", "seed"),
                         [(3, 1, 4, 2, 0), (1, 5, 3, 3, 7), (6, 0, 2, 1, 1), (2, 2, 5, 0, 0), (4, 3, 1, 4, 2)])
def test_pattern_is_the_papers_index_sets_in_episode_time(W, g, l, r, seed):  # noqa: E741
    """Queries at episode times 3…8 and 40…45 with 30 keys before them (mutations caught: the window ``<`` for
    ``<=``, the global steps ``<=`` for ``<``, blocks counted from the window's start instead of the episode's,
    the random blocks of the key's block instead of the query's)."""
    attention = build_attention("bigbird", 8, 2, 4, max_distance=M, window=W, global_steps=g, block_length=l,
                                 random_blocks=r, seed=seed)
    pattern = attention.pattern.episode_pattern(CLOCKS, M + T)
    for env, clock in enumerate(CLOCKS.tolist()):
        for q, i in enumerate(clock):
            for key in range(M + q + 1):  # the keys up to the query itself (slot M + q)
                j = i - (M + q - key)
                if j >= 0:  # keys before the episode come out either way (the episode mask hides them)
                    assert bool(pattern[env, q, key]) == paper_pattern(i, j, W, g, l, r, seed), (i, j)


@pytest.mark.parametrize("r", [0, 1, 2, 3, 5])
def test_random_blocks_are_distinct_earlier_and_a_function_of_the_block(r):
    """For blocks 0…199: ``min(r, b)`` distinct blocks below ``b`` (all of them when ``b ≤ r``), the other slots
    −1; the same whatever the tensor's shape or order, other blocks and other seeds choosing differently, and
    every earlier block drawn by some seed (mutations caught: a collision kept instead of taking ``j`` (repeats),
    always taking ``j`` (the ``r`` latest blocks), the draw ``mod j`` instead of ``mod (j + 1)`` (with ``r = 1``
    block ``b − 1`` is never drawn), the seed left out of the hash, draws from torch's global generator)."""
    blocks = torch.arange(200)
    chosen = random_blocks(blocks, r, seed=0)
    assert chosen.shape == (200, r)
    for b, row in enumerate(chosen.tolist()):  # block b is row b
        picked = [c for c in row if c >= 0]
        assert len(picked) == len(set(picked)) == min(r, b) and row.count(-1) == r - len(picked), (b, row)
        assert all(0 <= c < b for c in picked), (b, row)
        if b <= r:
            assert set(picked) == set(range(b)), (b, row)
    order = torch.randperm(200, generator=torch.Generator().manual_seed(0))
    assert torch.equal(random_blocks(blocks[order].view(20, 10), r, seed=0), chosen[order].view(20, 10, r))
    if r:
        far = blocks >= r + 2  # blocks with a real choice
        assert not torch.equal(random_blocks(blocks, r, seed=1)[far], chosen[far])
        steps_back = (blocks.unsqueeze(-1) - chosen)[far].tolist()
        assert len(set(map(tuple, steps_back))) > 1, "not the same blocks back for every block"
        drawn = {c for seed in range(100) for c in random_blocks(torch.tensor(12), r, seed).tolist()}
        assert drawn == set(range(12)), "every earlier block is drawn by some seed"


@pytest.mark.parametrize("window", [2, M])
def test_without_global_steps_and_random_blocks_it_is_the_sliding_window(window):
    """``g = r = 0``: with the memory mask the visibility is ``local``'s window of ``W`` steps, and with ``W = M``
    the whole window of ``relative``, also across an episode start inside the segment (mutations caught: the
    window ``<`` for ``<=``, the reach left at ``M`` without global steps or random blocks)."""
    attention = build_attention("bigbird", 8, 2, 4, max_distance=M, window=window, global_steps=0, random_blocks=0)
    starts = torch.zeros(2, T, dtype=torch.bool)
    starts[1, 3] = True  # env 1's episode restarts inside the segment
    mask = attention_mask(torch.ones(2, M, dtype=torch.bool), starts, M)
    clock = torch.stack([torch.arange(40, 40 + T), torch.tensor([50, 51, 52, 0, 1, 2])])
    sliding = build_attention("local", 8, 2, 4, max_distance=M, local_window=window).pattern.mask(T, M + T, mask)
    assert torch.equal(mask & attention.pattern.episode_pattern(clock, M + T), mask & sliding)
    assert attention.reach == window
    if window == M:
        assert torch.equal(mask & attention.pattern.episode_pattern(clock, M + T), mask)


def test_defaults_and_reach():
    """``W = max(1, ⌊M/8⌋)`` as ``local``, ``l = ⌈√M⌉``, one global step, two random blocks, seed 0; a global step
    or a random block reaches the whole memory (mutations caught: a default block one step short, the reach cut
    at the window with global steps)."""
    attention = build_attention("bigbird", 8, 2, 4, max_distance=10)
    assert (attention.pattern.window, attention.pattern.global_steps, attention.pattern.block_length) == (1, 1, 4)
    assert (attention.pattern.random_blocks, attention.pattern.seed, attention.reach) == (2, 0, 10)
    assert build_attention("bigbird", 8, 2, 4, max_distance=10, window=3, random_blocks=0).reach == 10
    assert build_attention("bigbird", 8, 2, 4, max_distance=10, window=3, global_steps=0).reach == 10


@pytest.mark.parametrize(("options", "seen"), [
    ({"global_steps": 3, "random_blocks": 1, "seed": 0}, [2, 6, 7, 8, 12, 13, 14]),
    ({"global_steps": 0, "random_blocks": 2, "seed": 5}, [2, 6, 7, 8, 12, 13, 14]),
], ids=["global", "random-cut"])
def test_the_backbone_sees_exactly_the_pattern(options, seen):
    """One GTrXL layer, memory 12, blocks of 3, window 2: the output at episode time 14 (block 4) moves with the
    inputs of its window (12–14) and its random block, and those of the global steps or random blocks that the
    memory window (keys from time 2 on) keeps, and with no other. ``global``: steps 0–2 global, only 2 in the
    memory; seed 0 chooses block 2 (6–8). ``random-cut``: seed 5 chooses blocks 2 and 0, whose steps 0 and 1 the
    memory cuts (mutations caught: the backbone ignoring the pattern, the global steps ``<=`` for ``<``, the
    window ``<`` for ``<=``)."""
    assert chosen_blocks(4, options["random_blocks"], options["seed"]) == ({2} if options["global_steps"] else {0, 2})
    torch.manual_seed(0)
    backbone = make_backbone("gtrxl", 3, d_model=16, n_heads=2, n_layers=1, memory_length=12, attention="bigbird",
                             attention_options={"window": 2, "block_length": 3, **options})
    assert inputs_seen_last(backbone, torch.randn(15, 1, 3)) == seen


@pytest.mark.parametrize(("options", "message"), [
    ({"window": 0}, "window=0: expected an integer >= 1"),
    ({"window": 10}, "window must be in 1..9 \\(the memory length\\), got 10"),
    ({"global_steps": -1}, "global_steps=-1: expected an integer >= 0"),
    ({"block_length": 0}, "block_length=0: expected an integer >= 1"),
    ({"random_blocks": -2}, "random_blocks=-2: expected an integer >= 0"),
    ({"seed": -1}, "seed=-1: expected an integer in \\[0, 4294967295\\]"),
    ({"seed": 2**32}, "seed=4294967296: expected an integer in \\[0, 4294967295\\]"),
])
def test_bad_options_name_the_value_and_the_valid_range(options, message):
    """Mutation caught: a check left out (a window beyond the memory)."""
    with pytest.raises(ValueError, match=message):
        build_attention("bigbird", 8, 2, 4, max_distance=9, **options)
