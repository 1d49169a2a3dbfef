"""Universal Transformer with ACT halting as an RL memory (Dehghani et al. 2019; Graves 2016)."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from envs.rules import Count, CountOrNone, Finite, OneOf, OptionalMapping
from policies.attention.layer import AttentionName, KeysValues, PositionName, make_attention
from policies.backbone import Aux
from policies.backbones.act import AdaptiveComputationTime, Epsilon
from policies.backbones.transformer_xl import Dropout, Gate, GateBias, TransformerXLBlock, WindowTransformer
from policies.options import checked
from policies.positions.encodings import ABSOLUTE_ENCODINGS

StepEncoding = Annotated[str, OneOf(lambda: ABSOLUTE_ENCODINGS)]
"""the encoding of the ponder step added to the state at each step"""


class UniversalTransformerACT(WindowTransformer):
    """One shared-weight gated block applied up to `max_steps` times per env step, with ACT.

    At ponder step `n` the state of each position gets the step encoding `P_n` (sinusoidal
    or learned, as tensor2tensor's `add_step_timing_signal`) and goes through the same GTrXL
    block (identity-map layout, `gate`), which attends to a Transformer-XL memory: the inputs
    of ponder step `n` at the last `M` steps of the episode (a position that halted earlier
    contributes its frozen state, so halted positions keep serving as keys and values). ACT
    (`policies.backbones.act`) mixes the steps; `aux` reports the ponder cost `N + R` (a loss, default
    coefficient `ponder_cost: 0.01` as tensor2tensor's `act_loss_weight`) and the steps taken `N`,
    per position `[T, B]`.
    """

    depth_loss_coefs = {"ponder_cost": 0.01}

    @checked()
    def __init__(self, input_dim: int, *, d_model: Count = 128, n_heads: Count = 4, d_head: CountOrNone = None,
                 d_inner: CountOrNone = None, memory_length: Count = 64, max_steps: Count = 4,
                 epsilon: Epsilon = 0.01, halting_bias: Finite = 1.0, step_encoding: StepEncoding = "sinusoidal",
                 gate: Gate = "gru", gate_bias: GateBias = None, attention: AttentionName = "full",
                 attention_options: OptionalMapping = None, position: PositionName = None,
                 position_options: OptionalMapping = None, dropout: Dropout = 0.0,
                 ff_chunks: Count = 1) -> None:
        super().__init__(input_dim, d_model=d_model, n_heads=n_heads, d_head=d_head,
                         memory_length=memory_length, n_depth=max_steps)
        self.block = TransformerXLBlock(make_attention(attention, d_model, n_heads, self.d_head,
                                                       max_distance=memory_length, dropout=dropout,
                                                       options=attention_options,
                                              position=position, position_options=position_options),
                                        d_model, d_inner or 4 * d_model, layout="identity-map", gate=gate,
                                        gate_bias=gate_bias, dropout=dropout, ff_chunks=ff_chunks)
        self.act = AdaptiveComputationTime(d_model, max_steps, epsilon, halting_bias)
        self.step_encoding = ABSOLUTE_ENCODINGS[step_encoding](d_model, max_steps)

    @property
    def memory_blocks(self) -> list[TransformerXLBlock]:
        return [self.block] * self.act.max_steps

    def _memory_kv(self, memory: Tensor) -> list[KeysValues]:
        """One projection for all ponder steps: they share the block."""
        B, M, N, D = memory.shape
        keys, values = self.block.memory_kv(memory.reshape(B, M * N, D))  # [B, H, M*N, d]
        keys, values = (t.unflatten(2, (M, N)).unbind(dim=3) for t in (keys, values))
        return list(zip(keys, values, strict=True))

    def _depth(self, h: Tensor, memory_kv: list[KeysValues], mask: Tensor,
               position_terms: list[Tensor | None]) -> tuple[Tensor, Tensor, list[KeysValues], Aux]:
        records: list[Tensor] = []
        window_kv: list[KeysValues] = []
        encodings = self.step_encoding(torch.arange(self.act.max_steps, device=h.device))  # [max_steps, D]

        def ponder_step(n: int, state: Tensor) -> tuple[Tensor, Tensor]:
            inputs = state + encodings[n]
            records.append(inputs)
            out, kv = self.block(inputs, memory_kv[n], mask, position_terms[n])
            window_kv.append(kv)
            return inputs, out

        y, ponder = self.act(h, ponder_step)
        return y, torch.stack(records, dim=2), window_kv, {"ponder_cost": ponder.cost, "ponder_steps": ponder.steps}
