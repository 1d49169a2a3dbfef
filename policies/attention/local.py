"""Sliding-window (local) attention, registered as ``local``."""

from __future__ import annotations

import torch
from torch import Tensor

from policies.attention import key_distances, register_attention
from policies.relative_attention import RelativeMultiHeadAttention

LOCAL_FRACTION = 8
"""the default window is the memory length divided by this, at least one step"""


@register_attention("local")
class LocalAttention(RelativeMultiHeadAttention):
    """Transformer-XL relative attention restricted to the keys at most ``W = local_window`` steps
    back: the 1D local attention of the Image Transformer (Parmar et al. 2018, Sec. 3.2) and the
    sliding window of Longformer (Beltagy et al. 2020), as a band of the causal mask.

    The window only depends on the distance, so a rollout step and a training segment see the same
    keys (invariant 1). The memory still holds ``max_distance`` steps: :class:`~policies.knn_memory.KNNMemoryAttention`
    retrieves from the steps beyond the window.
    """

    complexity = "O(n·W), W the window"

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0,
                 local_window: int | None = None) -> None:
        super().__init__(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        if local_window is None:
            local_window = max(1, max_distance // LOCAL_FRACTION)
        if not 1 <= local_window <= max_distance:
            raise ValueError(f"local_window must be in 1..{max_distance} (the memory length), got {local_window}")
        self.local_window = local_window

    @property
    def reach(self) -> int:
        return self.local_window

    def near(self, n_queries: int, n_keys: int, device: torch.device) -> Tensor:
        """``[T, K]``: which keys of ``[memory; segment]`` lie within the window of each query."""
        return key_distances(n_queries, n_keys, device) <= self.local_window

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, position_terms: Tensor | None) -> Tensor:
        return super().attend(q, k, v, mask & self.near(q.shape[2], k.shape[2], q.device), position_terms)
