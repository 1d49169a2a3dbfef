"""Linformer attention (``linformer``) against plain softmax attention and a per-query reference of its
distance-indexed projections, its initial projections, and its option errors."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies.attention.layer import MultiHeadAttention, make_attention
from policies.attention.linformer import block_projection
from policies.window import attention_mask

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def inputs(valid: torch.Tensor, starts: torch.Tensor):
    """A float64 segment, a memory and the mask of ``valid`` slots and episode ``starts``."""
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    return h, memory, attention_mask(valid, starts, M)


def identity_linformer() -> tuple[MultiHeadAttention, MultiHeadAttention]:
    """``k = M + 1`` and ``E = F = I`` over distances, and ``none`` attention with the same weights."""
    torch.manual_seed(0)
    linformer = build_attention("linformer", D, H, DH, max_distance=M, rank=M + 1).double()
    with torch.no_grad():
        linformer.pattern.key_projection.copy_(torch.eye(M + 1).expand(H, -1, -1))
        linformer.pattern.value_projection.copy_(torch.eye(M + 1).expand(H, -1, -1))
    content = build_attention("none", D, H, DH, max_distance=M).double()
    content.load_state_dict({k: v for k, v in linformer.state_dict().items() if k in content.state_dict()})
    return linformer, content


def test_identity_projections_give_softmax_attention_over_the_valid_keys():
    """With every window distance visible, ``linformer`` equals ``none``; with episode starts and a partial
    memory, each masked distance is an empty slot (score 0, value 0) beside the valid keys.
    Mutation caught: projecting the keys without the mask (keys from before an episode start leak in)."""
    linformer, content = identity_linformer()
    h, memory, full = inputs(torch.ones(B, M, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool))
    with torch.no_grad():
        out, _ = linformer(h, linformer.keys_values(memory), full)
        expected, _ = content(h, content.keys_values(memory), full)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)

    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[0, 3] = starts[1, 1] = starts[1, 2] = True
    valid = torch.tensor([[False, False, True, True, True], [True] * M])
    h, memory, mask = inputs(valid, starts)
    with torch.no_grad():
        out, _ = linformer(h, linformer.keys_values(memory), mask)
        q, k, v = content.segment_qkv(h, content.keys_values(memory))
        weights = ((q @ k.transpose(-1, -2)) / math.sqrt(DH)).exp() * mask.unsqueeze(1)
        empty = (M + 1 - mask.sum(-1)).unsqueeze(1).unsqueeze(-1)  # [B, 1, T, 1] masked distances
        expected = content.merge((weights @ v) / (weights.sum(-1, keepdim=True) + empty))
    assert empty.sum() > 0
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def naive_linformer(attn: MultiHeadAttention, q, k, v, mask):
    """``k̃_i[r] = Σ_d E[r, d] m_i(d) k_{i−d}``, ``ṽ_i[r]`` likewise with ``F``, then
    ``softmax(q_iᵀk̃_i/√d) ṽ_i``, one query at a time."""
    E, F = attn.pattern.key_projection, attn.pattern.value_projection
    out = torch.zeros(B, H, T, DH, dtype=q.dtype)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                k_proj = torch.zeros(attn.pattern.rank, DH, dtype=q.dtype)
                v_proj = torch.zeros(attn.pattern.rank, DH, dtype=q.dtype)
                for d in range(M + 1):
                    j = M + i - d  # key index in [memory; segment]
                    if mask[b, i, j]:
                        k_proj += E[n, :, d].unsqueeze(1) * k[b, n, j]
                        v_proj += F[n, :, d].unsqueeze(1) * v[b, n, j]
                out[b, n, i] = torch.softmax(k_proj @ q[b, n, i] / math.sqrt(DH), dim=0) @ v_proj
    return attn.merge(out)


def test_vectorised_attention_equals_the_per_query_projections():
    """Random ``E``, ``F`` (rank 3 of 6 distances), random valid slots and episode starts.
    Mutation caught: indexing the projections by key position ``j`` instead of the distance ``i − j``."""
    torch.manual_seed(0)
    attn = build_attention("linformer", D, H, DH, max_distance=M, rank=3).double()
    with torch.no_grad():
        attn.pattern.key_projection.normal_()
        attn.pattern.value_projection.normal_()
    valid = torch.rand(B, M) > 0.3
    starts = torch.rand(B, T) > 0.7
    h, memory, mask = inputs(valid, starts)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        expected = naive_linformer(attn, *attn.segment_qkv(h, attn.keys_values(memory)), mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_initial_projections_average_contiguous_runs_of_distances():
    """Slot ``r`` pools the ``r``-th run of the window, nearest first; ``k = M + 1`` gives the identity.
    Mutation caught: runs of ``⌈n/k⌉`` distances (the last run short, or empty)."""
    third, half = 1 / 3, 1 / 2
    torch.testing.assert_close(block_projection(3, 7), torch.tensor([
        [third, third, third, 0, 0, 0, 0],
        [0, 0, 0, half, half, 0, 0],
        [0, 0, 0, 0, 0, half, half]]))
    torch.testing.assert_close(block_projection(6, 6), torch.eye(6))
    attn = make_attention("linformer", D, H, DH, max_distance=M)
    assert attn.pattern.rank == M + 1  # the default, min(16, M + 1)
    torch.testing.assert_close(attn.pattern.key_projection, torch.eye(M + 1).expand(H, -1, -1))


@pytest.mark.parametrize(("rank", "message"), [(0, "rank=0: expected an integer >= 1"),
                                             (M + 2, rf"rank must be in 1\.\.{M + 1} .*got {M + 2}")])
def test_a_rank_outside_the_window_names_the_valid_range(rank, message):
    with pytest.raises(ValueError, match=message):
        make_attention("linformer", D, H, DH, max_distance=M, options={"rank": rank})


def test_unknown_options_name_the_valid_one():
    with pytest.raises(ValueError, match="unknown option.*'k'.*valid options: rank"):
        make_attention("linformer", D, H, DH, max_distance=M, options={"k": 2})
