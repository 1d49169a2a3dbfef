"""Feed-forward baselines: a memoryless MLP and an MLP over the last k observations."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from envs.rules import Count
from policies.backbone import MemoryBackbone, Sequence
from policies.options import checked
from policies.window import Window, as_bool, window_before


def mlp(input_dim: int, hidden_size: int, n_layers: int) -> nn.Sequential:
    """`n_layers` of `Linear → ReLU` of width `hidden_size`."""
    layers: list[nn.Module] = []
    for i in range(n_layers):
        layers += [nn.Linear(input_dim if i == 0 else hidden_size, hidden_size), nn.ReLU()]
    return nn.Sequential(*layers)


class FrameStack(MemoryBackbone):
    """An MLP over the current and the last `k - 1` inputs of the episode.

    The frame-stacking baseline for POMDPs that SB3's maintainers recommend starting with.
    Slots from before the episode start are zeroed and flagged (their validity bits are
    part of the MLP input), so a short episode prefix is distinguishable from zero inputs.
    `k = 1` is the memoryless MLP.
    """

    @checked()
    def __init__(self, input_dim: int, *, k: Count = 4, hidden_size: Count = 128, n_layers: Count = 2) -> None:
        super().__init__()
        self.memory_length = k - 1
        self.record_shape = (input_dim,)
        self.output_dim = hidden_size
        self.net = mlp(k * input_dim + k - 1, hidden_size, n_layers)

    def _features(self, x: Tensor, window: Tensor, valid: Tensor) -> Tensor:
        """`x` `[..., D]`, `window` `[..., k-1, D]`, `valid` `[..., k-1]`."""
        masked = window * valid.unsqueeze(-1).to(window.dtype)
        return torch.cat([masked.flatten(-2), valid.to(x.dtype), x], dim=-1)

    def _read(self, x: Tensor, state: Window, valid: Tensor) -> tuple[Tensor, Tensor]:
        return self.net(self._features(x, state.memory, valid)), x

    def forward_sequence(self, x: Tensor, state: Window, episode_starts: Tensor, final_state: bool = True
                         ) -> Sequence:
        self.check_inputs(x, state, episode_starts, 3)
        T = x.shape[0]
        starts = as_bool(episode_starts).transpose(0, 1)  # [B, T]
        records = x.transpose(0, 1)  # [B, T, D]
        steps = torch.arange(T + 1, device=x.device)
        windows, valid = window_before(state.memory, state.valid, records, starts, steps)
        valid_now = valid[:, :T] & ~starts.unsqueeze(-1)  # apply each step's own episode start
        y = self.net(self._features(records, windows[:, :T], valid_now))
        return Sequence(y.transpose(0, 1), Window(windows[:, T], valid[:, T]), {})


class MLPMemoryless(FrameStack):
    """The memoryless baseline: an MLP of the current input only (`FrameStack` with `k = 1`)."""

    @checked()
    def __init__(self, input_dim: int, *, hidden_size: Count = 128, n_layers: Count = 2) -> None:
        super().__init__(input_dim, k=1, hidden_size=hidden_size, n_layers=n_layers)
