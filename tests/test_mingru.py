"""minGRU (``policies/backbones/mingru.py``) against the equations of Feng et al. (2024) computed step by step, and
the spread of its gates' timescales (mutations caught: the gate reading ``1 − z`` for ``z``, a layer reading the input
instead of the layer below, the bias left at 0)."""

from __future__ import annotations

import torch

from policies.backbones.mingru import MinGRU
from policies.window import Window


def reference(model: MinGRU, x: torch.Tensor, h0: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """z = σ(W_z x), h̃ = W_h x, h = (1 − z) ⊙ h + z ⊙ h̃, layer by layer and step by step; h = 0 at a start."""
    for n, gate in enumerate(model.gates):
        W_z, W_h = gate.weight.chunk(2)
        b_z, b_h = gate.bias.chunk(2)
        h, out = h0[:, n], []
        for t in range(x.shape[0]):
            h = h * (~starts[t]).unsqueeze(-1)
            z = torch.sigmoid(x[t] @ W_z.T + b_z)
            h = (1 - z) * h + z * (x[t] @ W_h.T + b_h)
            out.append(h)
        x = torch.stack(out)
    return x


def test_sequence_equals_the_paper_recurrence():
    torch.manual_seed(0)
    model = MinGRU(3, hidden_size=6, n_layers=2).double()
    x, h0 = torch.randn(9, 2, 3, dtype=torch.float64), torch.randn(2, 2, 6, dtype=torch.float64)
    starts = torch.zeros(9, 2, dtype=torch.bool)
    starts[4, 1] = True
    state = Window(h0.unsqueeze(1), torch.ones(2, 1, dtype=torch.bool))
    y, after, _ = model.forward_sequence(x, state, starts)
    torch.testing.assert_close(y, reference(model, x, h0, starts), atol=1e-12, rtol=0)
    torch.testing.assert_close(after.memory[:, 0, -1], y[-1], atol=1e-12, rtol=0)


def test_update_gate_bias_spreads_timescales_up_to_t_max():
    torch.manual_seed(0)
    model = MinGRU(3, hidden_size=512, max_timescale=50.0)
    assert len(model.gates) == 2
    z = torch.sigmoid(model.gates[1].bias[:512].detach())  # at a zero input
    assert z.min() >= 1 / 50 - 1e-6 and z.max() <= 1 - 1 / 50 + 1e-6
    assert 1 / z.min() > 40 and 0.4 < (z > 0.5).float().mean() < 0.6  # slow channels, and half pass the input
