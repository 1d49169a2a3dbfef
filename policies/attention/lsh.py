"""Reformer's locality-sensitive-hashing attention (Kitaev et al. 2020), registered as `lsh`."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from envs.rules import AnyOf, Count, OneOf, Range
from policies.attention import ATTENTIONS
from policies.attention.layer import Kernel, Pattern
from policies.options import checked
from policies.window import key_distances

DEFAULT_BUCKETS = 4
"""buckets per hashing round (a window of 64 steps holds about 16 per bucket)"""
DEFAULT_ROUNDS = 2
"""hashing rounds; a query sees a key that shares its bucket in any round"""
Buckets = Annotated[int, AnyOf((OneOf(lambda: [1]), Range(2, integer=True, multiple_of=2)))]
"""buckets per round: 1 (every key in one bucket), or an even number (the hash is an argmax over ``[xR; −xR]``)"""


@ATTENTIONS.register("lsh", "Reformer's shared-QK attention within LSH buckets (Kitaev et al. 2020)")
class LSHBuckets(Pattern):
    """LSH attention of the Reformer (Kitaev et al. 2020, Sec. 2): queries and keys share one
    projection, `k_j = q_j / ‖q_j‖` (shared-QK, `shared_qk`: the layer's key projection is the query's),
    and each round `r` hashes a vector `x` to
    `h_r(x) = argmax([xR_r ; −xR_r])` with a fixed random rotation `R_r` `[d_head, n_buckets/2]`
    per head (angular LSH). Query `i` attends to key `j` of its window only when `h_r(q_i) =
    h_r(k_j)` in some round, and not to itself unless no other key is left (with shared QK a
    position's own key would dominate its scores).

    The rotations are fixed buffers saved with the model; the hashes depend on content only, so a
    rollout step and a training segment see the same keys (step equals sequence). The bucket pattern masks
    dense scores here (no sorting into chunks), so it saves no time: it is the reference semantics.
    `n_buckets = 1` is full shared-QK attention.
    """

    complexity = "O(n log n)"
    default_position = "none"
    shared_qk = True

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 n_buckets: Buckets = DEFAULT_BUCKETS, n_rounds: Count = DEFAULT_ROUNDS) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.n_buckets, self.n_rounds = n_buckets, n_rounds
        self.register_buffer("rotations", torch.randn(n_rounds, n_heads, d_head, max(1, n_buckets // 2)))

    def buckets(self, x: Tensor) -> Tensor:
        """The bucket of every vector `x` `[B, H, N, d_head]` in every round: `[n_rounds, B, H, N]`."""
        if self.n_buckets == 1:
            return torch.zeros(self.n_rounds, *x.shape[:-1], dtype=torch.long, device=x.device)
        rotated = torch.einsum("bhnd,rhdc->rbhnc", x, self.rotations.to(x.dtype))
        return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)

    def read(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kernel: Kernel) -> Tensor:
        """The kernel over the keys that share a bucket with the query in some round, itself only when alone."""
        shared = (self.buckets(q).unsqueeze(-1) == self.buckets(k).unsqueeze(-2)).any(dim=0)  # [B, H, T, K]
        allowed = mask & shared
        itself = key_distances(q.shape[2], k.shape[2], q.device) == 0
        allowed = allowed & ~(itself & (allowed & ~itself).any(dim=-1, keepdim=True))
        return kernel(q, k, v, allowed)
