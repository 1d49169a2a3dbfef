"""Absolute positions over the window (``absolute``) against a vanilla Transformer written out per query."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies.attention.layer import MultiHeadAttention
from tests.conftest import attention_inputs

B, T, D, H, DH, M = 2, 5, 12, 3, 4, 6


def inputs():
    return attention_inputs(T, D, M)


def vanilla(attn: MultiHeadAttention, h, memory, mask):
    """Each query's window as a sequence: inputs plus ``P`` of their window position (the oldest slot 0, the
    query M), then plain softmax attention with the same projections."""
    context = torch.cat([memory, h], dim=1)
    table = attn.position.encoding(torch.arange(M + 1)).to(h.dtype)
    out = torch.zeros(B, H, T, DH, dtype=h.dtype)
    for b in range(B):
        for i in range(T):
            keys = [j for j in range(M + T) if mask[b, i, j]]
            window = torch.stack([context[b, j] + table[M - (M + i - j)] for j in keys])  # [n, D]
            q = attn.q_net(h[b, i] + table[M]).view(H, DH)
            k, v = attn.kv_net(window).view(len(keys), 2, H, DH).unbind(1)
            weights = torch.softmax(torch.einsum("hd,nhd->hn", q, k) / math.sqrt(DH), dim=-1)
            out[b, :, i] = torch.einsum("hn,nhd->hd", weights, v)
    return attn.merge(out)


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "axial"])
def test_absolute_attention_is_a_vanilla_transformer_over_each_window(encoding):
    """Mutations caught: positions counted from the query (``P_d`` instead of ``P_{M−d}``), the query's own
    position left out, the values without their positions."""
    torch.manual_seed(0)
    attn = build_attention("absolute", D, H, DH, max_distance=M, encoding=encoding).double()
    if encoding != "sinusoidal":  # learned tables start at N(0, 0.02): make their terms count
        with torch.no_grad():
            for parameter in attn.position.encoding.parameters():
                parameter.normal_()
    h, memory, mask = inputs()
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected = vanilla(attn, h, memory, mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_bad_encodings_name_the_valid_ones():
    with pytest.raises(ValueError, match="encoding='rotary': expected one of sinusoidal, learned, axial"):
        build_attention("absolute", D, H, DH, max_distance=M, encoding="rotary")
