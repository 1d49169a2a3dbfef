"""The Linear Recurrent Unit (``policies/backbones/lru.py``) against the equations of Orvieto et al. (2023) computed
step by step in complex arithmetic, and its ring initialisation (mutations caught: ``Re(C x)`` read with ``+Im`` for
``−Im``, ``γ`` left out, a phase drawn beyond ``max_phase``, an empty ring accepted)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from envs.rules import ConfigError
from policies.backbones.lru import LinearRecurrentUnit
from policies.window import Window


def reference(model: LinearRecurrentUnit, x: torch.Tensor, x0: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    h = model.embed(x)
    for n, layer in enumerate(model.layers):
        N = layer.nu_log.shape[0]
        lam = torch.exp(-torch.exp(layer.nu_log) + 1j * torch.exp(layer.theta_log))
        gamma = torch.exp(layer.gamma_log)
        B = torch.complex(layer.B[:N], layer.B[N:])
        C = torch.complex(layer.C[:, :N], -layer.C[:, N:])
        state, out = x0[:, n], []
        for t in range(x.shape[0]):
            u = layer.norm(h[t])
            state = lam * state * (~starts[t]).unsqueeze(-1) + gamma * (u.to(B.dtype) @ B.T)
            y = (state @ C.T).real + layer.D * u
            value, gate = layer.glu(F.gelu(y)).chunk(2, dim=-1)
            out.append(h[t] + value * torch.sigmoid(gate))
        h = torch.stack(out)
    return h


def test_sequence_equals_the_paper_recurrence():
    torch.manual_seed(0)
    model = LinearRecurrentUnit(3, d_model=6, d_state=5, n_layers=2).double()
    x, x0 = torch.randn(9, 2, 3, dtype=torch.float64), torch.randn(2, 2, 5, dtype=torch.complex128)
    starts = torch.zeros(9, 2, dtype=torch.bool)
    starts[3, 0] = True
    state = Window(torch.view_as_real(x0).unsqueeze(1), torch.ones(2, 1, dtype=torch.bool))
    y, _, _ = model.forward_sequence(x, state, starts)
    torch.testing.assert_close(y, reference(model, x, x0, starts), atol=1e-10, rtol=0)


def test_eigenvalues_start_on_the_ring():
    torch.manual_seed(0)
    layer = LinearRecurrentUnit(3, d_state=2000, r_min=0.5, r_max=0.9, max_phase=0.3).layers[0]
    modulus, phase = torch.exp(-torch.exp(layer.nu_log.detach())), torch.exp(layer.theta_log.detach())
    assert modulus.min() >= 0.5 - 1e-6 and modulus.max() <= 0.9 + 1e-6 and modulus.max() > 0.88
    assert phase.max() <= 0.3 + 1e-6 and phase.min() >= 0
    torch.testing.assert_close(torch.exp(layer.gamma_log.detach()), torch.sqrt(1 - modulus**2))


def test_an_empty_ring_is_refused():
    with pytest.raises(ConfigError, match=r"r_max=0\.9: expected a radius above r_min=0\.95"):
        LinearRecurrentUnit(3, r_min=0.95, r_max=0.9)
