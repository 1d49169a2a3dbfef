"""Shaw et al.'s relative position representations (policies/positions/shaw.py) against their sums."""

from __future__ import annotations

import math

import torch
from conftest import build_attention, segment_with_a_start

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def test_shaw_attention_equals_its_sums():
    """``e_ij = q_iᵀ(k_j + a^K_w)/√d``, ``z_i = Σ_j α_ij (v_j + a^V_w)``, ``w = min(i − j, k)`` written out per
    (query, key), with memory, an episode start and distances beyond the clip (set to 3 here, below
    M = 5, to exercise it). Mutation caught: leaving out the value term ``a^V``."""
    torch.manual_seed(0)
    attn = build_attention("shaw", D, H, DH, max_distance=M).double()
    attn.position.clip = 3
    with torch.no_grad():
        attn.position.key_positions.data = torch.randn(4, DH, dtype=torch.float64)
        attn.position.value_positions.data = torch.randn(4, DH, dtype=torch.float64)
    h, memory, mask, (q, k, v) = segment_with_a_start(attn, env=1, step=2, envs=B, steps=T, d_model=D, memory_length=M)
    expected = torch.zeros(B, H, T, DH, dtype=torch.float64)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                keys = [j for j in range(M + T) if mask[b, i, j]]
                w = [min(M + i - j, 3) for j in keys]
                pairs = list(zip(keys, w, strict=True))
                scores = torch.stack([q[b, n, i] @ (k[b, n, j] + attn.position.key_positions[c]) for j, c in pairs])
                alpha = torch.softmax(scores / math.sqrt(DH), dim=0)
                expected[b, n, i] = sum(a * (v[b, n, j] + attn.position.value_positions[c])
                                        for a, (j, c) in zip(alpha, pairs, strict=True))
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        expected = attn.merge(expected)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)
