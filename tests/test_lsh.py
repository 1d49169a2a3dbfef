"""Reformer LSH attention (``lsh``) against a per-(query, key) reference."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies.attention.layer import MultiHeadAttention
from policies.window import attention_mask

B, M, T, D, H, DH = 2, 6, 5, 12, 3, 4


def naive_lsh(attn: MultiHeadAttention, h, memory, mask):
    """Shared-QK attention within shared buckets, hashes computed vector by vector."""
    context = torch.cat([memory, h], dim=1)
    W_q = attn.q_net.weight.view(H, DH, D)
    W_v = attn.kv_net.weight.view(H, DH, D)

    def bucket(x, r, n):
        if attn.pattern.n_buckets == 1:
            return 0
        rotated = x @ attn.pattern.rotations[r, n]
        return int(torch.argmax(torch.cat([rotated, -rotated])))

    out = torch.zeros(B, T, H, DH, dtype=h.dtype)
    for b in range(B):
        for n in range(H):
            keys = [W_q[n] @ context[b, j] for j in range(M + T)]
            for i in range(T):
                q = W_q[n] @ h[b, i]
                allowed = [bool(mask[b, i, j]) and any(bucket(q, r, n) == bucket(keys[j], r, n)
                                                       for r in range(attn.pattern.n_rounds)) for j in range(M + T)]
                if any(allowed[j] for j in range(M + T) if j != M + i):
                    allowed[M + i] = False  # not itself while another key is left
                scores = torch.stack([q @ (keys[j] / keys[j].norm()) / math.sqrt(DH) if allowed[j]
                                      else torch.tensor(float("-inf"), dtype=h.dtype) for j in range(M + T)])
                values = torch.stack([W_v[n] @ context[b, j] for j in range(M + T)])
                out[b, i, n] = torch.softmax(scores, dim=0) @ values
    return attn.out_net(out.reshape(B, T, H * DH))


@pytest.mark.parametrize("n_buckets", [1, 4])
def test_lsh_attention_equals_shared_qk_attention_within_buckets(n_buckets):
    """Mutations caught: separate keys (not shared-QK), unnormalised keys, a query seeing itself, hashing
    queries and keys with different rotations; ``n_buckets = 1`` is full shared-QK attention."""
    torch.manual_seed(0)
    attn = build_attention("lsh", D, H, DH, max_distance=M, n_buckets=n_buckets, n_rounds=2).double()
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[1, 3] = True
    mask = attention_mask(torch.tensor([[False] + [True] * (M - 1), [True] * M]), starts, M)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        expected = naive_lsh(attn, h, memory, mask)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_more_buckets_hide_more_keys():
    """Hashing restricts attention: with 8 buckets and one round, most keys fall in other buckets."""
    torch.manual_seed(0)
    attn = build_attention("lsh", D, H, DH, max_distance=M, n_buckets=8, n_rounds=1)
    k = attn.keys_values(torch.randn(1, 40, D))[0]
    same = attn.pattern.buckets(k)[0].unsqueeze(-1) == attn.pattern.buckets(k)[0].unsqueeze(-2)
    assert 0.05 < same.float().mean() < 0.5


def test_bad_hashing_options_name_the_valid_values():
    with pytest.raises(ValueError, match="n_buckets=3: expected one of 1, or an integer >= 2, a multiple of 2"):
        build_attention("lsh", D, H, DH, max_distance=M, n_buckets=3)
    with pytest.raises(ValueError, match="n_rounds=0: expected an integer >= 1"):
        build_attention("lsh", D, H, DH, max_distance=M, n_rounds=0)
