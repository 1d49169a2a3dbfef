"""A sliding window plus steps that the model marks as global, registered as `global-local`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import CountOrNone
from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern, Position
from policies.attention.local import local_window_length
from policies.options import checked
from policies.window import key_distances


@ATTENTIONS.register("global-local", "a sliding window plus older steps a learned gate keeps visible "
                                     "(Longformer, ETC, BigBird)")
class GlobalLocalPattern(Pattern):
    """A sliding window plus global steps, the pattern of Longformer (Beltagy et al. 2020, Sec. 3.1),
    ETC (Ainslie et al. 2020) and BigBird (Zaheer et al. 2020), with the global steps chosen by a
    learned gate instead of by the task:

        `A_ij = position-aware score + [i − j > W] · log σ(w_hᵀk_j / √d + b_h)`,

    so a key within `W = local_window` steps is seen as in `local` and an older one is weighted by
    its own globalness `σ(·) ∈ (0, 1)`: `σ → 1` on every step gives `full` attention over the memory,
    `σ → 0` gives `local`. `w_h` (`N(0, 0.02)`) and `b_h` (0: far steps start at half weight) are
    learned per head; the gate reads the key, so a rollout step computes it from the cached keys.

    Which of the three papers' parts carry over to an RL memory, and why: local-to-local is the window;
    local-to-global is the gate. Global-to-local and global-to-global (global tokens that attend to the
    whole sequence) would be summaries of the episode so far; in a stream they must be recomputed at
    every step, at `G·M` per step, more than the window's `M`, and one that persists beyond the
    window is a recurrent state (the `linear` and `lstm` backbones). So the global steps here are
    episode steps kept visible, not extra tokens (BigBird's fixed choice, with its random blocks, is
    `policies.attention.bigbird`). Dense scores are masked, so the pattern saves no time on a CPU (as
    `local`).
    """

    complexity = "O(n·(W + g)), g global tokens"

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 local_window: CountOrNone = None) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.local_window = local_window_length(max_distance, local_window)
        self.global_weight = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)  # w_h
        self.global_bias = nn.Parameter(torch.zeros(n_heads))  # b_h

    def refuses(self, position: Position) -> str | None:
        if not position.softmax:
            return "the gate is a log-weight bias on a softmax, and this position normalises its scores otherwise"
        return None

    def globalness(self, k: Tensor) -> Tensor:
        """`log σ(w_hᵀk_j/√d + b_h)` of every key `[B, H, K, d]`: `[B, H, K]`."""
        return F.logsigmoid(torch.einsum("bhkd,hd->bhk", k, self.global_weight) * self.scale
                            + self.global_bias.view(1, -1, 1))

    def bias(self, q: Tensor, k: Tensor) -> Tensor:
        """`[i − j > W] · log σ(w_hᵀk_j/√d + b_h)`, `[B, H, T, K]` (no band: the gate is soft)."""
        far = key_distances(q.shape[2], k.shape[2], q.device) > self.local_window  # [T, K]
        return self.globalness(k).unsqueeze(2) * far.to(k.dtype)
