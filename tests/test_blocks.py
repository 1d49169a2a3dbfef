"""Chunked feed-forward (Reformer, Kitaev et al. 2020, Sec. 3): the same function and gradients as one
pass, with less kept for backward. The memory invariants run with ``ff_chunks > 1`` through the
``gtrxl-ff-chunks`` case of ``tests/test_backbones.py``."""

from __future__ import annotations

import copy

import pytest
import torch

from experiments.activation_bytes import saved_activation_bytes
from policies.backbones.transformer_xl import PositionwiseFeedForward
from policies.registry import make_backbone

D, D_INNER = 8, 32


def chunked_copy(layer: PositionwiseFeedForward, chunks: int) -> PositionwiseFeedForward:
    twin = copy.deepcopy(layer)
    twin.chunks = chunks
    return twin


@pytest.mark.parametrize("chunks", [2, 3, 7, 10])
def test_chunked_equals_unchunked(chunks):
    """Outputs, input gradients and parameter gradients agree to float64 precision, with T = 7 not divisible
    by 2 or 3, one position per piece (7) and more pieces than positions (10)
    (mutation caught: pieces detached from the input before checkpointing, so no input gradient)."""
    torch.manual_seed(0)
    whole = PositionwiseFeedForward(D, D_INNER).double()
    chunked = chunked_copy(whole, chunks)
    x = torch.randn(3, 7, D, dtype=torch.float64)
    results = []
    for layer in (whole, chunked):
        inputs = x.clone().requires_grad_()
        y = layer(inputs)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        results.append((y.detach(), inputs.grad, [p.grad for p in layer.parameters()]))
    (y_whole, dx_whole, grads_whole), (y_chunked, dx_chunked, grads_chunked) = results
    torch.testing.assert_close(y_chunked, y_whole, atol=1e-13, rtol=0)
    torch.testing.assert_close(dx_chunked, dx_whole, atol=1e-13, rtol=0)
    for a, b in zip(grads_chunked, grads_whole, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_chunks_keep_less_for_backward():
    """With 4 pieces nothing ``d_inner`` wide is kept for backward: the pieces are recomputed
    (mutation caught: pieces run without checkpointing, which keeps every piece's activation)."""
    torch.manual_seed(0)
    whole = PositionwiseFeedForward(D, D_INNER)
    chunked = chunked_copy(whole, 4)
    x = torch.randn(2, 16, D, requires_grad=True)
    saved_whole = saved_activation_bytes(lambda: whole(x), whole.parameters())
    saved_chunked = saved_activation_bytes(lambda: chunked(x), chunked.parameters())
    inner = x.shape[0] * x.shape[1] * D_INNER * 4  # one float32 activation of width d_inner
    assert saved_whole >= inner
    assert saved_chunked < saved_whole - inner // 2, (saved_chunked, saved_whole)


def test_chunked_backbone_keeps_less_for_backward():
    """A two-layer GTrXL with ``ff_chunks=4`` saves less for a training segment than the same one without."""
    x = torch.randn(16, 3, 5)
    starts = torch.zeros(16, 3, dtype=torch.bool)
    saved = {}
    for chunks in (1, 4):
        torch.manual_seed(0)
        backbone = make_backbone("gtrxl", 5, d_model=16, n_heads=2, memory_length=4, ff_chunks=chunks)
        state = backbone.initial_state(3)
        saved[chunks] = saved_activation_bytes(lambda b=backbone, s=state: b.forward_sequence(x, s, starts),
                                               backbone.parameters())
    assert saved[4] < saved[1], saved


@pytest.mark.parametrize("backbone", ["gtrxl", "trxl", "ut-act", "linear"])
@pytest.mark.parametrize("chunks", [0, -1, 1.5])
def test_ff_chunks_must_be_a_positive_integer(backbone, chunks):
    with pytest.raises(ValueError, match=r"ff_chunks=.*: expected an integer >= 1"):
        make_backbone(backbone, 5, d_model=16, n_heads=2, ff_chunks=chunks)
