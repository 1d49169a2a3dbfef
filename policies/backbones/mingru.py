"""The `mingru` backbone: minGRU (Feng et al. 2024, "Were RNNs All We Needed?")."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import Tensor, nn

from envs.rules import Count, Range
from policies.backbones.scan import CarryMemory, keep, linear_scan
from policies.options import checked


class MinGRU(CarryMemory):
    """A stack of `n_layers` minGRU layers (Feng et al. 2024, Sec. 3.1), each reading the previous one's outputs::

        z_t = σ(W_z x_t + b_z),   h̃_t = W_h x_t + b_h,   h_t = (1 − z_t) ⊙ h_{t−1} + z_t ⊙ h̃_t

    The GRU without its reset gate, and with gates that read the input only, not `h_{t−1}`: the recurrence is
    diagonal and linear in `h`, so a segment is one `linear_scan` per layer with
    `a_t = 1 − z_t` (0 at an episode start) and `b_t = z_t ⊙ h̃_t`. The paper scans in log space with
    `h̃ = g(W_h x)` kept positive; this scan multiplies directly, so `h̃` is the plain projection.

    The carry is `h` of every layer, `[n_layers, hidden_size]`. The paper has no POPGym or online-RL setting;
    the defaults are two layers of 128 (the `gru` backbone's width). Two because one layer's gates read only the
    present input, while a second layer's read the first one's state, which gives the stack state-dependent
    gating: on T-Maze-20 (`configs/demo.yaml`, seed 0) one layer stayed at a
    memoryless policy's success of one half through 150k steps, two layers solved seeds 0–2 by 90k. The bias of
    `z` is drawn uniformly in `±log(T_max − 1)`: half of the channels pass the present input through
    (`z > ½`), the others keep what they saw over timescales `1/z` up to `T_max` (where a bias of 0 keeps
    `0.5ⁿ` of a step `n` back, `10⁻⁶` of a cue 20 steps back).
    """

    @checked()
    def __init__(self, input_dim: int, *, hidden_size: Count = 128, n_layers: Count = 2,
                 max_timescale: Annotated[float, Range(2.0)] = 100.0) -> None:
        super().__init__()
        self.gates = nn.ModuleList(nn.Linear(input_dim if n == 0 else hidden_size, 2 * hidden_size)
                                   for n in range(n_layers))
        spread = math.log(max_timescale - 1)
        with torch.no_grad():
            for gate in self.gates:
                gate.bias[:hidden_size] = (2 * torch.rand(hidden_size) - 1) * spread  # logit z ~ U[−s, s]
        self.output_dim = hidden_size
        self.record_shape = (n_layers, hidden_size)

    def _run(self, x: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        keep_carry = keep(episode_starts, x).unsqueeze(-1)  # [T, B, 1]
        carried = []
        for n, gate in enumerate(self.gates):
            z, h_tilde = gate(x).chunk(2, dim=-1)  # [T, B, H] each
            z = torch.sigmoid(z)
            x = linear_scan((1 - z) * keep_carry, z * h_tilde, carry[:, n])  # [T, B, H]
            carried.append(x[-1])
        return x, torch.stack(carried, dim=1)
