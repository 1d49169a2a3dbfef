"""Global-local attention (``global-local``) between its two limits, ``relative`` and ``local``, and written out."""

from __future__ import annotations

import math

import torch
from conftest import build_attention

from policies.attention.layer import MultiHeadAttention, sinusoid_table
from tests.conftest import attention_inputs

B, T, D, H, DH, M, W = 2, 5, 12, 3, 4, 7, 2


def inputs():
    return attention_inputs(T, D, M)


def gated(bias: float | None) -> MultiHeadAttention:
    torch.manual_seed(0)
    attn = build_attention("global-local", D, H, DH, max_distance=M, local_window=W).double()
    with torch.no_grad():
        attn.position.u.normal_()
        attn.position.position_bias.normal_()
        attn.pattern.global_weight.normal_()
        if bias is not None:
            attn.pattern.global_bias.fill_(bias)
    return attn


def run(attn, h, memory, mask):
    with torch.no_grad():
        return attn(h, attn.keys_values(memory), mask, attn.position_terms())[0]


def test_every_step_global_is_full_relative_attention():
    """Mutation caught: the gate's bias left out (far steps would stay at half weight)."""
    attn = gated(bias=60.0)  # σ = 1 − 1e-26 on every step
    relative = build_attention("relative", D, H, DH, max_distance=M).double()
    relative.load_state_dict(attn.state_dict(), strict=False)
    h, memory, mask = inputs()
    torch.testing.assert_close(run(attn, h, memory, mask), run(relative, h, memory, mask), atol=1e-12, rtol=0)


def test_no_step_global_is_local_attention():
    """Mutation caught: the band one step short or long (``W`` vs ``W ± 1``)."""
    attn = gated(bias=-1e4)  # σ = e^-10000 beyond the window
    local = build_attention("local", D, H, DH, max_distance=M, local_window=W).double()
    local.load_state_dict(attn.state_dict(), strict=False)
    h, memory, mask = inputs()
    torch.testing.assert_close(run(attn, h, memory, mask), run(local, h, memory, mask), atol=1e-12, rtol=0)


def test_far_steps_are_weighted_by_their_own_globalness():
    """Written out per query: ``relative``'s score plus ``log σ(w_hᵀk_j/√d + b_h)`` for keys beyond the window
    (mutations caught: the gate read from the query, the √d missing, the gate's bias left out)."""
    attn = gated(bias=0.7)
    h, memory, mask = inputs()
    context = torch.cat([memory, h], dim=1)
    q_all = attn.queries(h)
    k_all, v_all = attn.keys_values(context)
    r = attn.position.r_net(sinusoid_table(torch.arange(M + 1, dtype=h.dtype), D)).view(M + 1, H, DH)
    out = torch.zeros(B, H, T, DH, dtype=h.dtype)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                q = q_all[b, n, i]
                keys = [j for j in range(M + T) if mask[b, i, j]]
                scores = []
                for j in keys:
                    d = M + i - j
                    position = attn.position
                    score = ((q + position.u[n]) @ k_all[b, n, j]
                             + (q + position.position_bias[n]) @ r[d, n]) / math.sqrt(DH)
                    if d > W:
                        pattern = attn.pattern
                        gate = pattern.global_weight[n] @ k_all[b, n, j] / math.sqrt(DH) + pattern.global_bias[n]
                        score = score + torch.nn.functional.logsigmoid(gate)
                    scores.append(score)
                out[b, n, i] = torch.softmax(torch.stack(scores), 0) @ v_all[b, n, keys]
    with torch.no_grad():
        torch.testing.assert_close(run(attn, h, memory, mask), attn.merge(out), atol=1e-12, rtol=0)
