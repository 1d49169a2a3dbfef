"""Adaptive attention span (policies/attention/adaptive_span.py): a full span is the full window, the
weights follow the soft mask, and the penalty and the task loss reach the span."""

from __future__ import annotations

import torch
from conftest import build_attention

from policies.window import (
    attention_mask,
)

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def test_adaptive_span_of_full_length_equals_relative_attention():
    """ζ = 1 (the initial span, the whole memory): the soft mask is 1 on every visible key."""
    torch.manual_seed(0)
    span = build_attention("adaptive-span", D, H, DH, max_distance=M).double()
    relative = build_attention("relative", D, H, DH, max_distance=M).double()
    relative.load_state_dict({k: v for k, v in span.state_dict().items() if k != "pattern.span_fraction"})
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    mask = attention_mask(torch.ones(B, M, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool), M)
    with torch.no_grad():
        out, _ = span(h, span.keys_values(memory), mask, span.position_terms())
        expected, _ = relative(h, relative.keys_values(memory), mask, relative.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_adaptive_span_weights_follow_the_soft_mask():
    """``a_ij ∝ m_z(d) exp(s_ij)`` with ``m_z(d) = clamp((R + z − d)/R, 0, 1)`` (Sukhbaatar et al. 2019),
    here M = 9, R = 2 and spans of 3, 4.5 and 9 steps (mutation caught: a ramp that starts at z − R)."""
    torch.manual_seed(0)
    M9 = 9
    span = build_attention("adaptive-span", D, H, DH, max_distance=M9).double()
    relative = build_attention("relative", D, H, DH, max_distance=M9).double()
    relative.load_state_dict({k: v for k, v in span.state_dict().items() if k != "pattern.span_fraction"})
    with torch.no_grad():
        span.pattern.span_fraction.copy_(torch.tensor([3.0, 4.5, 9.0], dtype=torch.float64) / M9)
    assert span.pattern.ramp == 2 and span.pattern.spans().tolist() == [3.0, 4.5, 9.0]
    h, memory = torch.randn(1, 1, D, dtype=torch.float64), torch.randn(1, M9, D, dtype=torch.float64)
    mask = torch.ones(1, 1, M9 + 1, dtype=torch.bool)
    distance = torch.arange(M9, -1, -1.0, dtype=torch.float64)  # keys M9 .. 0 steps back
    with torch.no_grad():
        q = relative.queries(h)
        k, v = relative.keys_values(torch.cat([memory, h], dim=1))
        terms = relative.position_terms()
        scores = (relative.position.content_query(q, terms) @ k.transpose(-1, -2)) * relative.scale
        scores = scores + relative.position.score(q, terms, M9 + 1)
        ramp = ((2 + torch.tensor([3.0, 4.5, 9.0]).view(-1, 1) - distance) / 2).clamp(0, 1)  # [H, K]
        weights = ramp.unsqueeze(1) * scores.exp()  # [1, H, 1, K]
        expected = relative.merge((weights / weights.sum(-1, keepdim=True)) @ v)
        out, _ = span(h, span.keys_values(memory), mask, span.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_adaptive_span_penalty_and_task_loss_reach_the_span():
    """The penalty pulls every span in; the task loss moves a span whose ramp covers keys."""
    attn = build_attention("adaptive-span", D, H, DH, max_distance=M)
    with torch.no_grad():
        attn.pattern.span_fraction.fill_(0.5)
    penalty = attn.aux_terms()["span"]
    penalty.backward()
    assert (attn.pattern.span_fraction.grad > 0).all() and attn.aux_loss_coefs == {"span": 1e-3}
    attn.zero_grad()
    mask = attention_mask(torch.ones(B, M, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool), M)
    out, _ = attn(torch.randn(B, T, D), attn.keys_values(torch.randn(B, M, D)), mask, attn.position_terms())
    out.square().sum().backward()
    assert torch.isfinite(attn.pattern.span_fraction.grad).all() and attn.pattern.span_fraction.grad.abs().sum() > 0
