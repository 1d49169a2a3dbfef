"""Relative position representations of Shaw et al. (2018), registered as `shaw`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.attention.layer import Position
from policies.positions import POSITIONS
from policies.window import key_distances

CLIP = 16
"""``k``, the largest distinguished distance (the paper found no gain beyond 16); longer ones share it"""


@POSITIONS.register("shaw", "relative position representations on keys and values (Shaw et al. 2018)")
class ShawPosition(Position):
    """Self-attention with relative position representations (Shaw et al. 2018, Eq. 3–6):

        `e_ij = q_iᵀ(k_j + a^K_{w}) / √d`,  `z_i = Σ_j α_ij (v_j + a^V_{w})`,  `w = min(i − j, k)`,

    with learned `a^K`, `a^V` `[k + 1, d_head]` shared by the heads (causal attention: no negative
    distances), `k = min(16, M)`. The value term needs the attention weights, so the kernel computes its
    softmax itself instead of calling the fused one.
    """

    fused = False
    scores_distances = False
    contributes = True

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.clip = min(CLIP, max_distance)
        self.key_positions = nn.Parameter(torch.randn(self.clip + 1, d_head) * 0.02)  # a^K
        self.value_positions = nn.Parameter(torch.randn(self.clip + 1, d_head) * 0.02)  # a^V

    def buckets(self, n_queries: int, n_keys: int, like: Tensor) -> Tensor:
        """`[T, K, k + 1]`: the one-hot clipped distance `w` of every key from every query."""
        distance = key_distances(n_queries, n_keys, like.device).clamp(0, self.clip)
        return F.one_hot(distance, self.clip + 1).to(like.dtype)

    def score(self, q: Tensor, terms: Tensor | None, n_keys: int) -> Tensor:
        """`q_iᵀ a^K_{w(i,j)} / √d`, `[B, H, T, K]`."""
        buckets = self.buckets(q.shape[2], n_keys, q)
        return torch.einsum("bhtw,tkw->bhtk", q @ self.key_positions.T, buckets) * self.scale

    def values(self, weights: Tensor, terms: Tensor | None) -> Tensor:
        """`Σ_j α_ij a^V_{w(i,j)}`: the weights summed over the keys of each clipped distance, times `a^V`."""
        per_distance = torch.einsum("bhtk,tkw->bhtw", weights, self.buckets(*weights.shape[2:], weights))
        return per_distance @ self.value_positions
