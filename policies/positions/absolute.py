"""The vanilla Transformer's absolute positions over the attention window, registered as `absolute`."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from envs.rules import OneOf
from policies.attention.layer import HeadProjections, Position
from policies.options import checked
from policies.positions import POSITIONS
from policies.positions.encodings import ABSOLUTE_ENCODINGS
from policies.window import key_distances


@POSITIONS.register("absolute", "absolute encodings of the window positions, sinusoidal, learned or axial "
                                "(Vaswani et al. 2017)")
class AbsolutePosition(Position):
    """Attention over a window whose inputs carry absolute position encodings (Vaswani et al. 2017,
    Sec. 3.5): the window of a step is a sequence of `M + 1` positions, the oldest slot at `0` and
    the step itself at `M`, and every input is `h_j + P_p` before its projections:

        `q_i = (h_i + P_M) W_q`,  `k_j = (h_j + P_{M−d}) W_k`,  `v_j = (h_j + P_{M−d}) W_v`,

    with `d = i − j` the key's distance, `P` the `encoding` (`sinusoidal`, `learned` or `axial`,
    `policies.positions.encodings.ABSOLUTE_ENCODINGS`), added at every layer as in the sliding-window
    Transformers of RL baselines (CleanRL's PPO-TrXL). It is the control for the relative schemes.

    A key's window position `M − d` is a function of its distance, so the cached keys and values stay
    position-free (`h_j W_k`) and the terms `P W_k`, `P W_v`, `P_M W_q` are computed once per pass
    (`terms`): the score is `(q_i + P_M W_q)ᵀ(k_j + P_{M−d} W_k)` and the output adds
    `Σ_j α_ij P_{M−d} W_v`. Absolute positions inside a sliding window are therefore relative ones
    in disguise; what sets them apart is that they enter the values and the query, and that `P` is not
    learned for distances (`sinusoidal` has no parameter at all).
    """

    fused = False
    scores_distances = False
    contributes = True

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 encoding: Annotated[str, OneOf(lambda: ABSOLUTE_ENCODINGS)] = "sinusoidal") -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.encoding = ABSOLUTE_ENCODINGS[encoding](d_model, max_distance + 1)

    def terms(self, projections: HeadProjections) -> Tensor:
        """`[P W_k; P W_v; P_M W_q]` as `[3, H, M + 1, d_head]` over window positions `0..M` (the
        query term repeated along the positions)."""
        weight = projections.q_net.weight
        table = self.encoding(torch.arange(self.max_distance + 1, device=weight.device)).to(weight.dtype)
        keys, values = projections.keys_values(table.unsqueeze(0))  # [1, H, M + 1, d] each
        query = projections.queries(table[-1:].unsqueeze(0)).expand_as(keys)
        return torch.cat([keys, values, query])

    def window(self, n_queries: int, n_keys: int, device: torch.device) -> Tensor:
        """`[T, K]`: the window position `M − d` of every key from every query."""
        return self.max_distance - key_distances(n_queries, n_keys, device).clamp(0, self.max_distance)

    def content_query(self, q: Tensor, terms: Tensor | None) -> Tensor:
        if terms is None:
            raise ValueError("absolute positions need their terms (P W_k, P W_v, P_M W_q)")
        return q + terms[2, :, :1]  # the query stands at position M

    def score(self, q: Tensor, terms: Tensor | None, n_keys: int) -> Tensor:
        """`(q_i + P_M W_q)ᵀ P_{M−d} W_k / √d`, `[B, H, T, K]`."""
        query = self.content_query(q, terms)
        B, H, T, _ = q.shape
        window = self.window(T, n_keys, q.device).expand(B, H, T, n_keys)
        return (query @ terms[0].transpose(-1, -2)).gather(-1, window) * self.scale

    def values(self, weights: Tensor, terms: Tensor | None) -> Tensor:
        """`Σ_j α_ij P_{M−d} W_v`: the weights summed over the keys at each window position, times `P W_v`."""
        B, H, T, K = weights.shape
        window = self.window(T, K, weights.device).expand(B, H, T, K)
        per_position = weights.new_zeros(B, H, T, self.max_distance + 1).scatter_add_(-1, window, weights)
        return per_position @ terms[1]
