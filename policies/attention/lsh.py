"""Reformer's locality-sensitive-hashing attention (Kitaev et al. 2020), registered as ``lsh``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.attention import KeysValues, MultiHeadAttention, key_distances, register_attention

DEFAULT_BUCKETS = 4
"""buckets per hashing round (a window of 64 steps holds about 16 per bucket)"""
DEFAULT_ROUNDS = 2
"""hashing rounds; a query sees a key that shares its bucket in any round"""


@register_attention("lsh")
class LSHAttention(MultiHeadAttention):
    """LSH attention of the Reformer (Kitaev et al. 2020, Sec. 2): queries and keys share one
    projection, ``k_j = q_j / ‖q_j‖`` (shared-QK), and each round ``r`` hashes a vector ``x`` to
    ``h_r(x) = argmax([xR_r ; −xR_r])`` with a fixed random rotation ``R_r`` ``[d_head, n_buckets/2]``
    per head (angular LSH). Query ``i`` attends to key ``j`` of its window only when ``h_r(q_i) =
    h_r(k_j)`` in some round, and not to itself unless no other key is left (with shared QK a
    position's own key would dominate its scores).

    The rotations are fixed buffers saved with the model; the hashes depend on content only, so a
    rollout step and a training segment see the same keys (invariant 1). The bucket pattern masks
    dense scores here (no sorting into chunks), so it saves no time: it is the reference semantics.
    ``n_buckets = 1`` is full shared-QK attention.
    """

    complexity = "O(n log n)"

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0,
                 n_buckets: int = DEFAULT_BUCKETS, n_rounds: int = DEFAULT_ROUNDS) -> None:
        super().__init__(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        if n_buckets != 1 and (n_buckets < 2 or n_buckets % 2):
            raise ValueError(f"n_buckets must be 1 or an even number >= 2, got {n_buckets}")
        if n_rounds < 1:
            raise ValueError(f"n_rounds must be >= 1, got {n_rounds}")
        self.n_buckets, self.n_rounds = n_buckets, n_rounds
        self.kv_net = nn.Linear(d_model, n_heads * d_head, bias=False)  # values only: keys are the queries
        nn.init.xavier_uniform_(self.kv_net.weight)
        self.register_buffer("rotations", torch.randn(n_rounds, n_heads, d_head, max(1, n_buckets // 2)))

    def keys_values(self, h: Tensor) -> KeysValues:
        return F.normalize(self.queries(h), dim=-1), self._heads(self.kv_net(h))

    def buckets(self, x: Tensor) -> Tensor:
        """The bucket of every vector ``x`` ``[B, H, N, d_head]`` in every round: ``[n_rounds, B, H, N]``."""
        if self.n_buckets == 1:
            return torch.zeros(self.n_rounds, *x.shape[:-1], dtype=torch.long, device=x.device)
        rotated = torch.einsum("bhnd,rhdc->rbhnc", x, self.rotations.to(x.dtype))
        return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, position_terms: Tensor | None) -> Tensor:
        shared = (self.buckets(q).unsqueeze(-1) == self.buckets(k).unsqueeze(-2)).any(dim=0)  # [B, H, T, K]
        allowed = mask & shared
        itself = key_distances(q.shape[2], k.shape[2], q.device) == 0
        allowed = allowed & ~(itself & (allowed & ~itself).any(dim=-1, keepdim=True))
        return super().attend(q, k, v, allowed, position_terms)
