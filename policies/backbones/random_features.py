"""Positive orthogonal random features of the Performer (Choromanski et al. 2021, FAVOR+)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def orthogonal_gaussian(n_features: int, dim: int) -> Tensor:
    """`[n_features, dim]` rows drawn as blocks of orthogonal directions whose norms follow the
    chi distribution of Gaussian rows (FAVOR+'s orthogonal random features, Sec. 2.4)."""
    blocks = []
    for start in range(0, n_features, dim):
        q, r = torch.linalg.qr(torch.randn(dim, dim))
        q = q * torch.sign(torch.diagonal(r))  # the signs that make Q Haar-distributed (uniform directions)
        blocks.append(q.T[:min(dim, n_features - start)])
    norms = torch.randn(n_features, dim).norm(dim=1, keepdim=True)
    return torch.cat(blocks) * norms


class PositiveRandomFeatures(nn.Module):
    """The feature map `φ(x) = exp(ωᵀx̃ − ‖x̃‖²/2) / √m`, `x̃ = x / d^{1/4}`, with `m` orthogonal
    Gaussian `ω` per head, so that `E[φ(q)ᵀφ(k)] = exp(qᵀk/√d)`: linear attention with it estimates
    softmax attention (Choromanski et al. 2021, Lemma 1), the more closely the more features.

    The features are drawn once and kept (a buffer saved with the model): redrawing them, as the
    paper does in training, would invalidate the sums a recurrent memory has accumulated.
    """

    def __init__(self, n_heads: int, d_head: int, n_features: int) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.n_features = n_features
        self.register_buffer("omega", torch.stack([orthogonal_gaussian(n_features, d_head) for _ in range(n_heads)]))

    def forward(self, x: Tensor, query: bool = False) -> Tensor:
        """`x` `[B, H, N, d]` → `φ(x)` `[B, H, N, m]`. For queries, a factor that is constant
        per query cancels in the attention's ratio: their features are taken as `exp(ωᵀx̃ − max_ω ωᵀx̃)`,
        which keeps the normaliser away from zero (the Performer's stabiliser)."""
        x = x / x.shape[-1] ** 0.25
        projected = torch.einsum("bhnd,hmd->bhnm", x, self.omega.to(x.dtype))
        if query:
            return torch.exp(projected - projected.amax(dim=-1, keepdim=True))
        return torch.exp(projected - x.pow(2).sum(-1, keepdim=True) / 2) / math.sqrt(self.n_features)
