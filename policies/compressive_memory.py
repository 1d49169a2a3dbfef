"""Compressive memory (Rae et al. 2020) over the episode window, registered as ``compressive``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from policies.attention import KeysValues, key_distances, register_attention
from policies.relative_attention import RelativeMultiHeadAttention

DEFAULT_RATE = 4
"""``c``, the compression rate (steps per compressed slot); the paper used 3 and 4"""
FIFO_FRACTION = 5
"""the default FIFO part is the memory length divided by this: with ``c = 4``, a memory of 320 steps
holds 64 FIFO steps and 64 compressed slots"""


@register_attention("compressive")
class CompressiveAttention(RelativeMultiHeadAttention):
    """Transformer-XL attention over a FIFO memory plus a compressed memory (Rae et al. 2020, Sec. 3).

    A query sees the last ``n_m = fifo_length`` steps one by one, and the ``n_cm`` older blocks of
    ``c = compression_rate`` steps each as one slot, whose key and value are the mean of the block's
    (mean pooling, the paper's simplest compression function ``f_c``). Everything is one softmax over
    ``[compressed slots; FIFO; segment]``; a compressed slot scores ``(q+u)ᵀk̄ + (q+v)ᵀW_kR R_d`` with
    ``d`` the distance of its block's middle step, so with ``c = 1`` this is plain relative attention
    over ``n_m + n_cm`` steps. The window ``max_distance = n_m + c·n_cm`` bounds the reach.

    Where this differs from the paper, and why: blocks are cut relative to each query (block ``j``
    holds the steps ``n_m + j·c + 1 .. n_m + (j+1)·c`` back) instead of once when steps leave the FIFO.
    The compressed memory is then a function of the window of records, so a rollout step and a
    training segment see the same memories without new state, and the episode boundary clears it
    with the window (invariants 1 and 2). Pooling has no parameters, so the paper's
    attention-reconstruction loss, which trains ``f_c``, has nothing to train here; a learned
    (convolutional) ``f_c`` is not offered.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0,
                 fifo_length: int | None = None, compression_rate: int = DEFAULT_RATE) -> None:
        super().__init__(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        if fifo_length is None:
            fifo_length = max(1, max_distance // FIFO_FRACTION)
        if not 1 <= fifo_length <= max_distance:
            raise ValueError(f"fifo_length must be in 1..{max_distance} (the memory length), got {fifo_length}")
        if compression_rate < 1:
            raise ValueError(f"compression_rate must be >= 1, got {compression_rate}")
        self.fifo_length, self.compression_rate = fifo_length, compression_rate
        self.n_compressed = math.ceil((max_distance - fifo_length) / compression_rate)

    def slot_distances(self, device: torch.device) -> Tensor:
        """The distance each compressed slot's position term is taken at (its block's middle step), ``[n_cm]``."""
        c = self.compression_rate
        middle = self.fifo_length + torch.arange(self.n_compressed, device=device) * c + (c + 1) // 2
        return middle.clamp(max=self.max_distance)

    def compress(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Mean keys and values of every query's compressed slots, ``[B, H, T, n_cm, d]`` each, and which
        slots hold at least one visible step ``[B, 1, T, n_cm]``.

        The steps a query may see form one run of keys (the window's invalid slots are its oldest,
        an episode start hides everything before it), so a block's sum is a difference of prefix sums.
        """
        B, H, T, _ = q.shape
        K = k.shape[2]
        first = mask[:, 0].float().argmax(dim=-1)  # [B, T]: the oldest visible key of each query
        c = self.compression_rate
        query_index = torch.arange(T, device=q.device) + (K - T)  # the query's own key index
        j = torch.arange(self.n_compressed, device=q.device)
        newest = query_index.view(-1, 1) - self.fifo_length - j * c - 1  # [T, n_cm]: block j's newest key
        oldest = torch.maximum(newest - c + 1, first.unsqueeze(-1))  # [B, T, n_cm]
        newest = newest.expand(B, T, -1)
        counts = (newest - oldest + 1).clamp(min=0)  # visible steps per block
        visible = (counts > 0).unsqueeze(1)

        def block_means(x: Tensor) -> Tensor:
            prefix = F.pad(x.cumsum(dim=2), (0, 0, 1, 0))  # [B, H, K + 1, d]: prefix[i] = Σ_{<i}
            upper = (newest + 1).clamp(min=0).view(B, 1, -1, 1).expand(-1, H, -1, x.shape[-1])
            lower = oldest.clamp(min=0, max=K).view(B, 1, -1, 1).expand(-1, H, -1, x.shape[-1])
            sums = (prefix.gather(2, upper) - prefix.gather(2, lower)).view(B, H, T, -1, x.shape[-1])
            return sums / counts.clamp(min=1).to(x.dtype).view(B, 1, T, -1, 1)

        return block_means(k), block_means(v), visible

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_terms: Tensor | None = None) -> tuple[Tensor, KeysValues]:
        q, k, v = self.segment_qkv(h, memory_kv)
        T, K = q.shape[2], k.shape[2]
        mask = mask.unsqueeze(1)  # [B, 1, T, K]
        fifo = mask & (key_distances(T, K, q.device) <= self.fifo_length)
        content_query = self.content_query(q)
        scores = (content_query @ k.transpose(-2, -1)) * self.scale + self.score_bias(q, position_terms, K)
        k_c, v_c, visible = self.compress(q, k, v, mask)
        if position_terms is None:
            raise ValueError("compressive attention needs its position terms (W_kR R)")
        slot_terms = position_terms[:, self.max_distance - self.slot_distances(q.device)]  # [H, n_cm, d]
        slot_scores = (torch.einsum("bhtd,bhtjd->bhtj", content_query, k_c)
                       + torch.einsum("bhtd,hjd->bhtj", q + self.position_bias.unsqueeze(1), slot_terms)) * self.scale
        weights = torch.cat([slot_scores.masked_fill(~visible, float("-inf")),
                             scores.masked_fill(~fifo, float("-inf"))], dim=-1).softmax(dim=-1)
        weights = F.dropout(weights, self.dropout, self.training)
        n_cm = self.n_compressed
        out = torch.einsum("bhtj,bhtjd->bhtd", weights[..., :n_cm], v_c) + weights[..., n_cm:] @ v
        return self.merge(out), (k, v)
