"""Residual connections and the gating layers of GTrXL (Parisotto et al. 2020, Sec. 3.2).

A gate ``g(x, y)`` merges the residual stream ``x`` with a submodule output ``y``. The gate
bias ``b_g`` is a parameter of its own (not the bias of an ``nn.Linear``), so SB3's
``ortho_init``, which zeroes linear biases, cannot reset it. Its defaults follow the paper's
gated identity initialisation: 2 for the GRU gate, 1 for the others; a positive ``b_g``
pulls each gate towards passing ``x`` through unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _linear(d_in: int, d_out: int) -> nn.Linear:
    layer = nn.Linear(d_in, d_out, bias=False)
    nn.init.xavier_uniform_(layer.weight)
    return layer


class Residual(nn.Module):
    """Plain residual connection ``g(x, y) = x + y`` (TrXL, TrXL-I)."""

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return x + y


class _BiasedGate(nn.Module):
    """A gate with the scalar-per-channel bias ``b_g``."""

    default_bias = 1.0

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__()
        self.initial_bias = self.default_bias if bias is None else float(bias)
        self.bias = nn.Parameter(torch.full((dim,), self.initial_bias))


class InputGate(_BiasedGate):
    """Input gating, ``g = σ(W_g x + b_g) ⊙ x + y``."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return torch.sigmoid(self.w(x) + self.bias) * x + y


class OutputGate(_BiasedGate):
    """Output gating, ``g = x + σ(W_g x − b_g) ⊙ y``."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return x + torch.sigmoid(self.w(x) - self.bias) * y


class HighwayGate(_BiasedGate):
    """Highway gating, ``g = σ(W_g x + b_g) ⊙ x + (1 − σ(W_g x + b_g)) ⊙ y``."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        carry = torch.sigmoid(self.w(x) + self.bias)
        return carry * x + (1.0 - carry) * y


class SigmoidTanhGate(_BiasedGate):
    """Sigmoid-tanh gating, ``g = x + σ(W_g y − b_g) ⊙ tanh(U_g y)``."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)
        self.u = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return x + torch.sigmoid(self.w(y) - self.bias) * torch.tanh(self.u(y))


class GRUGate(_BiasedGate):
    """GRU-type gating, the best variant of GTrXL.

    ``r = σ(W_r y + U_r x)``, ``z = σ(W_z y + U_z x − b_g)``, ``ĥ = tanh(W_g y + U_g (r ⊙ x))``,
    ``g = (1 − z) ⊙ x + z ⊙ ĥ``: six bias-free ``D×D`` matrices (W acts on the submodule output
    ``y``, U on the stream ``x``) and only ``b_g`` on ``z``. ``W_r, W_z, W_g`` are fused in one
    matrix and so are ``U_r, U_z``.
    """

    default_bias = 2.0

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w_rzg = nn.Linear(dim, 3 * dim, bias=False)
        self.u_rz = nn.Linear(dim, 2 * dim, bias=False)
        self.u_g = _linear(dim, dim)
        for fused, parts in ((self.w_rzg, 3), (self.u_rz, 2)):
            for chunk in fused.weight.data.chunk(parts, dim=0):
                nn.init.xavier_uniform_(chunk)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        w_r, w_z, w_g = self.w_rzg(y).chunk(3, dim=-1)
        u_r, u_z = self.u_rz(x).chunk(2, dim=-1)
        r = torch.sigmoid(w_r + u_r)
        z = torch.sigmoid(w_z + u_z - self.bias)
        candidate = torch.tanh(w_g + self.u_g(r * x))
        return x + z * (candidate - x)


GATES: dict[str, type[nn.Module]] = {
    "residual": Residual,
    "input": InputGate,
    "output": OutputGate,
    "highway": HighwayGate,
    "sigmoid-tanh": SigmoidTanhGate,
    "gru": GRUGate,
}


def make_gate(name: str, dim: int, bias: float | None = None) -> nn.Module:
    """Build a gate by name; ``bias`` overrides the default ``b_g`` (not for ``residual``)."""
    if name not in GATES:
        raise ValueError(f"unknown gate {name!r}; valid gates: {', '.join(GATES)}")
    if name == "residual":
        if bias is not None:
            raise ValueError("gate 'residual' has no gate bias; gate_bias applies to the GTrXL gates")
        return Residual()
    return GATES[name](dim, bias)
