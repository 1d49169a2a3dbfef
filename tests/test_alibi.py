"""ALiBi (policies/positions/alibi.py): the head slopes of Press et al. and the scores they give."""

from __future__ import annotations

import math

import torch
from conftest import build_attention

from policies.positions.alibi import alibi_slopes
from policies.window import (
    attention_mask,
)

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def test_alibi_slopes_follow_press_et_al():
    """Powers of two: ``2^(−8h/n)``; otherwise the nearest power's slopes, then every other one of
    twice that power (Press et al. 2022). Mutation caught: a slope sequence starting at ``h = 0``."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]))
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8,
                                                              2.0 ** -1, 2.0 ** -3]))


def test_alibi_attention_equals_content_scores_minus_slope_times_distance():
    """``softmax(q_iᵀk_j/√d − m_h (i − j))`` written out per (query, key), with memory and episode starts."""
    torch.manual_seed(0)
    attn = build_attention("alibi", D, H, DH, max_distance=M).double()
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[0, 3] = True
    mask = attention_mask(torch.ones(B, M, dtype=torch.bool), starts, M)
    context = torch.cat([memory, h], dim=1)
    q = attn._heads(attn.q_net(h))
    k, v = attn.keys_values(context)
    expected = torch.zeros(B, H, T, DH, dtype=torch.float64)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                scores = torch.stack([q[b, n, i] @ k[b, n, j] / math.sqrt(DH) - alibi_slopes(H)[n] * (M + i - j)
                                      if mask[b, i, j] else torch.tensor(float("-inf"), dtype=torch.float64)
                                      for j in range(M + T)])
                expected[b, n, i] = torch.softmax(scores, dim=0) @ v[b, n]
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected = attn.out_net(expected.transpose(1, 2).reshape(B, T, -1))
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)
