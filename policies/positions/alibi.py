"""ALiBi: attention with linear biases (Press et al. 2022), registered as `alibi`."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from policies.attention.layer import Position
from policies.positions import POSITIONS
from policies.window import key_distances


def alibi_slopes(n_heads: int) -> Tensor:
    """The head slopes of Press et al. (2022, Sec. 3): for `n` a power of two, the geometric
    sequence `m_h = 2^(−8h/n)`, `h = 1..n`. Otherwise the `2^⌊log2 n⌋` slopes of the nearest
    power of two, followed by every other slope of twice that power, up to `n` heads."""
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    power = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(power) + geometric(2 * power)[0::2][:n_heads - power]
    return torch.tensor(slopes)


@POSITIONS.register("alibi", "ALiBi: a fixed linear penalty on distance per head (Press et al. 2022)")
class ALiBiPosition(Position):
    """A fixed linear penalty on distance (Press et al. 2022): `softmax(q_iᵀk_j / √d_head − m_h · (i − j))`
    with the head slopes of `alibi_slopes`.

    No position embedding and no learned position parameter: each head forgets at its own rate,
    and the same scores arise whether a key is seen from a rollout step or from a training segment.
    """

    contributes = True

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def score(self, q: Tensor, terms: Tensor | None, n_keys: int) -> Tensor:
        """`−m_h · (i − j)`, `[1, H, T, K]`."""
        distance = key_distances(q.shape[2], n_keys, q.device).clamp(min=0)  # future keys are masked
        return -(self.slopes.view(-1, 1, 1) * distance).to(q.dtype).unsqueeze(0)

    def distance_score(self, q: Tensor, terms: Tensor | None, distances: Tensor | None) -> Tensor:
        """`−m_h · d` for keys at `distances` `[J]`, `[1, H, 1, J]`."""
        if distances is None:
            raise ValueError("ALiBi needs the keys' distances")
        return -(self.slopes.view(-1, 1) * distances).to(q.dtype).view(1, self.n_heads, 1, -1)
