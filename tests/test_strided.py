"""The Sparse Transformer's strided pattern (policies/attention/strided.py)."""

from __future__ import annotations

import torch
from conftest import build_attention

from policies.window import (
    attention_mask,
)

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def test_strided_attention_equals_full_attention_with_the_pattern_mask():
    """Child et al. (2019): the last ``l`` steps and every ``l``-th one before, ``l = ⌈√M⌉`` (here M = 9,
    l = 3); equal to content attention given the pattern as its mask (mutation caught: no local band)."""
    torch.manual_seed(0)
    M9 = 9
    strided = build_attention("strided", D, H, DH, max_distance=M9).double()
    content = build_attention("none", D, H, DH, max_distance=M9).double()
    content.load_state_dict(strided.state_dict())
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M9, D, dtype=torch.float64)
    mask = attention_mask(torch.ones(B, M9, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool), M9)
    distance = torch.arange(T).view(-1, 1) + M9 - torch.arange(M9 + T).view(1, -1)
    pattern = torch.tensor([[d < 3 or d % 3 == 0 for d in row] for row in distance.tolist()])
    assert strided.pattern.stride == 3 and pattern[0, :M9 + 1].tolist() == [True, False, False, True, False, False,
                                                                        True, True, True, True]
    with torch.no_grad():
        out, _ = strided(h, strided.keys_values(memory), mask)
        expected, _ = content(h, content.keys_values(memory), mask & pattern)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
