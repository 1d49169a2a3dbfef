"""The vanilla Transformer's absolute positions over the attention window, registered as ``absolute``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from policies.attention import KeysValues, MultiHeadAttention, key_distances, register_attention
from policies.positional import ABSOLUTE_ENCODINGS


@register_attention("absolute")
class AbsoluteAttention(MultiHeadAttention):
    """Attention over a window whose inputs carry absolute position encodings (Vaswani et al. 2017,
    Sec. 3.5): the window of a step is a sequence of ``M + 1`` positions, the oldest slot at ``0`` and
    the step itself at ``M``, and every input is ``h_j + P_p`` before its projections:

        ``q_i = (h_i + P_M) W_q``,  ``k_j = (h_j + P_{M−d}) W_k``,  ``v_j = (h_j + P_{M−d}) W_v``,

    with ``d = i − j`` the key's distance, ``P`` the ``encoding`` (``sinusoidal``, ``learned`` or ``axial``,
    :data:`policies.positional.ABSOLUTE_ENCODINGS`), added at every layer as in the sliding-window
    Transformers of RL baselines (CleanRL's PPO-TrXL). It is the control for the relative schemes.

    A key's window position ``M − d`` is a function of its distance, so the cached keys and values stay
    position-free (``h_j W_k``) and the terms ``P W_k``, ``P W_v``, ``P_M W_q`` are computed once per pass
    (:meth:`position_terms`): the score is ``(q_i + P_M W_q)ᵀ(k_j + P_{M−d} W_k)`` and the output adds
    ``Σ_j α_ij P_{M−d} W_v``. Absolute positions inside a sliding window are therefore relative ones
    in disguise; what sets them apart is that they enter the values and the query, and that ``P`` is not
    learned for distances (``sinusoidal`` has no parameter at all).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0,
                 encoding: str = "sinusoidal") -> None:
        super().__init__(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        if encoding not in ABSOLUTE_ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; valid encodings: {', '.join(ABSOLUTE_ENCODINGS)}")
        self.encoding = ABSOLUTE_ENCODINGS[encoding](d_model, max_distance + 1)

    def position_terms(self) -> Tensor:
        """``[P W_k; P W_v; P_M W_q]`` as ``[3, H, M + 1, d_head]`` over window positions ``0..M`` (the
        query term repeated along the positions)."""
        weight = self.q_net.weight
        table = self.encoding(torch.arange(self.max_distance + 1, device=weight.device)).to(weight.dtype)
        keys, values = self.keys_values(table.unsqueeze(0))  # [1, H, M + 1, d] each
        query = self.queries(table[-1:].unsqueeze(0)).expand_as(keys)
        return torch.cat([keys, values, query])

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_terms: Tensor | None = None) -> tuple[Tensor, KeysValues]:
        if position_terms is None:
            raise ValueError("absolute attention needs its position terms (P W_k, P W_v, P_M W_q)")
        q, k, v = self.segment_qkv(h, memory_kv)
        B, H, T, _ = q.shape
        K, M = k.shape[2], self.max_distance
        position_keys, position_values, position_query = position_terms[0], position_terms[1], position_terms[2, :, :1]
        window = (M - key_distances(T, K, q.device).clamp(0, M)).expand(B, H, T, K)  # window position of each key
        query = q + position_query  # the query stands at position M
        scores = (query @ k.transpose(-1, -2) + (query @ position_keys.transpose(-1, -2)).gather(-1, window))
        weights = (scores * self.scale).masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(dim=-1)
        weights = F.dropout(weights, self.dropout, self.training)
        per_position = weights.new_zeros(B, H, T, M + 1).scatter_add_(-1, window, weights)  # Σ α over each position
        return self.merge(weights @ v + per_position @ position_values), (k, v)
