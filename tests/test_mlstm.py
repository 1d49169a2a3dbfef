"""The mLSTM (``policies/backbones/mlstm.py``) against the unstabilised matrix-memory recurrence of Beck et al. (2024)
computed step by step, across chunks and episode starts, and xLSTM's gate initialisation (mutations caught: the
normaliser's floor of 1 dropped, the carry kept after an episode start, the keys left unscaled, a chunk boundary
that loses the stabiliser)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from policies.backbones.mlstm import MatrixLSTM
from policies.window import Window


def reference(model: MatrixLSTM, x: torch.Tensor, carry: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """C_t = f C_{t−1} + i v kᵀ, n_t = f n_{t−1} + i k, h̃ = C q / max(|nᵀq|, 1), in true (unstabilised) values."""
    h = model.embed(x)
    T, B = starts.shape
    for n, layer in enumerate(model.layers):
        H, d, _ = layer.sizes
        C, nrm, m = carry[:, n].split([H * d * d, H * d, H], dim=-1)
        scale = torch.exp(m)  # the carry holds C̃ = C e^{−m}
        C, nrm = C.view(B, H, d, d) * scale[..., None, None], nrm.view(B, H, d) * scale[..., None]
        out = []
        for t in range(T):
            u = layer.norm(h[t])
            q, k, v = layer.qkv(u).view(B, 3, H, d).unbind(1)
            k = k / math.sqrt(d)
            i_tilde, f_tilde = layer.gates(u).view(B, 2, H).unbind(1)
            keep = (~starts[t]).view(B, 1).double()
            f, i = torch.sigmoid(f_tilde) * keep, torch.exp(i_tilde)
            C = f[..., None, None] * C + i[..., None, None] * v.unsqueeze(-1) * k.unsqueeze(-2)
            nrm = f.unsqueeze(-1) * nrm + i.unsqueeze(-1) * k
            h_tilde = (C @ q.unsqueeze(-1)).squeeze(-1) / torch.clamp((nrm * q).sum(-1).abs(), min=1).unsqueeze(-1)
            out.append(h[t] + layer.out(torch.sigmoid(layer.output_gate(u)) * h_tilde.reshape(B, H * d)))
        h = torch.stack(out)
    return h


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_chunked_sequence_equals_the_recurrence(chunk_size):
    torch.manual_seed(0)
    model = MatrixLSTM(3, d_model=8, n_heads=2, n_layers=2, chunk_size=chunk_size).double()
    with torch.no_grad():  # gates that depend on the input (xLSTM starts them at 0)
        for layer in model.layers:
            layer.gates.weight.normal_(0, 1)
    T, B = 10, 3
    x = torch.randn(T, B, 3, dtype=torch.float64)
    carry = torch.randn(B, 2, *model.record_shape[1:], dtype=torch.float64)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[2, 1] = starts[3, 1] = starts[7, 0] = True
    state = Window(carry.unsqueeze(1), torch.ones(B, 1, dtype=torch.bool))
    y, _, _ = model.forward_sequence(x, state, starts)
    torch.testing.assert_close(y, reference(model, x, carry, starts), atol=1e-10, rtol=0)


def test_gates_start_as_in_xlstm():
    layer = MatrixLSTM(3, d_model=64, n_heads=4).layers[0]
    assert not layer.gates.weight.any()
    torch.testing.assert_close(layer.gates.bias[4:].detach(), torch.tensor([3.0, 4.0, 5.0, 6.0]))
    assert F.logsigmoid(layer.gates.bias[4:]).exp().min() > 0.95  # every head keeps 95 % a step at first
