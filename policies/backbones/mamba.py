"""The `mamba` backbone: the selective state space model of Mamba (Gu & Dao 2023, "Mamba: Linear-Time Sequence
Modeling with Selective State Spaces"), in plain PyTorch."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import Count
from policies.backbones.scan import CarryMemory, linear_scan, through_layers
from policies.options import checked


class MambaLayer(nn.Module):
    """One Mamba residual block (Gu & Dao 2023, Sec. 3 and Fig. 3), `E = expand · d_model` channels of `N`
    states each::

        [u; z] = W_in LN(h_t)                                       two branches of E
        u'_t = SiLU(conv_k(u)_t)                                     causal depthwise conv, kernel k
        Δ_t = softplus(W_Δ (W_r u'_t) + b_Δ),  B_t = W_B u'_t,  C_t = W_C u'_t      the selection (S6)
        s_t = exp(Δ_t A) ⊙ s_{t−1} + (Δ_t ⊙ u'_t) B_tᵀ,  A = −exp(A_log)          s ∈ ℝ^{E×N}
        y_t = s_t C_t + D ⊙ u'_t
        h'_t = h_t + W_out (y_t ⊙ SiLU(z_t))

    Initialisation (the paper's): `A` row `−(1, …, N)` (S4D-real), `D = 1`, `Δ`'s bias the inverse
    softplus of a log-uniform draw from `[0.001, 0.1]`, `W_Δ` uniform in `±r^{−1/2}` with rank
    `r = ⌈d_model/16⌉`. The state carried between steps is `s` and the conv's last `k − 1` inputs, which an
    episode start clears (the conv then sees zeros, its padding at a sequence's start).
    """

    def __init__(self, d_model: int, d_state: int, d_conv: int, expand: int) -> None:
        super().__init__()
        E, N, rank = expand * d_model, d_state, math.ceil(d_model / 16)
        self.sizes = (E, N, rank, d_conv)
        self.norm = nn.LayerNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * E, bias=False)
        self.conv = nn.Conv1d(E, E, d_conv, groups=E)  # its parameters and initialisation; applied tap by tap
        self.x_proj = nn.Linear(E, rank + 2 * N, bias=False)
        self.dt_proj = nn.Linear(rank, E)
        nn.init.uniform_(self.dt_proj.weight, -rank**-0.5, rank**-0.5)
        dt = torch.exp(torch.rand(E) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1))  # [E, N]
        self.D = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, d_model, bias=False)

    def causal_conv(self, u: Tensor, window: Tensor, starts: Tensor) -> tuple[Tensor, Tensor]:
        """The depthwise conv of `u` `[T, B, E]` after the `k − 1` earlier inputs `window`
        `[k−1, B, E]`, where no tap reaches across an episode start; and the window after the segment."""
        T, k = u.shape[0], self.sizes[3]
        padded = torch.cat([window, u])  # [k−1+T, B, E]
        count = torch.cat([starts.new_zeros(k - 1, starts.shape[1]), starts]).cumsum(0)  # starts up to each step
        seen = count.unfold(0, k, 1) == count[k - 1:].unsqueeze(-1)  # [T, B, k]: no start in (t − lag, t]
        taps = self.conv.weight[:, 0] * seen.unsqueeze(-2)  # [T, B, E, k]; tap i reads step t − (k − 1 − i)
        out = (padded.unfold(0, k, 1) * taps).sum(-1) + self.conv.bias
        same_episode = (count[T:] == count[-1]).unsqueeze(-1)  # the last k − 1 inputs that are the last step's episode
        return out, padded[T:] * same_episode

    def forward(self, h: Tensor, carry: Tensor, starts: Tensor) -> tuple[Tensor, Tensor]:
        """`h` `[T, B, d]`, `carry` `[B, E·N + (k−1)·E]` (`s` then the conv window), `starts`
        `[T, B]` bool."""
        E, N, rank, k = self.sizes
        T, B = starts.shape
        s, window = carry.split([E * N, (k - 1) * E], dim=-1)
        u, z = self.in_proj(self.norm(h)).chunk(2, dim=-1)  # [T, B, E] each
        u, window = self.causal_conv(u, window.view(B, k - 1, E).transpose(0, 1), starts)
        u = F.silu(u)
        dt, B_t, C_t = self.x_proj(u).split([rank, N, N], dim=-1)
        dt = F.softplus(self.dt_proj(dt))  # [T, B, E]
        A = -torch.exp(self.A_log)  # [E, N]
        a = (dt.unsqueeze(-1) * A).masked_fill_(starts.view(T, B, 1, 1), float("-inf")).exp_()  # [T, B, E, N]
        s = linear_scan(a, (dt * u).unsqueeze(-1) * B_t.unsqueeze(-2), s.view(B, E, N))  # [T, B, E, N]
        y = (s * C_t.unsqueeze(-2)).sum(-1) + self.D * u
        h = h + self.out_proj(y * F.silu(z))
        return h, torch.cat([s[-1].flatten(1), window.transpose(0, 1).flatten(1)], dim=-1)


class Mamba(CarryMemory):
    """An input projection to `d_model`, `n_layers` `MambaLayer` blocks and a final LayerNorm
    (Gu & Dao 2023; LayerNorm is the normalisation the paper names, Sec. 3.4).

    Each block's selective scan is one `linear_scan` over `[T, B, E, N]` with
    `exp(Δ_t A)` zeroed at episode starts; no custom kernel (at these widths the plain scan's few large ops cost
    less than a kernel launch would save). The carry is, per block, `s` and the conv window,
    `[n_layers, E·N + (k−1)·E]`.

    Defaults: the paper's block (`d_state` 16, `d_conv` 4, `expand` 2); it has no RL setting, so one block
    of width 64 (128 channels), about the `gru` backbone's cost per step.
    """

    @checked()
    def __init__(self, input_dim: int, *, d_model: Count = 64, d_state: Count = 16, d_conv: Count = 4,
                 expand: Count = 2, n_layers: Count = 1) -> None:
        super().__init__()
        self.embed = nn.Linear(input_dim, d_model)
        self.layers = nn.ModuleList(MambaLayer(d_model, d_state, d_conv, expand) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.output_dim = d_model
        E = expand * d_model
        self.record_shape = (n_layers, E * (d_state + d_conv - 1))

    def _run(self, x: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        h, carried = through_layers(self.layers, self.embed(x), carry, episode_starts)
        return self.norm(h), carried
