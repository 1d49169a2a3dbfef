"""Absolute positional information: sinusoidal, learned and axial encodings. The sinusoidal one sits beside its
table in `policies.attention.layer` (`sinusoid_table`, which Transformer-XL's
relative positions evaluate at distances), so that the default GTrXL's episode clock reads in that file."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from policies.attention.layer import SinusoidalPositionalEncoding


class LearnedPositionalEncoding(nn.Module):
    """Absolute learned encoding, one trainable vector per position (Gehring et al. 2017)."""

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_positions, dim)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, positions: Tensor) -> Tensor:
        """`positions`: `[N]` integers below `max_positions` → `[N, dim]`."""
        return self.table(positions)


class AxialPositionalEncoding(nn.Module):
    """Axial learned encoding: the position embeddings of Reformer (Kitaev et al. 2020), over the axial
    factorisation of positions of Ho et al. (2019).

    A position `p < n₁·n₂` is the pair `(p // n₂, p mod n₂)` and is encoded as
    `concat(E₁[p // n₂], E₂[p mod n₂])` with trainable `E₁ ∈ R^{n₁×d₁}`, `E₂ ∈ R^{n₂×d₂}`,
    `d₁ + d₂ = dim`; here `n₂ = ⌈√max_positions⌉`, `n₁ = ⌈max_positions / n₂⌉`, `d₁ = ⌊dim/2⌋`.
    That is `n₁·d₁ + n₂·d₂ ≈ √max_positions · dim` parameters instead of the `max_positions · dim`
    of `LearnedPositionalEncoding` (1,024 positions of width 128: 4,096 instead of 131,072).
    Initialised `N(0, 0.02)` as the learned encoding; positions from `max_positions` on are refused
    as the learned encoding refuses them, though the tables would cover them up to `n₁·n₂ − 1`.
    """

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        if dim < 2:
            raise ValueError(f"axial encodings need a dimension of at least 2 (one feature per axis), got {dim}")
        self.max_positions = max_positions
        self.n2 = math.ceil(math.sqrt(max_positions))
        n1 = math.ceil(max_positions / self.n2)
        d1 = dim // 2
        self.rows = nn.Parameter(torch.randn(n1, d1) * 0.02)  # E₁
        self.columns = nn.Parameter(torch.randn(self.n2, dim - d1) * 0.02)  # E₂

    def forward(self, positions: Tensor) -> Tensor:
        """`positions`: `[N]` integers below `max_positions` → `[N, dim]`.

        Raises:
            IndexError: a position outside `0..max_positions − 1`.
        """
        outside = (positions < 0) | (positions >= self.max_positions)
        if outside.any():
            raise IndexError(f"positions must be in 0..{self.max_positions - 1} (max_positions = "
                             f"{self.max_positions}), got {positions[outside].tolist()}")
        return torch.cat([self.rows[positions // self.n2], self.columns[positions % self.n2]], dim=-1)


ABSOLUTE_ENCODINGS: dict[str, type[nn.Module]] = {
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
    "axial": AxialPositionalEncoding,
}

