"""Memorizing Transformer attention (Wu et al. 2022): a local window plus top-k retrieval from the
older part of the episode, mixed by a learned gate; registered as `knn`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from envs.rules import Count, CountOrNone
from policies.attention import ATTENTIONS
from policies.attention.layer import Kernel
from policies.attention.local import LocalPattern
from policies.options import checked

DEFAULT_TOP_K = 8
"""``k``, the number of older keys each query retrieves (the paper used 32 with far larger stores)"""


def top_k_keys(scores: Tensor, allowed: Tensor, k: int) -> Tensor:
    """The `k` allowed keys with the highest scores in every row of `scores` `[..., K]` (all
    allowed keys when there are at most `k`).

    Exactly `k`: ties are ranked by key position, older first (a stable sort).
    """
    if k >= scores.shape[-1]:
        return allowed
    masked = scores.detach().masked_fill(~allowed, float("-inf"))
    best = masked.sort(dim=-1, descending=True, stable=True).indices[..., :k]
    chosen = torch.zeros(masked.shape, dtype=torch.bool, device=masked.device).scatter_(-1, best, True)
    return allowed & chosen


@ATTENTIONS.register("knn", "a local window plus top-k retrieval of older steps, gated (Memorizing Transformers, "
                            "Wu et al. 2022)")
class KNNMemory(LocalPattern):
    """The kNN-augmented attention layer of Memorizing Transformers (Wu et al. 2022, Sec. 3).

    Each query attends twice. Locally, with the layer's position scheme, to the keys at most
    `W = local_window` steps back (the `local` pattern): output `V_c`. And to the `k` keys with the
    highest content scores `q·k/√d` among the older keys of the episode, `W < i − j ≤ max_distance`
    (exact kNN over the store, no position terms): output `V_m`. A learned scalar gate per head mixes them,
    `V_a = V_m ⊙ g + V_c ⊙ (1 − g)`, `g = σ(b_g)` (`b_g` initialised to 0). A query with no older key
    yet uses `V_c` alone.

    In engram the store is the episode memory (`memory_length` of the backbone): the per-step
    records of the last `max_distance` steps of the episode, which the episode boundary clears
    and no other env reads (the window rule of `policies.window`), so episode isolation holds by
    construction. The paper's store holds stale keys without gradient; here training recomputes
    them from the stored records like every other memory key.
    """

    complexity = "O(n·(W + k)) plus the k-NN search"

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 local_window: CountOrNone = None, top_k: Count = DEFAULT_TOP_K) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance,
                         local_window=local_window)
        self.top_k = top_k
        self.gate_logit = nn.Parameter(torch.zeros(n_heads))  # b_g

    @property
    def reach(self) -> int:
        return self.max_distance  # retrieval covers the whole store

    def gate(self) -> Tensor:
        """`g = σ(b_g)` per head, `[H]`: the weight of the retrieved memories."""
        return torch.sigmoid(self.gate_logit)

    def read(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kernel: Kernel) -> Tensor:
        near = self.mask(q.shape[2], k.shape[2], q)
        local = kernel(q, k, v, mask & near)  # V_c over the window, with the position scheme
        external = mask & ~near  # [B, 1, T, K]: the older keys of the episode
        has_memory = external.any(dim=-1, keepdim=True)  # [B, 1, T, 1]
        retrieved = top_k_keys(q @ k.transpose(-2, -1) * self.scale, external, self.top_k)
        memory = kernel(q, k, v, retrieved, position=None, terms=None)  # V_m: content scores only, 0 without any
        gate = self.gate().view(1, -1, 1, 1) * has_memory
        return local + gate * (memory - local)
