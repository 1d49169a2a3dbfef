"""Multi-head attention of a segment over ``[memory; segment]``.

Queries come from the segment only; keys and values from the memory (kept without
gradient by the caller) followed by the segment, as in Transformer-XL (Dai et al. 2019,
Sec. 3.2). A boolean mask says which keys each query may see; it always allows the query
itself, so no row is fully masked and ``-inf`` never turns into NaN.

Tensor layout: hidden states ``[B, T, D]``, per-head tensors ``[B, H, N, d_head]``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

KeysValues = tuple[Tensor, Tensor]


def rel_shift(scores: Tensor) -> Tensor:
    """The relative shift of Transformer-XL (Dai et al. 2019, App. B).

    ``scores[..., i, k]`` holds query ``i``'s term for the ``k``-th entry of a distance list
    ordered ``K-1, K-2, ..., 0``. The result holds, at ``[..., i, j]``, the term for distance
    ``(K - T) + i - j``: key ``j`` of ``[memory; segment]`` seen from query ``i``. Entries with
    ``j > i + K - T`` (keys in the future) are garbage and must be masked by the caller.
    """
    *lead, T, K = scores.shape
    padded = torch.cat([scores.new_zeros(*lead, T, 1), scores], dim=-1)  # [..., T, K+1]
    return padded.view(*lead, K + 1, T)[..., 1:, :].reshape(*lead, T, K)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention, ``softmax(q kᵀ / √d_head + bias) v``, over ``[memory; segment]``.

    Vaswani et al. (2017), with Transformer-XL's memory: ``q = h W_q``, ``k = h̃ W_k``,
    ``v = h̃ W_v`` where ``h̃ = [SG(m); h]``. Subclasses add a score bias (relative positions).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.scale = 1.0 / math.sqrt(d_head)
        self.dropout = dropout
        self.q_net = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.kv_net = nn.Linear(d_model, 2 * n_heads * d_head, bias=False)
        self.out_net = nn.Linear(n_heads * d_head, d_model, bias=False)
        for layer in (self.q_net, self.kv_net, self.out_net):
            nn.init.xavier_uniform_(layer.weight)

    def _heads(self, x: Tensor) -> Tensor:
        """``[B, N, H*d]`` → ``[B, H, N, d]``."""
        B, N, _ = x.shape
        return x.view(B, N, self.n_heads, self.d_head).transpose(1, 2)

    def keys_values(self, h: Tensor) -> KeysValues:
        """Keys and values of hidden states ``[B, N, D]``, each ``[B, H, N, d_head]``."""
        k, v = self.kv_net(h).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def position_keys(self, distances: Tensor) -> Tensor | None:
        """Per-head keys of the relative-distance table (none for content-only attention)."""
        return None

    def score_bias(self, q: Tensor, position_keys: Tensor | None, n_keys: int) -> Tensor | None:
        """An additive term for the ``[B, H, T, K]`` scores, already scaled (none here)."""
        return None

    def content_query(self, q: Tensor) -> Tensor:
        """The query that multiplies the content keys."""
        return q

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_keys: Tensor | None = None) -> tuple[Tensor, KeysValues]:
        """Attend from the segment ``h`` ``[B, T, D]`` to ``[memory; segment]``.

        Args:
            memory_kv: keys and values of the memory, ``[B, H, M, d_head]`` each.
            mask: ``[B, T, M + T]`` bool, ``True`` where query ``i`` may see key ``j``.
            position_keys: what :meth:`position_keys` returned for the distance table.

        Returns:
            The output ``[B, T, D]`` and the keys and values of ``[memory; segment]``
            ``[B, H, M + T, d_head]`` (a rollout step keeps their last ``M`` as its next cache).
        """
        q = self._heads(self.q_net(h))
        k_seg, v_seg = self.keys_values(h)
        k = torch.cat([memory_kv[0], k_seg], dim=2)
        v = torch.cat([memory_kv[1], v_seg], dim=2)
        bias = self.score_bias(q, position_keys, k.shape[2])
        mask = mask.unsqueeze(1)  # broadcast over heads
        attn_mask = mask if bias is None else bias.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(self.content_query(q), k, v, attn_mask=attn_mask,
                                             dropout_p=self.dropout if self.training else 0.0,
                                             scale=self.scale)
        B, _, T, _ = out.shape
        return self.out_net(out.transpose(1, 2).reshape(B, T, -1)), (k, v)


class RelativeMultiHeadAttention(MultiHeadAttention):
    """Transformer-XL relative attention (Dai et al. 2019, Sec. 3.3).

    ``A_ij = q_iᵀk_j + q_iᵀW_kR R_{i−j} + uᵀk_j + vᵀW_kR R_{i−j}`` — terms (a) content,
    (b) content-dependent position, (c) global content bias, (d) global position bias —
    computed as ``(q+u)ᵀk + rel_shift((q+v)ᵀ W_kR R)`` and scaled by ``1/√d_head``.
    ``R`` is the sinusoid table of distances, ``W_kR`` a bias-free projection, ``u`` and ``v`` (``position_bias``)
    learned per layer (``[H, d_head]``, initialised N(0, 0.02) as in the original code).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_head, dropout)
        self.r_net = nn.Linear(d_model, n_heads * d_head, bias=False)  # W_kR
        nn.init.xavier_uniform_(self.r_net.weight)
        self.u = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)
        self.position_bias = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)

    def position_keys(self, distances: Tensor) -> Tensor:
        """``W_kR R`` for the table ``[D_max + 1, d_model]`` (row ``d`` = distance ``d``), returned as
        ``[H, D_max + 1, d_head]`` in descending distance order ``D_max, ..., 0``: the order of the
        keys of a rollout step (``M`` memory slots, then the step itself)."""
        return self.r_net(distances.flip(0)).view(-1, self.n_heads, self.d_head).transpose(0, 1)

    def content_query(self, q: Tensor) -> Tensor:
        return q + self.u.unsqueeze(1)

    def score_bias(self, q: Tensor, position_keys: Tensor | None, n_keys: int) -> Tensor:
        if position_keys is None:
            raise ValueError("relative attention needs the projected distance table (position_keys)")
        max_distance = position_keys.shape[1] - 1
        if n_keys != max_distance + 1:
            # raw column k holds distance K-1-k, clamped: longer distances are masked anyway
            distance = (n_keys - 1 - torch.arange(n_keys, device=q.device)).clamp(max=max_distance)
            position_keys = position_keys[:, max_distance - distance]
        raw = torch.einsum("bhtd,hkd->bhtk", q + self.position_bias.unsqueeze(1), position_keys)  # [B, H, T, K]
        shifted = raw if q.shape[2] == 1 else rel_shift(raw)  # one query: already aligned
        return shifted * self.scale
