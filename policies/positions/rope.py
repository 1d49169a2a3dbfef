"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer"), registered as `rope`."""

from __future__ import annotations

import torch
from torch import Tensor

from policies.attention.layer import Position
from policies.positions import POSITIONS

BASE = 10000.0
"""``b`` of the rotation frequencies ``θ_i = b^(−2i/d)`` (the paper's value, that of the sinusoids)"""


@POSITIONS.register("rope", "rotary position embedding: queries and keys rotated by their position "
                            "(Su et al. 2021)")
class RotaryPosition(Position):
    """Queries and keys rotated by their position (Su et al. 2021, Sec. 3.2, Eq. 14–16): the pair of features
    `(x_{2i}, x_{2i+1})` of a vector at position `p` turns by the angle `p·θ_i`, `θ_i = 10000^(−2i/d)`,

        `f(x, p) = R_p x`,  so  `f(q, m)ᵀ f(k, n) = qᵀ R_{n−m} k`

    and a score depends on the content and on the distance `m − n` only. Over `[memory; segment]` the key
    `j` stands at position `j` and the query `i` of a segment of `T` at `K − T + i`: the cached keys
    stay unrotated, and a rollout step and a training segment give every key the same distance (step equals
    sequence). No parameter; a compressed slot mixes several distances and has no single rotation, so the
    `compressive` memory refuses it (`scores_distances`).
    """

    scores_distances = False
    contributes = True

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        if d_head % 2:
            raise ValueError(f"rope rotates pairs of features: d_head must be even, got {d_head}")

    def rotation(self, positions: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
        """`cos(p θ_i)` and `sin(p θ_i)` for `positions` `[N]`: `[N, d_head / 2]` each, in `like`'s
        dtype (no float32 frequencies in a float64 model)."""
        frequencies = BASE ** (-torch.arange(0, self.d_head, 2, device=like.device, dtype=like.dtype) / self.d_head)
        angles = positions.to(like.dtype).unsqueeze(-1) * frequencies
        return angles.cos(), angles.sin()

    def turn(self, x: Tensor, positions: Tensor) -> Tensor:
        """`R_p x` for `x` `[B, H, N, d]` at `positions` `[N]`."""
        cos, sin = self.rotation(positions, x)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        T, K = q.shape[2], k.shape[2]
        keys = torch.arange(K, device=k.device)
        return self.turn(q, keys[K - T:]), self.turn(k, keys)
