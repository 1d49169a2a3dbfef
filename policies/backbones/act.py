"""Adaptive Computation Time (Graves 2016) per position, as used by the Universal Transformer.

At ponder step `n` each position emits a halting probability `p_n = σ(w·s_n + b)` from the
state entering the step. A position halts at the first step `N` where the cumulative
probability would exceed `1 − ε`, or at `max_steps`; its halting weights are `p_n` for
`n < N` and the remainder `R = 1 − Σ_{n<N} p_n` at `N`, so they sum to 1. The state is
updated as `s ← w_n·F_n(s) + (1 − w_n)·s` (Dehghani et al. 2019), so a halted position keeps
its state, and the ponder cost is `ρ = N + R` (gradients flow through `R` only, `N` is
piecewise constant).

The loop always runs `max_steps` steps with masks, never a data-dependent number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor, nn

from envs.rules import Count, Finite, Range
from policies.options import checked

Epsilon = Annotated[float, Range(0.0, 1.0, low_open=True, high_open=True)]
"""ACT's ``ε``: a position halts once its cumulative halting probability exceeds ``1 − ε``"""


@dataclass
class Ponder:
    """What ACT reports per position `[B, T]`: steps taken `N`, remainder `R`, and the
    halting weight of every ponder step `[max_steps, B, T]`."""

    steps: Tensor
    remainder: Tensor
    weights: Tensor

    @property
    def cost(self) -> Tensor:
        """Ponder cost `ρ = N + R` per position."""
        return self.steps + self.remainder


PonderStep = Callable[[int, Tensor], tuple[Tensor, Tensor]]


class AdaptiveComputationTime(nn.Module):
    """The halting unit and the masked ACT loop.

    Args:
        dim: width of the state.
        max_steps: the most ponder steps a position may take.
        epsilon: a position halts once its cumulative halting probability exceeds `1 − ε`.
        halting_bias: initial `b` of the halting unit (1.0 as in tensor2tensor, so
            `σ(1) ≈ 0.73` and most positions halt after two steps at initialisation).
    """

    @checked()
    def __init__(self, dim: int, max_steps: Count, epsilon: Epsilon = 0.01, halting_bias: Finite = 1.0) -> None:
        super().__init__()
        self.max_steps, self.threshold = max_steps, 1.0 - epsilon
        self.halting = nn.Linear(dim, 1)
        nn.init.constant_(self.halting.bias, halting_bias)

    def forward(self, state: Tensor, ponder_step: PonderStep) -> tuple[Tensor, Ponder]:
        """Ponder on `state` `[B, T, D]`.

        `ponder_step(n, state)` returns `(halting_input, transformed)`: the tensor the halting
        unit reads at step `n` and the transition `F_n(state)`.
        """
        shape = state.shape[:-1]
        cumulative = state.new_zeros(shape)
        remainder = state.new_zeros(shape)
        steps = state.new_zeros(shape)
        running = torch.ones(shape, dtype=torch.bool, device=state.device)
        weights = []
        for n in range(self.max_steps):
            halting_input, transformed = ponder_step(n, state)
            p = torch.sigmoid(self.halting(halting_input)).squeeze(-1)
            last = n == self.max_steps - 1
            halts = running if last else running & (cumulative + p > self.threshold)
            continues = running & ~halts
            weight = torch.where(continues, p, torch.where(halts, 1.0 - cumulative, torch.zeros_like(p)))
            remainder = torch.where(halts, 1.0 - cumulative, remainder)
            cumulative = torch.where(continues, cumulative + p, cumulative)
            steps = steps + running.to(state.dtype)
            state = torch.lerp(state, transformed, weight.unsqueeze(-1))
            weights.append(weight)
            running = continues
        return state, Ponder(steps=steps, remainder=remainder, weights=torch.stack(weights))
