"""Fast and Forgetful Memory (``policies/backbones/ffm.py``) against the closed form of its aggregator (Morad et al.
2023, Sec. 4), its gated output, and the official initialisation (mutations caught: ``γ`` with a positive real part,
the input gate left out, the output gate's two paths swapped, the decays spaced the wrong way round)."""

from __future__ import annotations

import math

import torch

from policies.backbones.ffm import FastForgetfulMemory
from policies.window import Window


def reference(model: FastForgetfulMemory, x: torch.Tensor, S0: torch.Tensor) -> torch.Tensor:
    """S_{k+n} = γⁿ ⊙ S_k + Σ_{j=1..n} γ^{n−j} ⊙ x̃_{k+j} in closed form (one episode), then the gated output."""
    m, hidden = model.sizes
    value, skip, gates = model.pre(x).split([m, hidden, m + hidden], dim=-1)
    input_gate, output_gate = torch.sigmoid(gates).split([m, hidden], dim=-1)
    x_tilde = (value * input_gate).to(torch.complex128).unsqueeze(-1)  # [T, B, m, 1]
    gamma = torch.exp(torch.complex(-model.decay.clamp(min=1e-8).unsqueeze(1), model.frequency.unsqueeze(0)))
    outputs = []
    for n in range(1, x.shape[0] + 1):
        S = gamma**n * S0 + sum(gamma ** (n - j) * x_tilde[j - 1] for j in range(1, n + 1))
        z = model.mix(torch.view_as_real(S).flatten(-3))
        gate = output_gate[n - 1]
        outputs.append(model.norm(z) * gate + skip[n - 1] * (1 - gate))
    return torch.stack(outputs)


def test_sequence_equals_the_closed_form():
    torch.manual_seed(0)
    model = FastForgetfulMemory(3, hidden_size=8, memory_size=5, context_size=3, max_period=16).double()
    with torch.no_grad():
        model.decay[0] = -0.5  # a decay learned below zero is clamped: |γ| ≤ 1 still
    x, S0 = torch.randn(7, 2, 3, dtype=torch.float64), torch.randn(2, 5, 3, dtype=torch.complex128)
    state = Window(torch.view_as_real(S0).unsqueeze(1), torch.ones(2, 1, dtype=torch.bool))
    y, after, _ = model.forward_sequence(x, state, torch.zeros(7, 2, dtype=torch.bool))
    torch.testing.assert_close(y, reference(model, x, S0), atol=1e-10, rtol=0)
    assert model.gamma().abs().max() <= 1.0


def test_initialisation_is_the_official_one():
    model = FastForgetfulMemory(3, memory_size=32, context_size=4, max_period=1024)
    decay, periods = model.decay.detach(), 2 * math.pi / model.frequency.detach()
    torch.testing.assert_close(decay[0], torch.tensor(math.log(2) - 0.02))
    torch.testing.assert_close(torch.exp(-decay[-1] * 1024), torch.tensor(0.01))  # forgotten to 1 % at max_period
    assert (decay.diff() < 0).all()
    torch.testing.assert_close(periods, torch.tensor([1.0, 342.0, 683.0, 1024.0]))
    assert model.record_shape == (32, 4, 2)  # 256 reals: the POPGym setting
