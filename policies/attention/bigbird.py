"""BigBird's sparse attention (Zaheer et al. 2020), causal and in episode time, registered as `bigbird`."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from envs.rules import CountOrNone, NonNegativeInt, Range
from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern
from policies.attention.local import local_window_length
from policies.options import checked
from policies.window import key_times, root_length

WORD = 0xFFFFFFFF
"""the hash works on 32-bit words, kept in int64 tensors (a word times the multiplier stays below 2⁶³)"""
MULTIPLIER = 0x45D9F3B
"""the multiplier of the integer hash (a bijection of 32-bit words)"""


def mix(x: Tensor) -> Tensor:
    """An integer hash of the low 32 bits of each element of `x` (int64): two xor-shift-multiply rounds and a
    final xor-shift, a bijection of 32-bit words that spreads every input bit over the output."""
    x = x & WORD
    for _ in range(2):
        x = ((x >> 16) ^ x) * MULTIPLIER & WORD
    return (x >> 16) ^ x


def random_blocks(block: Tensor, r: int, seed: int) -> Tensor:
    """`[..., r]`: `r` distinct earlier blocks `R(b) ⊆ {0, …, b − 1}` for each block `b` (−1 pads).

    Floyd's sampling with draws hashed from `(b, k, seed)`, so a block's choice is reproducible.
    """
    chosen = block.new_empty((*block.shape, 0))
    for k in range(r):
        j = block - r + k
        t = mix(mix(r * block + k) ^ seed) % (j + 1).clamp(min=1)
        taken = chosen.eq(t.unsqueeze(-1)).any(dim=-1)
        chosen = torch.cat([chosen, torch.where(j < 0, -1, torch.where(taken, j, t)).unsqueeze(-1)], dim=-1)
    return chosen


@ATTENTIONS.register("bigbird", "BigBird's window, global and random blocks, causal and in episode time "
                                "(Zaheer et al. 2020)")
class BigBirdPattern(Pattern):
    """BigBird's sparse pattern (Zaheer et al. 2020, Sec. 2, the ITC variant),
    made causal: a query at episode time `i` sees key `j ≤ i` when `j ∈ A(i)`::

        A(i) = { j : i − j ≤ W }                        window: the last W steps and itself
             ∪ { j : j < g }                            global: the episode's first g steps
             ∪ { j : ⌊j / l⌋ ∈ R(⌊i / l⌋) }             random: r earlier blocks of l steps

    `W = window` (default `max(1, ⌊M/8⌋)`, `local`'s window, `M = max_distance`); `g = global_steps`
    (default 1); `l = block_length` (default `⌈√M⌉`); `R(b)`: `r = random_blocks` (default 2) distinct
    blocks among `0, …, b − 1` (all of them when `b ≤ r`), drawn by `random_blocks` from a hash of the
    block and `seed` (default 0). With `g = r = 0` it is `local`'s sliding window.

    Causal adaptation: BigBird-ITC's global tokens attend to every token and every token to them; in a stream a
    token can only be read by later queries, so the global-to-local direction is left out and the `g` global
    tokens are the episode's first steps, read-only for every later step. The random blocks are earlier blocks
    only, and a query's own block counts through the window. The paper draws the random blocks per head; here one
    draw serves all heads.

    As for `fixed`, `i` and `j` are the steps' **episode times**, so rollout steps and training segments
    see the same keys (step equals sequence), and the memory window still cuts keys more than `M` steps back
    (`reach`). The pattern masks dense scores (no block-sparse kernel), so it saves no time here.
    """

    complexity = "O(n·(W + g + r·l))"

    default_position = "none"
    uses_episode_time = True

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 window: CountOrNone = None, global_steps: NonNegativeInt = 1, block_length: CountOrNone = None,
                 random_blocks: NonNegativeInt = 2, seed: Annotated[int, Range(0, WORD, integer=True)] = 0) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        window = local_window_length(max_distance, window, option="window")
        block_length = root_length(max_distance) if block_length is None else block_length
        self.window, self.global_steps, self.block_length = window, global_steps, block_length
        self.random_blocks, self.seed = random_blocks, seed

    @property
    def reach(self) -> int:
        """`M`: a global step or a random block can lie any number of steps back (`W` without either)."""
        return self.max_distance if self.global_steps or self.random_blocks else self.window

    def episode_pattern(self, clock: Tensor, n_keys: int) -> Tensor:
        """`[B, T, K]`: which keys of `[memory; segment]` lie in `A(i)` for the queries at episode times
        `clock` `[B, T]` (later keys and those of earlier episodes come out either way; the causal episode
        mask hides them)."""
        query, key = clock.unsqueeze(-1), key_times(clock, n_keys)  # [B, T, 1], [B, T, K]
        l = self.block_length  # noqa: E741 (the paper's symbol)
        chosen = random_blocks(clock.div(l, rounding_mode="floor"), self.random_blocks, self.seed)  # [B, T, r]
        random = key.div(l, rounding_mode="floor").unsqueeze(-1).eq(chosen.unsqueeze(-2)).any(dim=-1)
        return (query - key <= self.window) | (key < self.global_steps) | random
