"""BlockBERT's blockwise attention (Qiu et al. 2020), causal and in episode time, registered as `blockwise`."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from envs.rules import CountOrNone, Items, Range
from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern
from policies.options import checked
from policies.window import key_times

Shifts = Annotated[list[int] | None, Items(Range(0, integer=True), optional=True)]
"""the blocks back each head looks, one per head; ``None``: half the heads 0, half 1"""


@ATTENTIONS.register("blockwise", "BlockBERT's blocks, one block of episode time per head, shifted back "
                                  "(Qiu et al. 2020)")
class BlockwisePattern(Pattern):
    """Attention restricted, in each head, to one block of episode time: BlockBERT (Qiu et al. 2020,
    Sec. 3) cuts the sequence into blocks of `l = block_length` steps and gives each head `h` a permutation
    `π_h` of the blocks, so that the queries of block `b` attend only to the keys of block `π_h(b)`.
    Made causal for a stream, the permutations are shifts back, `π_h(b) = b − s_h`: in head `h` a query
    at episode time `i` sees the keys::

        A_h(i) = { j ≤ i : ⌊j / l⌋ = ⌊i / l⌋ − s_h }

    `s_h = 0` is the paper's identity permutation (its own block, up to itself), `s_h ≥ 1` the whole block
    `s_h` blocks back. `shifts`: one `s_h ≥ 0` per head; default: the first `⌈H/2⌉` heads 0, the others
    1, the paper's split of the heads between the identity and a shifted permutation. `block_length`:
    default `max(1, ⌊(M + 1) / (max_h s_h + 1)⌋)`, the longest block whose farthest key (`(s_h + 1)·l − 1`
    steps back) the memory window of `M = max_distance` steps holds.

    A head whose block has no visible key, early in the episode (block `⌊i / l⌋ − s_h` does not exist yet)
    or when the window cuts it all, reads nothing: its output is zero, not the NaN of a softmax over no key
    (the kernel's empty-row rule,
    `policies.attention.layer.attend`).

    The pattern differs per head (`episode_pattern` is `[B, H, T, K]`); as for `fixed`, `i` and
    `j` are **episode times**, so rollout steps and training segments see the same keys (step equals sequence). It
    masks dense scores (no blocked kernel), so it saves no time here.
    """

    complexity = "O(n²/b), b blocks"

    default_position = "none"
    uses_episode_time = True

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 block_length: CountOrNone = None, shifts: Shifts = None) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        shifts = [0] * ((n_heads + 1) // 2) + [1] * (n_heads // 2) if shifts is None else list(shifts)
        if len(shifts) != n_heads:
            raise ValueError(f"shifts must hold one shift per head ({n_heads} heads), got {len(shifts)}: {shifts}")
        if block_length is None:
            block_length = max(1, (max_distance + 1) // (max(shifts) + 1))
        self.block_length = block_length
        self.register_buffer("shifts", torch.tensor(shifts).view(-1, 1, 1), persistent=False)  # [H, 1, 1]

    @property
    def reach(self) -> int:
        return min(self.max_distance, (int(self.shifts.max()) + 1) * self.block_length - 1)

    def episode_pattern(self, clock: Tensor, n_keys: int) -> Tensor:
        """`[B, H, T, K]`: which keys of `[memory; segment]` lie in head `h`'s block for the queries at
        episode times `clock` `[B, T]` (later keys and those of earlier episodes come out either way; the
        causal episode mask hides them)."""
        l = self.block_length  # noqa: E741 (the paper's symbol)
        query_block = clock.div(l, rounding_mode="floor")[:, None, :, None]  # [B, 1, T, 1]
        key_block = key_times(clock, n_keys).div(l, rounding_mode="floor").unsqueeze(1)  # [B, 1, T, K]
        return key_block == query_block - self.shifts
