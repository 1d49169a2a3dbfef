"""PopArt value normalisation (van Hasselt et al. 2016, "Learning values across many orders of
magnitude"; used by V-MPO, Song et al. 2020, Sec. 4.1)."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from envs.rules import Range

PopArtBeta = Annotated[float, Range(0.0, 1.0, low_open=True)]
"""PopArt's step size ``β`` of the value statistics"""


class PopArtValueHead(nn.Module):
    """A linear value head `v = σ (w·x + b) + μ` whose normalised output `w·x + b` is trained.

    `μ` and `ν` (first and second moments of the value targets) follow exponential moving
    averages with step `beta`; `σ = √(ν − μ²)` is kept in `[min_scale, max_scale]`
    (V-MPO's bounds 1e-2 and 1e6). "Preserving outputs precisely" (Art): after every change of
    the statistics, `w ← w σ/σ'` and `b ← (σ b + μ − μ')/σ'`, so the unnormalised values do
    not move.
    """

    def __init__(self, linear: nn.Linear, beta: float = 1e-3, min_scale: float = 1e-2, max_scale: float = 1e6) -> None:
        super().__init__()
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"popart beta must lie in (0, 1], got {beta}")
        self.linear = linear
        self.beta, self.min_scale, self.max_scale = beta, min_scale, max_scale
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("second_moment", torch.ones(()))

    @property
    def scale(self) -> Tensor:
        return (self.second_moment - self.mean.square()).clamp(min=0.0).sqrt().clamp(self.min_scale, self.max_scale)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x) * self.scale + self.mean

    def normalize(self, values: Tensor) -> Tensor:
        """Values (outputs or targets) in the normalised space the head is trained in."""
        return (values - self.mean) / self.scale

    @torch.no_grad()
    def update(self, targets: Tensor) -> None:
        """Move the statistics towards a batch of value targets, preserving the outputs."""
        old_mean, old_scale = self.mean.clone(), self.scale
        self.mean.lerp_(targets.mean(), self.beta)
        self.second_moment.lerp_(targets.square().mean(), self.beta)
        new_scale = self.scale
        self.linear.weight.mul_(old_scale / new_scale)
        self.linear.bias.mul_(old_scale).add_(old_mean - self.mean).div_(new_scale)
