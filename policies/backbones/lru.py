"""The `lru` backbone: the Linear Recurrent Unit (Orvieto et al., ICML 2023, "Resurrecting Recurrent Neural
Networks for Long Sequences").

The LRU rather than S5 (Smith et al. 2023): both are diagonal complex linear recurrences scanned in parallel, but
the LRU learns its eigenvalues `λ` directly, with no discretisation step `Δ` and no HiPPO initialisation to
carry over (S5's continuous-time parameters suit irregularly sampled signals; an environment steps at a fixed
rate). Its ring initialisation sets the range of memory horizons by two numbers, `r_min ≤ |λ| ≤ r_max`, the knob
a memory task needs, and its `γ` normalisation keeps the state's scale fixed when `|λ| → 1`.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import Count, Range
from policies.backbones.scan import CarryMemory, keep, linear_scan
from policies.options import Relation, checked

Radius = Annotated[float, Range(0.0, 1.0, high_open=True)]
"""an eigenvalue modulus ``|λ|`` in ``[0, 1)``"""
RING = Relation("r_max", ("r_min", "r_max"), lambda o: o["r_min"] < o["r_max"],
                lambda o: f"a radius above {o.show('r_min')}")
"""the ring of initial eigenvalues is not empty"""


class LRULayer(nn.Module):
    """One LRU residual block (Orvieto et al. 2023, Sec. 3 and Fig. 1)::

        u_t = LN(h_t)
        x_t = λ ⊙ x_{t−1} + γ ⊙ (B u_t),   λ = exp(−exp(ν) + i exp(θ)),   γ = √(1 − |λ|²)
        y_t = Re(C x_t) + D ⊙ u_t
        h'_t = h_t + GLU(GELU(y_t)),       GLU(y) = (W₁ y) ⊙ σ(W₂ y)

    `λ` is drawn uniformly on the ring `r_min ≤ |λ| ≤ r_max` with phases in `[0, max_phase]`; `B` and
    `C` are complex with entries of variance `1/(2 d)` and `1/N`, `D` standard normal.
    """

    def __init__(self, d_model: int, d_state: int, r_min: float, r_max: float, max_phase: float) -> None:
        super().__init__()
        u1, u2 = torch.rand(d_state), torch.rand(d_state)
        self.nu_log = nn.Parameter(torch.log(-0.5 * torch.log(u1 * (r_max**2 - r_min**2) + r_min**2)))
        self.theta_log = nn.Parameter(torch.log(max_phase * u2))
        modulus = torch.exp(-torch.exp(self.nu_log.detach()))
        self.gamma_log = nn.Parameter(torch.log(torch.sqrt(1 - modulus**2)))
        self.B = nn.Parameter(torch.randn(2 * d_state, d_model) / math.sqrt(2 * d_model))  # [Re B; Im B]
        self.C = nn.Parameter(torch.randn(d_model, 2 * d_state) / math.sqrt(d_state))  # [Re C, −Im C]
        self.D = nn.Parameter(torch.randn(d_model))
        self.norm = nn.LayerNorm(d_model)
        self.glu = nn.Linear(d_model, 2 * d_model)

    def forward(self, h: Tensor, carry: Tensor, keep_carry: Tensor) -> tuple[Tensor, Tensor]:
        """`h` `[T, B, d]`, `carry` `x_{−1}` `[B, N]` complex, `keep_carry` `[T, B]`."""
        u = self.norm(h)
        bu_re, bu_im = F.linear(u, self.B).chunk(2, dim=-1)  # [T, B, N] each
        gamma = torch.exp(self.gamma_log)
        lam = torch.exp(torch.complex(-torch.exp(self.nu_log), torch.exp(self.theta_log)))  # [N]
        x = linear_scan(lam * keep_carry.unsqueeze(-1), torch.complex(bu_re * gamma, bu_im * gamma), carry)
        y = F.linear(torch.cat([x.real, x.imag], dim=-1), self.C) + self.D * u  # Re(C x) + D ⊙ u
        value, gate = self.glu(F.gelu(y)).chunk(2, dim=-1)
        return h + value * torch.sigmoid(gate), x[-1]


class LinearRecurrentUnit(CarryMemory):
    """An input projection to `d_model` and `n_layers` `LRULayer` blocks (Orvieto et al. 2023).

    Each block's state is `x ∈ ℂ^N` (`N = d_state`), a diagonal linear recurrence run in training as one
    `linear_scan` with `λ` zeroed at episode starts. The carry is every block's
    `x`, `[n_layers, N, 2]` (real and imaginary parts).

    Defaults: the paper has no RL setting. The ring `0.9 ≤ |λ| ≤ 0.999` with phases up to `π/10` gives slow,
    slowly turning eigenvalues, the direction the paper takes for long-range dependencies: timescales from ten to a
    thousand steps, which cover a memory task's horizons. One block of width 128 with `N = 64` states, about the
    `gru` backbone's size and cost.
    """

    @checked(RING)
    def __init__(self, input_dim: int, *, d_model: Count = 128, d_state: Count = 64, n_layers: Count = 1,
                 r_min: Radius = 0.9, r_max: Radius = 0.999,
                 max_phase: Annotated[float, Range(0.0, 2 * math.pi, low_open=True)] = math.pi / 10) -> None:
        super().__init__()
        self.embed = nn.Linear(input_dim, d_model)
        self.layers = nn.ModuleList(LRULayer(d_model, d_state, r_min, r_max, max_phase) for _ in range(n_layers))
        self.output_dim = d_model
        self.record_shape = (n_layers, d_state, 2)

    def _run(self, x: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        h, keep_carry = self.embed(x), keep(episode_starts, x)
        carried = []
        for n, layer in enumerate(self.layers):
            h, last = layer(h, torch.view_as_complex(carry[:, n].contiguous()), keep_carry)
            carried.append(torch.view_as_real(last))
        return h, torch.stack(carried, dim=1)
