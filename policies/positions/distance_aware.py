"""Distance-aware attention of the DA-Transformer (Wu et al. 2021), registered as ``distance-aware``."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from policies.attention import KeysValues, MultiHeadAttention, key_distances, register_attention

EPSILON = 1e-6
"""added to each row's normaliser: every clipped score of a row may be 0"""


@register_attention("distance-aware")
class DistanceAwareAttention(MultiHeadAttention):
    """Attention weights rescaled by the real distance (Wu et al. 2021, Sec. 3.2): per head ``h``,

        ``R̂_ij = (1 + e^{v_h}) / (1 + e^{v_h − w_h·|i − j|})``  (a learnable sigmoid of the weighted distance),
        ``A_ij = ReLU(q_iᵀk_j / √d) · R̂_ij``,  ``z_i = Σ_j A_ij v_j / Σ_j A_ij``.

    ``w_h < 0`` makes a head prefer nearby steps, ``w_h > 0`` distant ones (``R̂`` grows to at most
    ``1 + e^{v_h}``). ``w`` starts near 0 (``N(0, 0.02)``: almost plain ReLU attention, and ``v`` gets a
    gradient from the first step, which it would not at ``w = 0`` where ``R̂ ≡ 1``), ``v`` at 0. The weights
    are normalised by their sum, not a softmax, so this attention does not use the fused kernel.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        self.distance_weight = nn.Parameter(torch.randn(n_heads) * 0.02)  # w
        self.sigmoid_offset = nn.Parameter(torch.zeros(n_heads))  # v

    def rescale(self, distance: Tensor) -> Tensor:
        """``R̂`` per head for distances ``[T, K]``: ``[H, T, K]``."""
        weighted = self.distance_weight.view(-1, 1, 1) * distance
        offset = self.sigmoid_offset.view(-1, 1, 1)
        return (1 + offset.exp()) / (1 + (offset - weighted).exp())

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_terms: Tensor | None = None) -> tuple[Tensor, KeysValues]:
        q, k, v = self.segment_qkv(h, memory_kv)
        distance = key_distances(q.shape[2], k.shape[2], q.device).clamp(min=0).to(q.dtype)
        weights = (q @ k.transpose(-1, -2) * self.scale).relu() * self.rescale(distance) * mask.unsqueeze(1)
        weights = weights / (weights.sum(-1, keepdim=True) + EPSILON)
        weights = nn.functional.dropout(weights, self.dropout, self.training)
        return self.merge(weights @ v), (k, v)
