"""The depth-wise passes of a Transformer-XL stack that the language model reads: every depth's input (for the
intermediate-layer losses of Al-Rfou et al. 2019) and depth-adaptive exits (Elbayad et al. 2020)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from policies.attention.layer import KeysValues
from policies.backbone import Aux
from policies.backbones.transformer_xl import TransformerXL, WindowTransformer
from policies.window import State

ExitRule = Callable[[int, Tensor], Tensor]
"""``(n, h) → [B, T]`` bool: which positions stop after layer ``n``, given its output ``h`` ``[B, T, D]``"""


def forward_with_depths(backbone: WindowTransformer, x: Tensor, state: State, episode_starts: Tensor
                        ) -> tuple[Tensor, Tensor, State, Aux]:
    """`forward_sequence` plus the input of every depth `[T, B, n_depth, D]` (with gradient): depth `n + 1`'s
    input is depth `n`'s output."""
    y, records, aux = backbone._segment(x, state, episode_starts)
    return y, records, backbone._state_after(records, state, episode_starts), aux


def forward_with_exits(backbone: TransformerXL, x: Tensor, state: State, episode_starts: Tensor,
                       exit_rule: ExitRule) -> tuple[Tensor, State, Aux]:
    """Depth-adaptive computation (Elbayad et al. 2020, Sec. 2–3): after layer `n` (all but the last), the positions
    where `exit_rule(n, h)` holds stop, and their state is copied to every later layer (the layers above read it
    as that position's input, and the window keeps it). `aux["exit_depth"]` `[T, B]`: the layers each position
    ran."""
    layers = backbone.layers

    def depth(h: Tensor, memory_kv: list[KeysValues], mask: Tensor, position_terms: list[Tensor | None]
              ) -> tuple[Tensor, Tensor, list[KeysValues], Aux]:
        records, window_kv = [], []
        exited = torch.zeros(h.shape[:2], dtype=torch.bool, device=h.device)
        exit_depth = torch.full(h.shape[:2], len(layers), device=h.device)
        for n, (layer, kv, terms) in enumerate(zip(layers, memory_kv, position_terms, strict=True)):
            records.append(h)
            out, layer_kv = layer(h, kv, mask, terms)
            window_kv.append(layer_kv)
            h = torch.where(exited.unsqueeze(-1), h, out)  # an exited position's state is copied upwards
            if n + 1 < len(layers):
                leaving = ~exited & exit_rule(n, h)
                exit_depth = torch.where(leaving, n + 1, exit_depth)
                exited = exited | leaving
        return h, torch.stack(records, dim=2), window_kv, {"exit_depth": exit_depth}

    y, records, aux = backbone._segment(x, state, episode_starts, depth)
    return y, backbone._state_after(records, state, episode_starts), aux
