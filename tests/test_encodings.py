"""The absolute encodings (policies/positions/encodings.py): sinusoidal and learned tables, axial encodings
against their factorisation, their size and their range, and every absolute encoding of the registry against
the shape it promises."""

from __future__ import annotations

import pytest
import torch

from policies.positions.encodings import (
    ABSOLUTE_ENCODINGS,
    AxialPositionalEncoding,
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
)

DIM, MAX = 6, 10  # n₂ = ⌈√10⌉ = 4, n₁ = ⌈10/4⌉ = 3, d₁ = d₂ = 3


def test_a_position_is_its_row_embedding_then_its_column_embedding():
    """``P(p) = concat(E₁[p // n₂], E₂[p mod n₂])``: positions of a row share the first ``d₁`` features,
    positions of a column the last ``d₂``. Mutation caught: the axes swapped (``E₁[p mod n₂]``)."""
    torch.manual_seed(0)
    axial = AxialPositionalEncoding(DIM, max_positions=MAX)
    assert (axial.n2, axial.rows.shape, axial.columns.shape) == (4, (3, 3), (4, 3))
    encodings = axial(torch.arange(MAX))
    assert encodings.shape == (MAX, DIM)
    for p in range(MAX):
        torch.testing.assert_close(encodings[p], torch.cat([axial.rows[p // 4], axial.columns[p % 4]]))
    torch.testing.assert_close(encodings[4, :3], encodings[7, :3])  # row 1
    torch.testing.assert_close(encodings[1, 3:], encodings[9, 3:])  # column 1


def test_distinct_positions_get_distinct_encodings():
    """Mutation caught: the column taken from ``p // n₂`` too (a row's positions would coincide)."""
    torch.manual_seed(0)
    encodings = AxialPositionalEncoding(DIM, max_positions=MAX)(torch.arange(MAX))
    assert torch.unique(encodings, dim=0).shape[0] == MAX


def test_parameters_grow_with_the_square_root_of_the_length():
    """``n₁·d₁ + n₂·d₂`` against ``max_positions·dim``: 1,024 positions of width 128 take 32·64 + 32·64.
    Mutation caught: ``n₂ = max_positions`` (one axis holding every position)."""
    def size(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    assert size(AxialPositionalEncoding(128, max_positions=1024)) == 2 * 32 * 64
    assert size(LearnedPositionalEncoding(128, max_positions=1024)) == 1024 * 128
    assert size(AxialPositionalEncoding(7, max_positions=10)) == 3 * 3 + 4 * 4


@pytest.mark.parametrize("position", [MAX, -1])
def test_positions_outside_the_range_are_refused_as_by_the_learned_encoding(position):
    """``max_positions`` is below ``n₁·n₂ = 12``, so the tables would answer; the encoding refuses as the
    learned one does. Mutation caught: no range check."""
    with pytest.raises(IndexError):
        LearnedPositionalEncoding(DIM, max_positions=MAX)(torch.tensor([position]))
    with pytest.raises(IndexError, match=rf"positions must be in 0\.\.{MAX - 1} .*got \[{position}\]"):
        AxialPositionalEncoding(DIM, max_positions=MAX)(torch.tensor([3, position]))


def test_a_dimension_below_two_is_refused():
    with pytest.raises(ValueError, match="at least 2.*got 1"):
        AxialPositionalEncoding(1, max_positions=MAX)


def test_axial_is_selectable_by_name():
    assert ABSOLUTE_ENCODINGS["axial"] is AxialPositionalEncoding


@pytest.mark.parametrize("name", list(ABSOLUTE_ENCODINGS))
def test_every_absolute_encoding_gives_one_vector_per_position(name):
    encodings = ABSOLUTE_ENCODINGS[name](DIM, MAX)(torch.arange(MAX))
    assert encodings.shape == (MAX, DIM) and torch.isfinite(encodings).all()


def test_absolute_positional_encodings():
    positions = torch.tensor([1, 2])
    sinusoidal = SinusoidalPositionalEncoding(6, max_positions=4)(positions)
    frequencies = torch.tensor([1.0, 10000 ** (-1 / 3), 10000 ** (-2 / 3)])
    torch.testing.assert_close(sinusoidal[0, :3], torch.sin(frequencies))
    torch.testing.assert_close(sinusoidal[1, 3:], torch.cos(2 * frequencies))
    learned = LearnedPositionalEncoding(6, max_positions=8)
    torch.testing.assert_close(learned(positions), learned.table.weight[1:3])
