"""Mamba's selective scan (``policies/backbones/mamba.py``) against the S6 recurrence of Gu & Dao (2023) computed step
by step, with a causal convolution that restarts with each episode, and the paper's initialisation (mutations caught:
a conv tap reaching into the previous episode, ``B̄ = B`` without ``Δ``, ``D`` left out, ``A`` positive)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from policies.backbones.mamba import Mamba
from policies.window import Window


def reference(model: Mamba, x: torch.Tensor, carry: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    h = model.embed(x)
    B = x.shape[1]
    for n, layer in enumerate(model.layers):
        E, N, rank, k = layer.sizes
        s, window = carry[:, n].split([E * N, (k - 1) * E], dim=-1)
        s, inputs = s.view(B, E, N), list(window.view(B, k - 1, E).unbind(1))  # the last k − 1 conv inputs
        A, out = -torch.exp(layer.A_log), []
        for t in range(x.shape[0]):
            fresh = starts[t].view(B, 1)
            u, z = layer.in_proj(layer.norm(h[t])).chunk(2, dim=-1)
            inputs = [i * ~fresh for i in inputs[-(k - 1):]] + [u]  # zeros before the episode's first step
            conv = sum(layer.conv.weight[:, 0, j] * inputs[j] for j in range(k)) + layer.conv.bias
            u = F.silu(conv)
            dt, B_t, C_t = layer.x_proj(u).split([rank, N, N], dim=-1)
            dt = F.softplus(layer.dt_proj(dt))
            s = torch.exp(dt.unsqueeze(-1) * A) * s * ~fresh.unsqueeze(-1) + (dt * u).unsqueeze(-1) * B_t.unsqueeze(1)
            y = (s * C_t.unsqueeze(1)).sum(-1) + layer.D * u
            out.append(h[t] + layer.out_proj(y * F.silu(z)))
        h = torch.stack(out)
    return model.norm(h)


def test_sequence_equals_the_s6_recurrence():
    torch.manual_seed(0)
    model = Mamba(3, d_model=8, d_state=4, d_conv=3, n_layers=2).double()
    T, B = 10, 3
    x = torch.randn(T, B, 3, dtype=torch.float64)
    carry = torch.randn(B, 2, *model.record_shape[1:], dtype=torch.float64)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0, 2] = True  # env 2's carry belongs to an earlier episode
    starts[4, 0] = starts[5, 0] = True  # a one-step episode: the conv sees only its own step
    state = Window(carry.unsqueeze(1), torch.ones(B, 1, dtype=torch.bool))
    y, _, _ = model.forward_sequence(x, state, starts)
    torch.testing.assert_close(y, reference(model, x, carry, starts), atol=1e-10, rtol=0)


def test_initialisation_is_the_papers():
    torch.manual_seed(0)
    layer = Mamba(3, d_model=64, d_state=16).layers[0]
    torch.testing.assert_close(-torch.exp(layer.A_log.detach()), -torch.arange(1.0, 17.0).expand(128, -1))
    assert torch.equal(layer.D.detach(), torch.ones(128))
    dt = F.softplus(layer.dt_proj.bias.detach())
    assert dt.min() >= 1e-3 - 1e-6 and dt.max() <= 0.1 + 1e-6
    assert layer.sizes == (128, 16, 4, 4)  # expand 2, d_state 16, rank ⌈64/16⌉, kernel 4
