"""Causal linear attention (Katharopoulos et al. 2020): a Transformer that is an RNN.

With the feature map ``φ(x) = elu(x) + 1`` the attention output of query ``i`` is

    ``y_i = φ(q_i)ᵀ S_i / (φ(q_i)ᵀ z_i)``,  ``S_i = Σ_{j≤i} φ(k_j) v_jᵀ``,  ``z_i = Σ_{j≤i} φ(k_j)``

(Sec. 3.2 and 3.4 of the paper). The sums are the whole memory: a carry of ``H·d·(d+1)`` numbers
per layer that grows with nothing, so a step costs O(1) in the episode length and no cue is ever
pushed out of a window. Two forms compute it and must agree (invariant 1): the recurrent form,
``S ← S + φ(k_t) v_tᵀ``, for rollouts, and the parallel form, a causal matrix product over a
segment plus the carry it started from, for training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from policies.attention import HeadProjections
from policies.memory import episode_ids

EPSILON = 1e-6
"""added to the normaliser ``φ(q_i)ᵀ z_i``, as in the paper's code"""


def feature_map(x: Tensor) -> Tensor:
    """``φ(x) = elu(x) + 1``, positive everywhere (Katharopoulos et al. 2020, Eq. 7)."""
    return F.elu(x) + 1.0


class CausalLinearAttention(HeadProjections):
    """Linear attention of a segment over its own episode, from a carry ``[B, H, d, d + 1]``
    (``S`` in the first ``d`` columns, ``z`` in the last) left by the steps before the segment.

    ``forward(h, carry, episode_starts)``: ``h`` ``[B, T, D]``; ``episode_starts`` ``[B, T]``; a
    start at step ``t`` hides the carry and every earlier step of the segment from steps ``≥ t``.
    Returns the output ``[B, T, D]`` and the carry after the segment (that of its last episode).
    """

    def forward(self, h: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        d = self.d_head
        q = feature_map(self.queries(h))  # [B, H, T, d]
        k, v = self.keys_values(h)
        k = feature_map(k)
        S, z = carry[..., :d], carry[..., d]  # [B, H, d, d], [B, H, d]
        T = h.shape[1]
        episode = episode_ids(episode_starts)  # [B, T]; 0 = the episode the carry belongs to
        causal = torch.ones(T, T, dtype=torch.bool, device=h.device).tril()
        visible = (causal & (episode.unsqueeze(2) == episode.unsqueeze(1))).unsqueeze(1)  # [B, 1, T, T]
        from_carry = (episode == 0).to(h.dtype).view(-1, 1, T, 1)  # [B, 1, T, 1]
        weights = (q @ k.transpose(-1, -2)) * visible  # φ(q_i)ᵀφ(k_j) where j is visible from i
        numerator = weights @ v + (q @ S) * from_carry
        normaliser = weights.sum(-1, keepdim=True) + (q @ z.unsqueeze(-1)) * from_carry
        out = numerator / (normaliser + EPSILON)
        # the carry after the segment: the carry (if no start in the segment) plus the last episode's steps
        in_last = (episode == episode[:, -1:]).to(h.dtype).view(-1, 1, T, 1)
        keep = from_carry[:, :, -1:]  # [B, 1, 1, 1]
        last_keys = k * in_last
        new_S = S * keep + last_keys.transpose(-1, -2) @ v
        new_z = z * keep[..., 0] + last_keys.sum(2)
        return self.merge(out), torch.cat([new_S, new_z.unsqueeze(-1)], dim=-1)
