"""The `ffm` backbone: Fast and Forgetful Memory (Morad et al., NeurIPS 2023)."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import Tensor, nn

from envs.rules import Count, Range
from policies.backbones.scan import CarryMemory, keep, linear_scan
from policies.options import checked


class FastForgetfulMemory(CarryMemory):
    """Fast and Forgetful Memory (Morad et al., NeurIPS 2023, "Reinforcement Learning with Fast and Forgetful
    Memory", Sec. 4 and Alg. 1)::

        x̃_t = (W_x x_t) ⊙ σ(W_i x_t)                          input gate, ℝ^m
        S_t = γ ⊙ S_{t−1} + x̃_t 1_cᵀ,   γ_jk = exp(−α_j + i ω_k)    the aggregator, ℂ^{m×c}
        z_t = W_z [Re S_t; Im S_t]
        y_t = LN(z_t) ⊙ σ(W_o x_t) + (W_s x_t) ⊙ (1 − σ(W_o x_t))    output gate over a skip path

    Each of the `m` input channels is kept under `c` contexts: a decay `α_j > 0` (how fast it is forgotten)
    and a frequency `ω_k` (the phase tells how long ago it was seen). The aggregator is a diagonal linear
    recurrence, `S_{k+n} = γⁿ ⊙ S_k + Σ_j γ^{n−j} ⊙ x̃_{k+j}`, run as one
    `linear_scan` with `γ` zeroed at episode starts.

    Initialisation (the official code's): decays evenly spaced from `ln 2 − 0.02` (a half-life of about a step)
    down to `ln(100) / max_period` (a memory falls to 1 % after `max_period` steps), and periods `2π/ω`
    evenly spaced over `[1, max_period]`; the LayerNorm has no affine parameters. Defaults: the paper's POPGym
    setting, `m = 32` and `c = 4` (a state of 256 reals), `max_period` 1024, with the output as wide as the
    `gru` backbone's (128; POPGym used 256 for every memory). The carry is `S`, `[m, c, 2]` (real and
    imaginary parts).
    """

    @checked()
    def __init__(self, input_dim: int, *, hidden_size: Count = 128, memory_size: Count = 32, context_size: Count = 4,
                 max_period: Annotated[int, Range(2, integer=True)] = 1024) -> None:
        super().__init__()
        m, c = memory_size, context_size
        self.pre = nn.Linear(input_dim, 2 * m + 2 * hidden_size)  # x̃, skip, input gate, output gate
        self.decay = nn.Parameter(torch.linspace(math.log(2) - 0.02, math.log(100) / max_period, m))
        self.frequency = nn.Parameter(2 * math.pi / torch.linspace(1, max_period, c))
        self.mix = nn.Linear(2 * m * c, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, elementwise_affine=False)
        self.sizes = (m, hidden_size)
        self.output_dim = hidden_size
        self.record_shape = (m, c, 2)

    def gamma(self) -> Tensor:
        """`γ` `[m, c]`, complex: `|γ| < 1` whatever the decays learn."""
        alpha = self.decay.clamp(min=1e-8)
        return torch.exp(torch.complex(-alpha.unsqueeze(1), self.frequency.unsqueeze(0).expand(len(alpha), -1)))

    def _run(self, x: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        m, hidden = self.sizes
        value, skip, gates = self.pre(x).split([m, hidden, m + hidden], dim=-1)
        input_gate, output_gate = torch.sigmoid(gates).split([m, hidden], dim=-1)
        gamma = self.gamma()
        x_tilde = (value * input_gate).unsqueeze(-1).expand(*value.shape, gamma.shape[1])  # [T, B, m, c]
        a = gamma * keep(episode_starts, x).view(*episode_starts.shape, 1, 1)
        S = linear_scan(a, torch.complex(x_tilde, torch.zeros_like(x_tilde)), torch.view_as_complex(carry))
        z = self.mix(torch.view_as_real(S).flatten(-3))  # [T, B, hidden]
        y = self.norm(z) * output_gate + skip * (1 - output_gate)
        return y, torch.view_as_real(S[-1])
