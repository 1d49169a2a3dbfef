"""LSTM and GRU baselines behind the memory contract (a window of one record: the carry)."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from envs.rules import Count, OneOf
from policies.backbone import MemoryBackbone, Sequence
from policies.options import checked
from policies.window import Window, as_bool

CELLS = {"lstm": nn.LSTM, "gru": nn.GRU}
Cell = Annotated[str, OneOf(lambda: CELLS)]


class RecurrentMemory(MemoryBackbone):
    """A multi-layer LSTM (Hochreiter & Schmidhuber 1997) or GRU (Cho et al. 2014).

    The state window holds one record, the carry after the previous step: `(h, c)` for the
    LSTM, `h` for the GRU, stacked as `[n_carry, n_layers, hidden_size]`. An episode
    start invalidates it, which feeds a zero carry, the usual fresh RNN state.
    `forward_sequence` runs cuDNN-style whole chunks between the time steps where some
    env starts an episode, instead of a Python loop over every step.
    """

    @checked()
    def __init__(self, input_dim: int, *, cell: Cell = "lstm", hidden_size: Count = 128, n_layers: Count = 1) -> None:
        super().__init__()
        self.is_lstm = cell == "lstm"
        self.rnn = CELLS[cell](input_dim, hidden_size, num_layers=n_layers)
        self.output_dim = hidden_size
        self.memory_length = 1
        self.record_shape = (2 if self.is_lstm else 1, n_layers, hidden_size)

    def _carry(self, memory: Tensor, valid: Tensor) -> Tensor:
        """`[n_carry, n_layers, B, H]` carry, zero where the window is invalid."""
        return (memory[:, 0] * valid[:, 0].view(-1, 1, 1, 1)).permute(1, 2, 0, 3).contiguous()

    def _run(self, x: Tensor, carry: Tensor) -> tuple[Tensor, Tensor]:
        """`x` `[T, B, D]` from `carry`; returns outputs and the new carry (same layout)."""
        y, new = self.rnn(x, (carry[0], carry[1]) if self.is_lstm else carry[0])
        return y, torch.stack(new) if self.is_lstm else new.unsqueeze(0)

    def _read(self, x: Tensor, state: Window, valid: Tensor) -> tuple[Tensor, Tensor]:
        y, carry = self._run(x.unsqueeze(0), self._carry(state.memory, valid))
        return y[0], carry.permute(2, 0, 1, 3)  # record: [B, n_carry, n_layers, H]

    def forward_sequence(self, x: Tensor, state: Window, episode_starts: Tensor, final_state: bool = True
                         ) -> Sequence:
        self.check_inputs(x, state, episode_starts, 3)
        starts = as_bool(episode_starts)
        T = x.shape[0]
        bounds = [0, *(torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist(), T]
        valid = state.valid
        carry = self._carry(state.memory, valid)
        outputs = []
        for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
            carry = carry * (~starts[begin]).to(carry.dtype).view(1, 1, -1, 1)
            y, carry = self._run(x[begin:end], carry)
            outputs.append(y)
        record = carry.detach().permute(2, 0, 1, 3).unsqueeze(1)  # the carry after the last step
        return Sequence(torch.cat(outputs), Window(record, valid.new_ones(valid.shape)), {})
