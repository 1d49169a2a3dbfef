"""Adaptive attention span (Sukhbaatar et al. 2019), registered as `adaptive-span`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern, Position
from policies.window import key_distances

RAMP = 32
"""``R``, the length of the soft mask's ramp (the paper's value), capped at a quarter of the memory"""
SPAN_LOSS_COEF = 1e-3
"""default coefficient of the span penalty (the mean span as a fraction of the memory length)"""


@ATTENTIONS.register("adaptive-span", "a soft window per head whose span is learned (Sukhbaatar et al. 2019)")
class AdaptiveSpanPattern(Pattern):
    """A soft window per head that learns how far back it looks (Sukhbaatar et al. 2019, Sec. 3): the weight
    of a key `d` steps back is multiplied by the soft mask

        `m_z(d) = clamp((R + z − d) / R, 0, 1)`,  `a_ij = m_z(d_ij) exp(s_ij) / Σ_k m_z(d_ik) exp(s_ik)`,

    done as the score bias `log m_z(d)` (floored far below any score beyond `z + R`).
    `z = clamp(ζ, 0, 1) · M` per head, `ζ` initialised to 1: a fresh pattern spans the whole
    memory and equals the full window. The span penalty `mean_h z_h / M` goes to the
    loss through the backbone's `aux` (`span`, coefficient `SPAN_LOSS_COEF`), shrinking
    the spans that the task does not need.
    """

    complexity = "O(n·S), S the learned span"

    aux_loss_coefs = {"span": SPAN_LOSS_COEF}

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.ramp = max(1, min(RAMP, max_distance // 4))
        self.span_fraction = nn.Parameter(torch.ones(n_heads))  # ζ

    def refuses(self, position: Position) -> str | None:
        if not position.softmax:
            return "the span is a log-weight bias on a softmax, and this position normalises its scores otherwise"
        return None

    def spans(self) -> Tensor:
        """The learned span `z_h` of every head, in steps, `[H]`."""
        return self.span_fraction.clamp(0.0, 1.0) * self.max_distance

    def soft_mask(self, distance: Tensor) -> Tensor:
        """`m_z(d)` per head for distances `[...]`: `[H, ...]`."""
        z = self.spans().view(-1, *([1] * distance.dim()))
        return ((self.ramp + z - distance) / self.ramp).clamp(0.0, 1.0)

    def bias(self, q: Tensor, k: Tensor) -> Tensor:
        """`log m_z(d)`, `[1, H, T, K]`."""
        distance = key_distances(q.shape[2], k.shape[2], q.device).clamp(min=0).to(q.dtype)  # future keys: masked
        # log of the mask, floored at the smallest normal number instead of log 0: a key beyond the
        # span weighs e^-87 (float32) and no 0·∞ turns the span's gradient into NaN
        return self.soft_mask(distance).clamp(min=torch.finfo(q.dtype).tiny).log().unsqueeze(0)

    def aux_terms(self) -> dict[str, Tensor]:
        return {"span": self.spans().mean() / self.max_distance}
