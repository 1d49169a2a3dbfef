"""Sliding-window (local) attention, registered as `local`."""

from __future__ import annotations

from torch import Tensor

from envs.rules import CountOrNone
from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern
from policies.options import checked
from policies.window import key_distances

LOCAL_FRACTION = 8
"""the default window is the memory length divided by this, at least one step"""


def local_window_length(max_distance: int, local_window: int | None, option: str = "local_window") -> int:
    """The window `W` a local band keeps: `local_window`, by default `max(1, ⌊M/8⌋)`, within `1..M`."""
    window = max(1, max_distance // LOCAL_FRACTION) if local_window is None else local_window
    if not 1 <= window <= max_distance:
        raise ValueError(f"{option} must be in 1..{max_distance} (the memory length), got {window}")
    return window


@ATTENTIONS.register("local", "a sliding window of the last W steps (Parmar et al. 2018; Beltagy et al. 2020)")
class LocalPattern(Pattern):
    """The keys at most `W = local_window` steps back: the 1D local attention of the Image Transformer
    (Parmar et al. 2018, Sec. 3.2) and the sliding window of Longformer (Beltagy et al. 2020), as a band of
    the causal mask.

    The window only depends on the distance, so a rollout step and a training segment see the same
    keys (step equals sequence). The memory still holds `max_distance` steps:
    `KNNMemory` retrieves from the steps beyond the window.
    """

    complexity = "O(n·W), W the window"

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 local_window: CountOrNone = None) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.local_window = local_window_length(max_distance, local_window)

    @property
    def reach(self) -> int:
        return self.local_window

    def mask(self, n_queries: int, n_keys: int, like: Tensor) -> Tensor:
        """`[T, K]`: which keys of `[memory; segment]` lie within the window of each query."""
        return key_distances(n_queries, n_keys, like.device) <= self.local_window
