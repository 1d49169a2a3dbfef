"""The DA-Transformer's distance-aware weights (policies/positions/distance_aware.py) against the formula."""

from __future__ import annotations

import math

import torch
from conftest import build_attention, segment_with_a_start

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def test_distance_aware_attention_equals_its_formula():
    """``A_ij = ReLU(q_iᵀk_j/√d)·(1 + e^v)/(1 + e^{v − w(i−j)})``, ``z_i = Σ_j A_ij v_j / Σ_j A_ij`` over the
    visible keys (Wu et al. 2021), with w of both signs. Mutation caught: ``e^{v + w(i−j)}``."""
    torch.manual_seed(0)
    attn = build_attention("distance-aware", D, H, DH, max_distance=M).double()
    with torch.no_grad():
        attn.position.distance_weight.copy_(torch.tensor([-0.5, 0.0, 0.7], dtype=torch.float64))
        attn.position.sigmoid_offset.copy_(torch.tensor([0.3, -1.0, 1.5], dtype=torch.float64))
    h, memory, mask, (q, k, v) = segment_with_a_start(attn, env=0, step=4, envs=B, steps=T, d_model=D, memory_length=M)
    expected = torch.zeros(B, H, T, DH, dtype=torch.float64)
    for b in range(B):
        for n in range(H):
            w, o = attn.position.distance_weight[n], attn.position.sigmoid_offset[n]
            for i in range(T):
                keys = [j for j in range(M + T) if mask[b, i, j]]
                a = torch.stack([torch.relu(q[b, n, i] @ k[b, n, j] / math.sqrt(DH))
                                 * (1 + o.exp()) / (1 + (o - w * (M + i - j)).exp()) for j in keys])
                expected[b, n, i] = (a.unsqueeze(1) * v[b, n, keys]).sum(0) / (a.sum() + 1e-6)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        expected = attn.merge(expected)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)
