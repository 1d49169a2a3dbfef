"""Transformer-XL memories for RL: TrXL, TrXL-I and GTrXL (Parisotto et al. 2020)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from policies.attention.layer import KeysValues, make_attention
from policies.backbone import Aux
from policies.backbones.blocks import TransformerXLBlock
from policies.backbones.transformer import WindowTransformer
from policies.window import State

ExitRule = Callable[[int, Tensor], Tensor]
"""``(n, h) → [B, T]`` bool: which positions stop after layer ``n``, given its output ``h`` ``[B, T, D]``"""


class TransformerXL(WindowTransformer):
    """GTrXL by default: a stack of ``n_layers`` Transformer-XL blocks over an episode memory of
    ``memory_length`` steps; other ``layout`` and ``gate`` values give TrXL and TrXL-I.

    Layer ``l`` attends, from each step, to its own input at the last ``M`` steps of the
    episode (kept without gradient) and to the current step, with relative positions
    (Dai et al. 2019). The three RL variants differ only in the block:

    - ``trxl``: ``layout="post-ln"``, residual connections (fails to learn in RL per the GTrXL paper);
    - ``trxl-i``: ``layout="identity-map"``, residual connections;
    - ``gtrxl``: ``layout="identity-map"`` with a gate (``gru`` by default, ``b_g = 2``).

    Examples:
        >>> backbone = TransformerXL(8, d_model=32, n_layers=2, n_heads=2, memory_length=16)
        >>> state = backbone.initial_state(n_envs=4)
        >>> y, state = backbone.step(torch.randn(4, 8), state, torch.ones(4, dtype=torch.bool))
        >>> y.shape
        torch.Size([4, 32])
    """

    def __init__(self, input_dim: int, *, d_model: int = 64, n_layers: int = 1, n_heads: int = 4,
                 d_head: int | None = None, d_inner: int | None = None, memory_length: int = 64,
                 layout: str = "identity-map", gate: str = "gru", gate_bias: float | None = None,
                 attention: str = "full", attention_options: dict[str, Any] | None = None,
                 position: str | None = None, position_options: dict[str, Any] | None = None,
                 dropout: float = 0.0, ff_chunks: int = 1, episode_time: str = "none",
                 max_episode_time: int = 1024) -> None:
        super().__init__(input_dim, d_model=d_model, n_heads=n_heads, d_head=d_head,
                         memory_length=memory_length, n_depth=n_layers, episode_time=episode_time,
                         max_episode_time=max_episode_time)
        self.layers = nn.ModuleList(
            TransformerXLBlock(make_attention(attention, d_model, n_heads, self.d_head, max_distance=memory_length,
                                              dropout=dropout, options=attention_options,
                                              position=position, position_options=position_options),
                               d_model, d_inner or 4 * d_model, layout=layout, gate=gate, gate_bias=gate_bias,
                               dropout=dropout, ff_chunks=ff_chunks)
            for _ in range(n_layers))

    @property
    def memory_blocks(self) -> list[TransformerXLBlock]:
        return list(self.layers)

    def _depth(self, h: Tensor, memory_kv: list[KeysValues], mask: Tensor, position_terms: list[Tensor | None],
               exit_rule: ExitRule | None = None) -> tuple[Tensor, Tensor, list[KeysValues], Aux]:
        records, window_kv, aux = [], [], {}
        if exit_rule is not None:
            exited = torch.zeros(h.shape[:2], dtype=torch.bool, device=h.device)
            aux["exit_depth"] = torch.full(h.shape[:2], len(self.layers), device=h.device)
        for n, (layer, kv, terms) in enumerate(zip(self.layers, memory_kv, position_terms, strict=True)):
            records.append(h)
            out, layer_kv = layer(h, kv, mask, terms)
            window_kv.append(layer_kv)
            if exit_rule is None:
                h = out
                continue
            h = torch.where(exited.unsqueeze(-1), h, out)  # an exited position's state is copied upwards
            if n + 1 < len(self.layers):
                leaving = ~exited & exit_rule(n, h)
                aux["exit_depth"] = torch.where(leaving, n + 1, aux["exit_depth"])
                exited = exited | leaving
        return h, torch.stack(records, dim=2), window_kv, aux

    def forward_with_exits(self, x: Tensor, state: State, episode_starts: Tensor,
                           exit_rule: ExitRule) -> tuple[Tensor, State, Aux]:
        """Depth-adaptive computation (Elbayad et al. 2020, "Depth-Adaptive Transformer", Sec. 2–3): after
        layer ``n`` (all but the last), the positions where ``exit_rule(n, h)`` ``[B, T]`` holds for its
        output ``h`` ``[B, T, D]`` stop. Their state is copied to every later layer, as the paper's copied
        states: the layers above read it as that position's input, so later positions attend to it and the
        window keeps it. Otherwise as :meth:`forward_sequence`; ``aux["exit_depth"]`` ``[T, B]`` gives the
        layers each position ran (a position exits on its own state and on earlier positions' states only,
        so a segment at once equals one position at a time)."""
        y, records, aux = self._segment(x, state, episode_starts, partial(self._depth, exit_rule=exit_rule))
        return y, self._state_after(records, state, episode_starts), aux
