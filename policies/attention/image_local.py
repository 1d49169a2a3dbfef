"""Local attention of the Image Transformer (Parmar et al. 2018) in episode time, registered as `image-local`."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from envs.rules import CountOrNone, Range
from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern
from policies.options import Relation, checked
from policies.window import key_times, root_length

Block = tuple[int, int]
"""(rows, columns)"""
Margin = Annotated[int | None, Range(0, integer=True, optional=True)]
"""steps, rows or columns of a memory block beyond its query block (0: none), or ``None`` for the default"""
WHOLE_QUERY_BLOCKS = Relation(
    "width", ("width", "query_columns"), lambda o: o["width"] is None or o["width"] % (o["query_columns"] or 1) == 0,
    lambda o: f"a multiple of {o.show('query_columns')} (whole query blocks per row)")
"""a row of the image holds whole query blocks"""


def refuse(layout: str, **options: int | None) -> None:
    """Raise when `options` of the other layout are given: this one would ignore them."""
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)} only apply to {layout}")


def block_reach(width: int | None, query_block: Block, memory_margins: Block) -> int:
    """Steps from a query block's last query back to the first key of its memory block, the farthest over the
    image's blocks (the rightmost ones, whose memory block the image's right edge clips the least)."""
    (rows, columns), (up, side) = query_block, memory_margins
    if width is None:
        return columns - 1 + side
    return (rows - 1 + up) * width + columns - 1 + min(width - columns, side)


def row_blocks(max_distance: int, query_length: int | None, memory_extent: int | None) -> tuple[Block, Block]:
    """The 1D layout's query block and memory margins, `(1, l_q)` and `(0, l_m)`, from its options."""
    query_length = root_length(max_distance) if query_length is None else query_length
    memory_extent = max(0, max_distance + 1 - query_length) if memory_extent is None else memory_extent
    return (1, query_length), (0, memory_extent)


def image_blocks(max_distance: int, width: int, query_rows: int | None, query_columns: int | None,
                 memory_rows: int | None, memory_columns: int | None) -> tuple[Block, Block]:
    """The 2D layout's query block `(h_q, w_q)` and memory margins `(h_m, w_m)`, from its options."""
    query_block = (1 if query_rows is None else query_rows, 1 if query_columns is None else query_columns)
    memory_columns = 1 if memory_columns is None else memory_columns
    if memory_rows is None:  # the most rows above that keep the memory block inside the window
        memory_rows = max(0, (max_distance - block_reach(width, query_block, (0, memory_columns))) // width)
    return query_block, (memory_rows, memory_columns)


@ATTENTIONS.register("image-local", "the Image Transformer's query blocks and memory blocks, 1D or 2D raster, in "
                                    "episode time (Parmar et al. 2018)")
class ImageLocalPattern(Pattern):
    """Attention restricted to the local attention of the Image Transformer (Parmar et al. 2018,
    Sec. 3.2, its masked decoder): the queries are cut into *query blocks*, and every query of a block sees
    the keys of the block's *memory block* that precede it (`j ≤ i`, raster order).

    1D (`width` unset): query blocks of `l_q = query_length` consecutive steps, whose memory block adds
    the `l_m = memory_extent` steps before the block::

        i sees j  ⇔  ⌊i / l_q⌋ · l_q − l_m ≤ j ≤ i

    Defaults: `l_q = ⌈√M⌉` (`M = max_distance`, the memory length) and `l_m = max(0, M + 1 − l_q)`, the
    largest memory block the window holds (a block's last query then sees exactly `M` steps back).

    2D (`width = W`): step `t` is pixel `(r, c) = (⌊t / W⌋, t mod W)` of an image `W` steps wide,
    filled in raster order. Query blocks are rectangles of `h_q = query_rows` by `w_q = query_columns`
    pixels (`W` divisible by `w_q`); the memory block extends its query block `h_m = memory_rows` rows
    up and `w_m = memory_columns` columns left and right, clipped to the image. With `(r₀, c₀) =
    (⌊r_i / h_q⌋ · h_q, ⌊c_i / w_q⌋ · w_q)` the top-left pixel of query `i`'s block::

        i sees j  ⇔  j ≤ i,  r₀ − h_m ≤ r_j,  c₀ − w_m ≤ c_j ≤ c₀ + w_q − 1 + w_m

    (`r_j ≤ r₀ + h_q − 1` follows from `j ≤ i`). Defaults: `1 × 1` query blocks, `w_m = 1` and `h_m`
    the most rows the window holds (`⌊(M − 1) / W⌋` for these blocks): each step sees its causal
    neighbourhood three columns wide, as far up as the memory goes.

    1D is 2D on one unbounded row (`h_q = 1`, `h_m = 0`, `w_q = l_q`, `w_m = l_m`), which is how both are
    kept (`query_block` and `memory_margins`, `(rows, columns)`) and computed. As for `fixed`,
    `i` and `j` are the steps' **episode times**, so rollout steps and training segments see the same keys
    (step equals sequence), and the memory window still cuts a memory block's keys more than `M` steps back
    (`reach`). The pattern masks dense scores (no blocked kernel), so it saves no time here.
    """

    complexity = "O(n·(l_q + l_m)), query and memory blocks"
    default_position = "none"
    uses_episode_time = True

    @checked(WHOLE_QUERY_BLOCKS)
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 width: CountOrNone = None, query_length: CountOrNone = None, memory_extent: Margin = None,
                 query_rows: CountOrNone = None, query_columns: CountOrNone = None, memory_rows: Margin = None,
                 memory_columns: Margin = None) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.width = width
        if width is None:
            refuse("2D local attention (set width)", query_rows=query_rows, query_columns=query_columns,
                   memory_rows=memory_rows, memory_columns=memory_columns)
            self.query_block, self.memory_margins = row_blocks(max_distance, query_length, memory_extent)
        else:
            refuse("1D local attention (leave width unset)", query_length=query_length, memory_extent=memory_extent)
            self.query_block, self.memory_margins = image_blocks(max_distance, width, query_rows, query_columns,
                                                                 memory_rows, memory_columns)

    @property
    def reach(self) -> int:
        return min(self.max_distance, block_reach(self.width, self.query_block, self.memory_margins))

    def raster(self, t: Tensor) -> tuple[Tensor, Tensor]:
        """Row and column of episode times `t`: in the image `width` steps wide, or on one unbounded row (1D)."""
        if self.width is None:
            return torch.zeros_like(t), t
        return t.div(self.width, rounding_mode="floor"), t.remainder(self.width)

    def episode_pattern(self, clock: Tensor, n_keys: int) -> Tensor:
        """`[B, T, K]`: which keys of `[memory; segment]` lie in the memory block of the queries at episode
        times `clock` `[B, T]` (later keys and those of earlier episodes come out either way; the causal
        episode mask hides them)."""
        (rows, columns), (up, side) = self.query_block, self.memory_margins
        query_row, query_column = self.raster(clock.unsqueeze(-1))  # [B, T, 1]
        key_row, key_column = self.raster(key_times(clock, n_keys))  # [B, T, K]
        top = query_row.div(rows, rounding_mode="floor") * rows - up
        left = query_column.div(columns, rounding_mode="floor") * columns - side
        return (key_row >= top) & (key_column >= left) & (key_column < left + columns + 2 * side)
