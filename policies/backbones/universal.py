"""Universal Transformer with ACT halting as an RL memory (Dehghani et al. 2019; Graves 2016)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from policies.attention.layer import KeysValues, make_attention
from policies.backbone import Aux
from policies.backbones.act import AdaptiveComputationTime
from policies.backbones.transformer_xl import TransformerXLBlock, WindowTransformer
from policies.positions.encodings import ABSOLUTE_ENCODINGS


class UniversalTransformerACT(WindowTransformer):
    """One shared-weight gated block applied up to ``max_steps`` times per env step, with ACT.

    At ponder step ``n`` the state of each position gets the step encoding ``P_n`` (sinusoidal
    or learned, as tensor2tensor's ``add_step_timing_signal``) and goes through the same GTrXL
    block (identity-map layout, ``gate``), which attends to a Transformer-XL memory: the inputs
    of ponder step ``n`` at the last ``M`` steps of the episode (a position that halted earlier
    contributes its frozen state, so halted positions keep serving as keys and values). ACT
    (:mod:`policies.backbones.act`) mixes the steps; ``aux`` reports the ponder cost ``N + R`` (a loss, default
    coefficient ``ponder_cost: 0.01`` as tensor2tensor's ``act_loss_weight``) and the steps taken ``N``,
    per position ``[T, B]``.
    """

    depth_loss_coefs = {"ponder_cost": 0.01}

    def __init__(self, input_dim: int, *, d_model: int = 128, n_heads: int = 4, d_head: int | None = None,
                 d_inner: int | None = None, memory_length: int = 64, max_steps: int = 4,
                 epsilon: float = 0.01, halting_bias: float = 1.0, step_encoding: str = "sinusoidal",
                 gate: str = "gru", gate_bias: float | None = None, attention: str = "full",
                 attention_options: dict[str, Any] | None = None, position: str | None = None,
                 position_options: dict[str, Any] | None = None, dropout: float = 0.0,
                 ff_chunks: int = 1) -> None:
        super().__init__(input_dim, d_model=d_model, n_heads=n_heads, d_head=d_head,
                         memory_length=memory_length, n_depth=max_steps)
        self.block = TransformerXLBlock(make_attention(attention, d_model, n_heads, self.d_head,
                                                       max_distance=memory_length, dropout=dropout,
                                                       options=attention_options,
                                              position=position, position_options=position_options),
                                        d_model, d_inner or 4 * d_model, layout="identity-map", gate=gate,
                                        gate_bias=gate_bias, dropout=dropout, ff_chunks=ff_chunks)
        self.act = AdaptiveComputationTime(d_model, max_steps, epsilon, halting_bias)
        if step_encoding not in ABSOLUTE_ENCODINGS:
            raise ValueError(f"unknown step_encoding {step_encoding!r}; valid: {', '.join(ABSOLUTE_ENCODINGS)}")
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
