"""The Sparse Transformer's fixed pattern (Child et al. 2019) in episode time, registered as `fixed`."""

from __future__ import annotations

from torch import Tensor

from envs.rules import Count, CountOrNone
from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern
from policies.options import checked
from policies.window import key_times, root_length


@ATTENTIONS.register("fixed", "the Sparse Transformer's fixed pattern in episode time: own block and summary cells "
                              "(Child et al. 2019)")
class FixedPattern(Pattern):
    """The fixed pattern of Child et al. (2019, Sec. 4.2, merged into
    one head): a query at position `i` sees key `j ≤ i` when

    - `⌊j / l⌋ = ⌊i / l⌋` (`A⁽¹⁾`: the keys of its own block of `l` steps), or
    - `j mod l ∈ {l − c, …, l − 1}` (`A⁽²⁾`: the last `c` steps of every block, the "summary"
      cells that carry a block's content to every later query),

    with `l = block_length` (default `⌈√max_distance⌉`, the paper's `l ≈ √n`) and
    `c = summary_width` (default 1; the paper uses 8–32 with `l` = 128–256).

    Unlike the strided pattern, blocks are fixed in absolute position, so the positions here are the
    steps' **episode time** (a document's token index in the language model): the backbone keeps the
    episode clock in its state for this attention, as for `episode_time` encodings, and a key
    `d` steps before a query at episode time `t` has time `t − d`. Rollout steps and training
    segments therefore see the same keys (step equals sequence), whatever their window's position in the
    rollout. The memory window still bounds the distance by `max_distance`.
    """

    complexity = "O(n·√n)"

    default_position = "none"
    uses_episode_time = True

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 block_length: CountOrNone = None, summary_width: Count = 1) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        if block_length is None:
            block_length = root_length(max_distance)
        if not 1 <= summary_width <= block_length:
            raise ValueError(f"summary_width must be in 1..{block_length} (the block length), got {summary_width}")
        self.block_length, self.summary_width = block_length, summary_width

    def episode_pattern(self, clock: Tensor, n_keys: int) -> Tensor:
        """`[B, T, K]`: which keys of `[memory; segment]` the queries at episode times `clock`
        `[B, T]` may see (keys of earlier episodes come out either way; the episode mask hides them)."""
        query, key = clock.unsqueeze(-1), key_times(clock, n_keys)  # [B, T, 1], [B, T, K]
        l = self.block_length  # noqa: E741 (the paper's symbol)
        same_block = key.div(l, rounding_mode="floor") == query.div(l, rounding_mode="floor")
        summary = key.remainder(l) >= l - self.summary_width
        return same_block | summary
