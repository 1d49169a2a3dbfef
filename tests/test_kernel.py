"""The attention kernel (policies/attention/layer.py) and the layer around it: content attention scaled by
``1/√d_head``, no NaN at an episode's first step for any attention, unknown names refused, shared records
gathered into the joined layout."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies.attention import ATTENTIONS
from policies.attention.layer import SharedRecords, join_memory, make_attention
from policies.window import (
    attention_mask,
)

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def test_content_attention_masks_memory_and_is_scaled_by_head_dim():
    torch.manual_seed(0)
    attn = build_attention("none", D, H, DH, max_distance=M).double()
    h, memory = torch.randn(1, 1, D, dtype=torch.float64), torch.randn(1, M, D, dtype=torch.float64)
    mask = torch.ones(1, 1, M + 1, dtype=torch.bool)
    mask[..., :2] = False
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        q = attn.q_net(h).view(1, 1, H, DH).transpose(1, 2)  # [B, H, T, d_head]
        k, v = attn.keys_values(torch.cat([memory[:, 2:], h], dim=1))
        expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(DH), dim=-1) @ v
        expected = attn.out_net(expected.transpose(1, 2).reshape(1, 1, -1))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("name", list(ATTENTIONS))
def test_first_step_of_an_episode_has_no_nan(name):
    """Every memory slot invalid (episode start): the query still sees itself, output finite."""
    attn = make_attention(name, D, H, DH, max_distance=M)
    valid = torch.zeros(B, M, dtype=torch.bool)
    starts = torch.ones(B, T, dtype=torch.bool)  # every step starts a new one-step episode
    mask = attention_mask(valid, starts, M)
    assert mask.sum(-1).eq(1).all()
    out, _ = attn(torch.randn(B, T, D), attn.keys_values(torch.randn(B, M, D) * 1e6), mask, attn.position_terms())
    assert torch.isfinite(out).all()


def test_unknown_attention_names_the_valid_ones():
    with pytest.raises(ValueError, match="'rotary'.*valid attentions: ") as error:
        make_attention("rotary", D, H, DH, max_distance=M)
    assert all(name in str(error.value) for name in ATTENTIONS)


@pytest.mark.parametrize("T", [1, 3])
def test_join_memory_gathers_shared_records_into_the_windows_and_their_gradients_back(T):
    """Shared records joined with the segment equal the gathered windows concatenated with it, and the
    gradient of every record is the sum over the window slots that hold it."""
    torch.manual_seed(0)
    N, M, R, H, d = 5, 4, 7, 2, 3
    table = torch.randn(R, H, d, requires_grad=True)
    slots = torch.randint(0, R, (N, M))
    segment = torch.randn(N, H, T, d, requires_grad=True)
    shared = SharedRecords(table, slots)
    joined, joined_again = join_memory((shared, shared), segment, segment)
    torch.testing.assert_close(joined_again, joined, rtol=0, atol=0)
    assert joined.shape == (N, H, M + T, d) and joined.is_contiguous()
    expected = torch.cat([table[slots].transpose(1, 2), segment], dim=2)
    torch.testing.assert_close(joined, expected, rtol=0, atol=0)
    weights = torch.randn(N, H, M + T, d)
    table_grad, segment_grad = torch.autograd.grad((joined * weights).sum(), (table, segment))
    summed = torch.zeros(R, H, d).index_add_(0, slots.flatten(), weights[:, :, :M].transpose(1, 2).flatten(0, 1))
    torch.testing.assert_close(table_grad, summed)
    torch.testing.assert_close(segment_grad, weights[:, :, M:])
    windows = expected[:, :, :M]
    for plain in join_memory((windows, windows), segment, segment):
        torch.testing.assert_close(plain, expected, rtol=0, atol=0)
