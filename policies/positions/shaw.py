"""Relative position representations of Shaw et al. (2018), registered as ``shaw``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.attention import KeysValues, MultiHeadAttention, key_distances, register_attention

CLIP = 16
"""``k``, the largest distinguished distance (the paper found no gain beyond 16); longer ones share it"""


@register_attention("shaw")
class ShawRelativeAttention(MultiHeadAttention):
    """Self-attention with relative position representations (Shaw et al. 2018, Eq. 3–6):

        ``e_ij = q_iᵀ(k_j + a^K_{w}) / √d``,  ``z_i = Σ_j α_ij (v_j + a^V_{w})``,  ``w = min(i − j, k)``,

    with learned ``a^K``, ``a^V`` ``[k + 1, d_head]`` shared by the heads (causal attention: no negative
    distances), ``k = min(16, M)``. The value term needs the attention weights, so this attention
    computes its softmax itself instead of calling the fused kernel.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        self.clip = min(CLIP, max_distance)
        self.key_positions = nn.Parameter(torch.randn(self.clip + 1, d_head) * 0.02)  # a^K
        self.value_positions = nn.Parameter(torch.randn(self.clip + 1, d_head) * 0.02)  # a^V

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_terms: Tensor | None = None) -> tuple[Tensor, KeysValues]:
        q, k, v = self.segment_qkv(h, memory_kv)
        T, K = q.shape[2], k.shape[2]
        bucket = F.one_hot(key_distances(T, K, q.device).clamp(0, self.clip), self.clip + 1).to(q.dtype)  # [T, K, k+1]
        position_scores = torch.einsum("bhtw,tkw->bhtk", q @ self.key_positions.T, bucket)  # q_iᵀ a^K_{w(i,j)}
        scores = (q @ k.transpose(-1, -2) + position_scores) * self.scale
        weights = scores.masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(dim=-1)
        weights = F.dropout(weights, self.dropout, self.training)
        per_distance = torch.einsum("bhtk,tkw->bhtw", weights, bucket)  # Σ_j α_ij over keys of each w
        out = weights @ v + per_distance @ self.value_positions
        return self.merge(out), (k, v)
