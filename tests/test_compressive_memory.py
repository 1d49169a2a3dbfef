"""Compressive memory (``compressive``) against plain relative attention and a per-query reference."""

from __future__ import annotations

import math

import pytest
import torch

from policies.compressive_memory import CompressiveAttention
from policies.memory import attention_mask
from policies.positional import sinusoid_table
from policies.relative_attention import RelativeMultiHeadAttention

B, T, D, H, DH = 2, 5, 12, 3, 4


def inputs(M: int):
    torch.manual_seed(1)
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    valid = torch.tensor([[False, False] + [True] * (M - 2), [True] * M])  # env 0: an episode began M - 2 ago
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[1, 3] = True
    return h, memory, attention_mask(valid, starts, M)


def test_compression_rate_one_is_a_longer_fifo():
    """``c = 1``: every compressed slot is one step at its own distance, so the attention equals
    Transformer-XL attention over the whole window (mutations caught: a slot's position term taken at
    the wrong distance, blocks shifted by one step)."""
    M = 7
    torch.manual_seed(0)
    attn = CompressiveAttention(D, H, DH, max_distance=M, fifo_length=2, compression_rate=1).double()
    with torch.no_grad():  # non-trivial u and v
        attn.u.normal_()
        attn.position_bias.normal_()
    relative = RelativeMultiHeadAttention(D, H, DH, max_distance=M).double()
    relative.load_state_dict(attn.state_dict())
    h, memory, mask = inputs(M)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected, _ = relative(h, relative.keys_values(memory), mask, relative.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def naive_compressive(attn: CompressiveAttention, h, memory, mask):
    """One softmax per query over its FIFO steps and the means of its visible older blocks, written out."""
    M, f, c = attn.max_distance, attn.fifo_length, attn.compression_rate
    context = torch.cat([memory, h], dim=1)
    q_all = attn.queries(h)
    k_all, v_all = attn.keys_values(context)
    r = attn.r_net(sinusoid_table(torch.arange(M + 1, dtype=h.dtype), D)).view(M + 1, H, DH)  # W_kR R_d
    out = torch.zeros(B, H, T, DH, dtype=h.dtype)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                q = q_all[b, n, i]
                scores, values = [], []
                for j in range(M + T):  # FIFO and segment steps
                    distance = M + i - j
                    if mask[b, i, j] and distance <= f:
                        scores.append((q + attn.u[n]) @ k_all[b, n, j] + (q + attn.position_bias[n]) @ r[distance, n])
                        values.append(v_all[b, n, j])
                for slot in range(math.ceil((M - f) / c)):
                    keys = [M + i - d for d in range(f + slot * c + 1, f + (slot + 1) * c + 1)
                            if M + i - d >= 0 and mask[b, i, M + i - d]]
                    if keys:
                        k_mean = k_all[b, n, keys].mean(0)
                        middle = min(f + slot * c + (c + 1) // 2, M)
                        scores.append((q + attn.u[n]) @ k_mean + (q + attn.position_bias[n]) @ r[middle, n])
                        values.append(v_all[b, n, keys].mean(0))
                weights = torch.softmax(torch.stack(scores) / math.sqrt(DH), dim=0)
                out[b, n, i] = weights @ torch.stack(values)
    return attn.merge(out)


@pytest.mark.parametrize("fifo_length,rate", [(2, 2), (3, 4)])
def test_compressed_slots_are_the_means_of_their_blocks(fifo_length, rate):
    """Blocks of ``c`` steps beyond the FIFO, each the mean of its visible steps (a partial last block,
    an episode start inside a block), one softmax with the FIFO (mutations caught: counting hidden steps
    in a block's mean, a FIFO one step too long, sums instead of means)."""
    M = 9
    torch.manual_seed(0)
    attn = CompressiveAttention(D, H, DH, max_distance=M, fifo_length=fifo_length, compression_rate=rate).double()
    h, memory, mask = inputs(M)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected = naive_compressive(attn, h, memory, mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_bad_compression_options_name_the_valid_range():
    with pytest.raises(ValueError, match="fifo_length must be in 1..9.*got 10"):
        CompressiveAttention(D, H, DH, max_distance=9, fifo_length=10)
    with pytest.raises(ValueError, match="compression_rate must be >= 1, got 0"):
        CompressiveAttention(D, H, DH, max_distance=9, compression_rate=0)
