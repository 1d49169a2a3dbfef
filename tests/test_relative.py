"""Transformer-XL relative positions (policies/attention/layer.py): relative attention equals its four terms
(docs/design.md, "Invariants"), the relative shift, and the projected sinusoid of each distance."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies.attention.layer import MultiHeadAttention, rel_shift, sinusoid_table
from policies.window import attention_mask

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def naive_relative_attention(attn: MultiHeadAttention, h, memory, mask):
    """The four TrXL terms written out per (query, key), O(T·(M+T)) Python loops."""
    context = torch.cat([memory, h], dim=1)  # [B, M+T, D]
    W_q = attn.q_net.weight.view(H, DH, D)
    W_k, W_v = (w.view(H, DH, D) for w in attn.kv_net.weight.chunk(2, dim=0))
    W_r = attn.position.r_net.weight.view(H, DH, D)
    out = torch.zeros(B, T, H, DH, dtype=h.dtype)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                q = W_q[n] @ h[b, i]
                scores = []
                for j in range(M + T):
                    k = W_k[n] @ context[b, j]
                    distance = M + i - j
                    r = W_r[n] @ sinusoid_table(torch.tensor([max(distance, 0)], dtype=h.dtype), D)[0]
                    a = q @ k                   # (a) content
                    b_term = q @ r              # (b) content-dependent position
                    c = attn.position.u[n] @ k           # (c) global content bias
                    d = attn.position.position_bias[n] @ r  # (d) global position bias
                    score = (a + b_term + c + d) / math.sqrt(DH)
                    scores.append(score if mask[b, i, j] else torch.tensor(float("-inf"), dtype=h.dtype))
                weights = torch.softmax(torch.stack(scores), dim=0)
                values = torch.stack([W_v[n] @ context[b, j] for j in range(M + T)])
                out[b, i, n] = weights @ values
    return attn.out_net(out.reshape(B, T, H * DH))


@pytest.mark.parametrize("grad", [False, True], ids=["acting", "training"])
def test_relative_attention_equals_the_four_terms(grad):
    """Both execution paths of :meth:`MultiHeadAttention.attend`: the fused kernel when acting, and
    the path with a differentiable bias when training (mutation caught: the training path's queries
    left unscaled)."""
    torch.manual_seed(0)
    attn = build_attention("relative", D, H, DH, max_distance=M).double()
    with torch.no_grad():  # non-trivial u, v so terms (c) and (d) matter
        attn.position.u.normal_()
        attn.position.position_bias.normal_()
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    valid = torch.tensor([[False, True, True, True, True], [True] * M])
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[1, 4] = True
    mask = attention_mask(valid, starts, M)
    with torch.set_grad_enabled(grad):
        fast, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
    assert fast.requires_grad == grad
    with torch.no_grad():
        slow = naive_relative_attention(attn, h, memory, mask)
    torch.testing.assert_close(fast, slow, atol=1e-10, rtol=0)


def test_rel_shift_aligns_every_row_to_its_distances():
    K = M + T
    distances = torch.arange(K - 1, -1, -1.0)  # the raw layout: column k holds distance K-1-k
    raw = distances.expand(T, K).clone()
    shifted = rel_shift(raw)
    for i in range(T):
        for j in range(i + M + 1):  # every key not in the future
            assert shifted[i, j] == M + i - j


def test_relative_position_terms_project_the_sinusoid_of_each_distance():
    """``W_kR R`` with ``R_d = [sin(d ω_i), cos(d ω_i)]``, ``ω_i = 10000^(-2i/D)``, distances descending."""
    attn = build_attention("relative", D, H, DH, max_distance=M).double()
    frequencies = 10000 ** (-torch.arange(0, D, 2.0, dtype=torch.float64) / D)
    for distance in (0, 3, M):
        R = torch.cat([torch.sin(distance * frequencies), torch.cos(distance * frequencies)])
        expected = (attn.position.r_net.weight @ R).view(H, DH)
        torch.testing.assert_close(attn.position_terms()[:, M - distance], expected)
