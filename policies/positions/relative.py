"""Transformer-XL relative positions (Dai et al. 2019, Sec. 3.3 and App. B), registered as ``relative``."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from policies.attention.kernel import HeadProjections
from policies.positions import POSITIONS
from policies.positions.base import Position
from policies.positions.encodings import sinusoid_table


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


@POSITIONS.register("relative", "Transformer-XL relative positions with u, v and the shift (Dai et al. 2019)")
class RelativePosition(Position):
    """Transformer-XL relative attention scores (Dai et al. 2019, Sec. 3.3):

        ``A_ij = q_iᵀk_j + q_iᵀW_kR R_{i−j} + uᵀk_j + vᵀW_kR R_{i−j}``

    — terms (a) content, (b) content-dependent position, (c) global content bias, (d) global position bias —
    computed as ``(q+u)ᵀk`` (:meth:`content_query`, the kernel's content term) plus
    ``rel_shift((q+v)ᵀ W_kR R)`` (:meth:`score`), both scaled by ``1/√d_head``. ``R`` is the sinusoid table of
    distances ``0..max_distance``, ``W_kR`` a bias-free projection, ``u`` and ``v`` (``position_bias``) learned
    per layer (``[H, d_head]``, initialised N(0, 0.02) as in the original code). The terms are ``W_kR R``.
    """

    contributes = True

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.r_net = nn.Linear(d_model, n_heads * d_head, bias=False)  # W_kR
        nn.init.xavier_uniform_(self.r_net.weight)
        self.u = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)
        self.position_bias = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)  # v

    def terms(self, projections: HeadProjections) -> Tensor:
        """``W_kR R`` as ``[H, max_distance + 1, d_head]`` in descending distance order ``max_distance, ..., 0``:
        the order of the keys of a rollout step (``M`` memory slots, then the step itself). ``R`` is evaluated in
        the parameters' dtype (no float32 table in a float64 model); distances beyond ``max_distance`` never occur
        under the banded mask."""
        weight = self.r_net.weight
        descending = torch.arange(self.max_distance, -1, -1, device=weight.device, dtype=weight.dtype)
        table = sinusoid_table(descending, weight.shape[1])
        return self.r_net(table).view(-1, self.n_heads, self.d_head).transpose(0, 1)

    def content_query(self, q: Tensor, terms: Tensor | None) -> Tensor:
        return q + self.u.unsqueeze(1)  # (a) + (c): (q + u)ᵀk

    def score(self, q: Tensor, terms: Tensor | None, n_keys: int) -> Tensor:
        """(b) + (d): ``rel_shift((q + v)ᵀ W_kR R) / √d_head``, ``[B, H, T, K]``."""
        if terms is None:
            raise ValueError("relative positions need their terms (W_kR R)")
        max_distance = terms.shape[1] - 1
        if n_keys != max_distance + 1:
            # raw column k holds distance K-1-k, clamped: longer distances are masked anyway
            distance = (n_keys - 1 - torch.arange(n_keys, device=q.device)).clamp(max=max_distance)
            terms = terms[:, max_distance - distance]
        raw = torch.einsum("bhtd,hkd->bhtk", q + self.position_bias.unsqueeze(1), terms)  # [B, H, T, K]
        shifted = raw if q.shape[2] == 1 else rel_shift(raw)  # one query: already aligned
        return shifted * self.scale

    def distance_score(self, q: Tensor, terms: Tensor | None, distances: Tensor | None) -> Tensor | None:
        """(b) + (d) at ``distances`` ``[J]``: ``(q + v)ᵀ W_kR R_d / √d_head``, ``[B, H, T, J]``."""
        if terms is None or distances is None:
            raise ValueError("relative positions need their terms (W_kR R) and the keys' distances")
        at = terms[:, terms.shape[1] - 1 - distances]  # [H, J, d]
        return torch.einsum("bhtd,hjd->bhtj", q + self.position_bias.unsqueeze(1), at) * self.scale
