"""Causal linear attention (Katharopoulos et al. 2020) against its defining sums, and its
recurrent form against its parallel form."""

from __future__ import annotations

import pytest
import torch

from policies.backbones.linear_attention import EPSILON, CausalLinearAttention, feature_map

B, T, D, H, DH, PREFIX = 2, 7, 12, 3, 4, 5


def carry_of(attn: CausalLinearAttention, prefix: torch.Tensor) -> torch.Tensor:
    """``[S | z]`` of the steps ``prefix`` ``[B, P, D]``: ``S = Σ φ(k) vᵀ``, ``z = Σ φ(k)``."""
    k, v = attn.keys_values(prefix)
    k = feature_map(k)
    return torch.cat([k.transpose(-1, -2) @ v, k.sum(2).unsqueeze(-1)], dim=-1)


def test_segment_equals_the_sums_over_the_episode_so_far():
    """``y_i = Σ_j φ(q_i)ᵀφ(k_j) v_j / Σ_j φ(q_i)ᵀφ(k_j)`` over the steps ``j ≤ i`` of ``i``'s episode,
    the carried prefix included while no start intervened (mutation caught: a carry that is not
    hidden after an episode start inside the segment)."""
    torch.manual_seed(0)
    attn = CausalLinearAttention(D, H, DH).double()
    prefix, h = torch.randn(B, PREFIX, D, dtype=torch.float64), torch.randn(B, T, D, dtype=torch.float64)
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[1, 3] = True
    with torch.no_grad():
        out, carry = attn(h, carry_of(attn, prefix), starts)
        context = torch.cat([prefix, h], dim=1)
        q = feature_map(attn.queries(h))
        k, v = attn.keys_values(context)
        k = feature_map(k)
        expected = torch.zeros(B, H, T, DH, dtype=torch.float64)
        for b in range(B):
            first = PREFIX + 3 if b == 1 else 0
            for i in range(T):
                keys = range(first if PREFIX + i >= first else 0, PREFIX + i + 1)
                weights = torch.stack([(q[b, :, i] * k[b, :, j]).sum(-1) for j in keys], dim=-1)  # [H, J]
                values = torch.stack([v[b, :, j] for j in keys], dim=1)  # [H, J, d]
                expected[b, :, i] = (weights.unsqueeze(-1) * values).sum(1) / (weights.sum(-1, keepdim=True) + EPSILON)
        torch.testing.assert_close(out, attn.merge(expected), atol=1e-9, rtol=0)
        # the carry after the segment: the whole history for env 0, the episode begun at step 3 for env 1
        torch.testing.assert_close(carry[0], carry_of(attn, context[:1])[0])
        torch.testing.assert_close(carry[1], carry_of(attn, h[1:, 3:])[0])


def test_recurrent_form_equals_parallel_form():
    """Step by step (``S ← S + φ(k_t) v_tᵀ``) equals the whole segment at once, with a start mid-segment."""
    torch.manual_seed(1)
    attn = CausalLinearAttention(D, H, DH)
    h = torch.randn(B, T, D)
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[0, 4] = True
    carry0 = carry_of(attn, torch.randn(B, PREFIX, D))
    with torch.no_grad():
        parallel, carry_parallel = attn(h, carry0, starts)
        carry, outputs = carry0, []
        for t in range(T):
            carry = carry * (~starts[:, t]).float().view(-1, 1, 1, 1)
            y, carry = attn(h[:, t:t + 1], carry, torch.zeros(B, 1, dtype=torch.bool))
            outputs.append(y)
    torch.testing.assert_close(torch.cat(outputs, dim=1), parallel, atol=1e-5, rtol=0)
    torch.testing.assert_close(carry, carry_parallel, atol=1e-4, rtol=1e-5)


def test_performer_features_estimate_softmax_attention():
    """FAVOR+ (Choromanski et al. 2021): linear attention with ``m`` positive random features estimates
    ``softmax(qᵀk/√d)`` attention, the more closely the more features (mutation caught: features
    without the ``−‖x‖²/2`` term, whose key factor biases the estimate)."""
    torch.manual_seed(0)
    h = 0.5 * torch.randn(B, T, D, dtype=torch.float64)
    reference = CausalLinearAttention(D, H, DH).double()
    with torch.no_grad():
        q, (k, v) = reference.queries(h), reference.keys_values(h)
        scores = (q @ k.transpose(-1, -2) / DH ** 0.5).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(),
                                                                   float("-inf"))
        exact = reference.merge(torch.softmax(scores, dim=-1) @ v)
    errors = []
    for m in (8, 128, 4096):
        attn = CausalLinearAttention(D, H, DH, feature_map="favor", n_features=m).double()
        attn.load_state_dict({**attn.state_dict(), **reference.state_dict()})
        with torch.no_grad():
            out, _ = attn(h, torch.zeros(B, H, m, DH + 1, dtype=torch.float64), torch.zeros(B, T, dtype=torch.bool))
        errors.append((out - exact).abs().max().item())
    assert errors[2] < errors[0] / 4 and errors[2] < 0.05, errors


def test_unknown_feature_map_names_the_valid_ones():
    with pytest.raises(ValueError, match="feature_map='relu': expected one of elu, favor"):
        CausalLinearAttention(D, H, DH, feature_map="relu")
