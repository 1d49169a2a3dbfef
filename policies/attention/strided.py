"""The strided pattern of the Sparse Transformer (Child et al. 2019), registered as ``strided``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from policies.attention import MultiHeadAttention, key_distances, register_attention


@register_attention("strided")
class StridedAttention(MultiHeadAttention):
    """Content attention restricted to the strided pattern of Child et al. (2019, Sec. 4.2):
    query ``i`` sees key ``j`` when ``i − j < l`` (the last ``l`` steps) or ``(i − j) mod l = 0``
    (every ``l``-th step before), with stride ``l = ⌈√max_distance⌉``, the paper's ``l ≈ √n``.

    Both conditions depend on the distance only, so rollout steps and training segments see the
    same keys (invariant 1); the memory window still bounds the distance by ``max_distance``.
    """

    complexity = "O(n·√n)"

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        self.stride = max(1, math.ceil(math.sqrt(max_distance)))

    def allowed(self, distance: Tensor) -> Tensor:
        """Whether the pattern lets a query see a key ``distance`` steps back."""
        return (distance < self.stride) | (distance % self.stride == 0)

    def score_bias(self, q: Tensor, position_terms: Tensor | None, n_keys: int) -> Tensor:
        distance = key_distances(q.shape[2], n_keys, q.device).clamp(min=0)  # future keys are masked
        blocked = torch.full((), float("-inf"), dtype=q.dtype, device=q.device)
        return torch.where(self.allowed(distance), torch.zeros((), dtype=q.dtype, device=q.device), blocked)
