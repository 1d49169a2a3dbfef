"""RoPE (Su et al. 2021): the rotated score against the paper's formula, the score's dependence on the distance
alone, and its registration (the memory contract of every pair it makes runs in
``tests/test_position_pattern_contract.py``, read from the registry)."""

from __future__ import annotations

import math

import pytest
import torch

from policies import POSITIONS, make_backbone
from policies.attention.layer import make_attention
from policies.window import attention_mask

D, H, DH, M, T = 8, 2, 4, 5, 3


def rotate_pairs(x: torch.Tensor, position: int) -> torch.Tensor:
    """The paper's ``R_p x`` (Eq. 15) written out pair by pair, for one vector ``x`` ``[d]``."""
    out = torch.empty_like(x)
    for i in range(x.shape[0] // 2):
        angle = position * 10000.0 ** (-2 * i / x.shape[0])
        c, s = math.cos(angle), math.sin(angle)
        out[2 * i] = c * x[2 * i] - s * x[2 * i + 1]
        out[2 * i + 1] = s * x[2 * i] + c * x[2 * i + 1]
    return out


def test_rope_is_registered_with_a_summary():
    assert "Su et al. 2021" in POSITIONS["rope"].summary


def test_attention_with_rope_equals_the_rotated_scores_written_out():
    """Softmax of ``(R_m q)ᵀ(R_n k) / √d`` over ``[memory; segment]``, the query of segment step ``i`` at
    position ``M + i`` (mutations caught: the query rotated at ``i`` instead of ``M + i``; sin and cos swapped)."""
    torch.manual_seed(0)
    attn = make_attention("full", D, H, DH, max_distance=M, position="rope").double()
    h, memory = torch.randn(1, T, D, dtype=torch.float64), torch.randn(1, M, D, dtype=torch.float64)
    mask = attention_mask(torch.ones(1, M, dtype=torch.bool), torch.zeros(1, T, dtype=torch.bool), M)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        q = attn.queries(h)[0]  # [H, T, d]
        k, v = (x[0] for x in attn.keys_values(torch.cat([memory, h], dim=1)))  # [H, K, d]
        expected = torch.zeros(H, T, DH, dtype=torch.float64)
        for n in range(H):
            for i in range(T):
                keys = [j for j in range(M + T) if mask[0, i, j]]
                scores = torch.stack([rotate_pairs(q[n, i], M + i) @ rotate_pairs(k[n, j], j) for j in keys])
                expected[n, i] = torch.softmax(scores / math.sqrt(DH), dim=0) @ v[n, keys]
        expected = attn.merge(expected.unsqueeze(0))
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_a_score_depends_on_the_distance_only():
    """The same query and key rotated at positions (m, n) and (m + 7, n + 7) give the same score."""
    torch.manual_seed(0)
    rope = make_attention("full", D, H, DH, max_distance=M, position="rope").position.double()
    q, k = torch.randn(1, 1, 1, DH, dtype=torch.float64), torch.randn(1, 1, 1, DH, dtype=torch.float64)
    near = rope.turn(q, torch.tensor([5])) @ rope.turn(k, torch.tensor([2])).transpose(-1, -2)
    far = rope.turn(q, torch.tensor([12])) @ rope.turn(k, torch.tensor([9])).transpose(-1, -2)
    torch.testing.assert_close(near, far, atol=1e-12, rtol=0)


def test_an_odd_head_width_is_refused():
    with pytest.raises(ValueError, match="d_head must be even, got 3"):
        make_backbone("gtrxl", 3, d_model=6, n_heads=2, position="rope")
