"""Positional information: sinusoidal and learned absolute encodings, and the sinusoid table
that Transformer-XL attention (:mod:`policies.relative_attention`) evaluates at distances."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoid_table(positions: Tensor, dim: int) -> Tensor:
    """Sinusoids of Vaswani et al. (2017): ``[sin(p ω_i), cos(p ω_i)]``, ``ω_i = 10000^(-2i/d)``.

    Transformer-XL (Dai et al. 2019, Sec. 3.3) uses the same table, evaluated at relative
    distances, as ``R``. ``positions``: ``[N]`` (any float or int dtype); returns ``[N, dim]``.
    """
    if dim % 2:
        raise ValueError(f"sinusoidal encodings need an even dimension, got {dim}")
    dtype = positions.dtype if positions.is_floating_point() else torch.get_default_dtype()
    inv_freq = torch.exp(torch.arange(0, dim, 2, device=positions.device, dtype=dtype)
                         * (-math.log(10000.0) / dim))
    angles = positions.to(dtype).unsqueeze(-1) * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class SinusoidalPositionalEncoding(nn.Module):
    """Absolute sinusoidal encoding ``PE(p)`` (Vaswani et al. 2017), added to the inputs at position ``p``."""

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoid_table(torch.arange(max_positions), dim), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """``positions``: ``[N]`` integers below ``max_positions`` → ``[N, dim]``."""
        return self.table[positions]


class LearnedPositionalEncoding(nn.Module):
    """Absolute learned encoding, one trainable vector per position (Gehring et al. 2017)."""

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_positions, dim)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, positions: Tensor) -> Tensor:
        """``positions``: ``[N]`` integers below ``max_positions`` → ``[N, dim]``."""
        return self.table(positions)


ABSOLUTE_ENCODINGS: dict[str, type[nn.Module]] = {
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
}

