"""Causal linear attention (Katharopoulos et al. 2020): a Transformer that is an RNN.

With a positive feature map `φ` (`elu(x) + 1` by default) the attention output of query `i` is

    `y_i = φ(q_i)ᵀ S_i / (φ(q_i)ᵀ z_i)`,  `S_i = Σ_{j≤i} φ(k_j) v_jᵀ`,  `z_i = Σ_{j≤i} φ(k_j)`

(Sec. 3.2 and 3.4 of the paper). The sums are the whole memory: a carry of `H·m·(d+1)` numbers
(`m` features) per layer that grows with nothing, so a step costs O(1) in the episode length and no cue is ever
pushed out of a window. Two forms compute it and must agree (step equals sequence): the recurrent form,
`S ← S + φ(k_t) v_tᵀ`, for rollouts, and the parallel form, a causal matrix product over a
segment plus the carry it started from, for training. `feature_map="favor"` uses the Performer's
positive random features instead (`policies.backbones.random_features`), which estimate softmax attention.
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import CountOrNone, OneOf
from policies.attention.layer import HeadProjections
from policies.backbones.random_features import PositiveRandomFeatures
from policies.options import checked
from policies.window import episode_ids

FeatureMap = Annotated[str, OneOf(lambda: FEATURE_MAPS)]
"""the feature map ``φ``: ``elu`` (``elu(x) + 1``) or ``favor`` (the Performer's positive random features)"""

EPSILON = 1e-6
"""added to the normaliser ``φ(q_i)ᵀ z_i``, as in the paper's code"""


def feature_map(x: Tensor) -> Tensor:
    """`φ(x) = elu(x) + 1`, positive everywhere (Katharopoulos et al. 2020, Eq. 7)."""
    return F.elu(x) + 1.0


class EluFeatures(nn.Module):
    """`feature_map` as a module: `m = d_head` features."""

    def __init__(self, n_heads: int, d_head: int, n_features: int | None = None) -> None:
        super().__init__()
        if n_features not in (None, d_head):
            raise ValueError(f"the elu feature map has d_head = {d_head} features, got n_features={n_features}")
        self.n_features = d_head

    def forward(self, x: Tensor, query: bool = False) -> Tensor:
        return feature_map(x)


FEATURE_MAPS: dict[str, type[nn.Module]] = {"elu": EluFeatures, "favor": PositiveRandomFeatures}
"""name → feature map ``φ`` of the linear attention"""


class CausalLinearAttention(HeadProjections):
    """Linear attention of a segment over its own episode, from a carry `[B, H, m, d + 1]`
    (`S` in the first `d` columns, `z` in the last) left by the steps before the segment;
    `feature_map` names `φ` in `FEATURE_MAPS`, with `m` = `n_features` (`favor`) or `d_head`.

    `forward(h, carry, episode_starts)`: `h` `[B, T, D]`; `episode_starts` `[B, T]`; a
    start at step `t` hides the carry and every earlier step of the segment from steps `≥ t`.
    Returns the output `[B, T, D]` and the carry after the segment (that of its last episode).
    """

    complexity = "O(n)"

    @checked()
    def __init__(self, d_model: int, n_heads: int, d_head: int, *, feature_map: FeatureMap = "elu",
                 n_features: CountOrNone = None) -> None:
        super().__init__(d_model, n_heads, d_head)
        if feature_map == "favor" and n_features is None:
            n_features = d_head
        self.phi = FEATURE_MAPS[feature_map](n_heads, d_head, n_features)
        self.n_features: int = self.phi.n_features

    def forward(self, h: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        d = self.d_head
        q = self.phi(self.queries(h), query=True)  # [B, H, T, m]
        k, v = self.keys_values(h)
        k = self.phi(k)
        S, z = carry[..., :d], carry[..., d]  # [B, H, m, d], [B, H, m]
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
