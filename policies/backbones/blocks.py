"""Transformer-XL blocks: attention over ``[memory; segment]`` plus a position-wise MLP.

Three layouts from Parisotto et al. (2020, Sec. 3), with ``h̃ = [SG(M); E]``:

- ``post-ln`` (canonical TrXL): ``Y = LN(E + MHA(h̃))``, ``E' = LN(Y + f(Y))``;
- ``identity-map`` with residual gates (TrXL-I): ``Y = E + ReLU(MHA(LN(h̃)))``,
  ``E' = Y + ReLU(f(LN(Y)))`` — LayerNorm only on submodule inputs, so an un-normalised
  identity path runs from the first layer's input to the last layer's output;
- ``identity-map`` with a GTrXL gate in place of each residual:
  ``Y = g_MHA(E, ReLU(MHA(LN(h̃))))``, ``E' = g_MLP(Y, ReLU(f(LN(Y))))``.

The position-wise MLP ``f`` can run on pieces of the time axis (``ff_chunks``, Reformer's chunking).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from policies.attention.layer import HeadProjections, KeysValues
from policies.backbones.gates import make_gate

LAYOUTS = ("post-ln", "identity-map")


class PositionwiseFeedForward(nn.Module):
    """``f(x) = W_2 ReLU(W_1 x + b_1) + b_2``; its output has no activation of its own.

    With ``chunks = c > 1``, ``f`` runs on ``c`` consecutive pieces of the time axis one after the
    other (Reformer, Kitaev et al. 2020, Sec. 3 "Chunking": ``Y_2 = [Y_2^(1); …; Y_2^(c)]`` with
    ``Y_2^(j) = X_2^(j) + f(Y_1^(j))``). ``f`` acts on each position alone, so outputs and gradients
    are those of one pass, and the ``d_inner``-wide activation exists for ``⌈T/c⌉`` positions at a
    time. That lowers peak memory only if a piece's activation is not kept for backward: whenever
    autograd records, each piece runs under activation checkpointing (``torch.utils.checkpoint``,
    non-reentrant) and is recomputed in backward, at the cost of a second forward of ``f``.
    Without gradient (rollouts) pieces are only run one after the other.
    """

    def __init__(self, d_model: int, d_inner: int, dropout: float = 0.0, chunks: int = 1) -> None:
        super().__init__()
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"ff_chunks (pieces of the time axis the feed-forward runs on) must be an integer "
                             f">= 1, got {chunks!r}")
        self.chunks = chunks
        self.net = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(d_inner, d_model))

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``[..., T, d_model]``."""
        if self.chunks == 1:
            return self.net(x)
        pieces = x.split(math.ceil(x.shape[-2] / self.chunks), dim=-2)
        if not torch.is_grad_enabled():
            return torch.cat([self.net(piece) for piece in pieces], dim=-2)
        return torch.cat([checkpoint(self.net, piece, use_reentrant=False) for piece in pieces], dim=-2)

    def extra_repr(self) -> str:
        return f"chunks={self.chunks}"


class TransformerXLBlock(nn.Module):
    """One Transformer-XL layer in the ``post-ln`` or ``identity-map`` layout (see module doc).

    ``gate`` names the merge of stream and submodule output (``residual`` or a GTrXL gate
    from :mod:`policies.backbones.gates`); the post-LN layout only takes ``residual``. ``attention`` is the
    attention module (:func:`policies.attention.layer.make_attention` for the windowed ones); the block
    passes whatever context it needs (memory keys and values, mask, position terms, or a
    recurrent carry) through and returns what the attention returns beside its output.
    ``ff_chunks`` runs the MLP on that many pieces of the time axis (:class:`PositionwiseFeedForward`).
    """

    def __init__(self, attention: HeadProjections, d_model: int, d_inner: int, *, layout: str = "identity-map",
                 gate: str = "residual", gate_bias: float | None = None, dropout: float = 0.0,
                 ff_chunks: int = 1) -> None:
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"unknown block layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
        if layout == "post-ln" and gate != "residual":
            raise ValueError(f"the post-ln layout (TrXL) uses residual connections, not gate {gate!r}")
        self.identity_map = layout == "identity-map"
        self.attn = attention
        self.ff = PositionwiseFeedForward(d_model, d_inner, dropout, ff_chunks)
        self.attn_norm = nn.LayerNorm(d_model)
        self.ff_norm = nn.LayerNorm(d_model)
        self.attn_gate = make_gate(gate, d_model, gate_bias)
        self.ff_gate = make_gate(gate, d_model, gate_bias)
        self.drop = nn.Dropout(dropout)

    def memory_kv(self, memory: Tensor) -> KeysValues:
        """Keys and values of this layer's memory ``[B, M, D]`` (normalised first in identity-map)."""
        return self.attn.keys_values(self.attn_norm(memory) if self.identity_map else memory)

    def attention_branch(self, h: Tensor, *context: Any) -> tuple[Tensor, Any]:
        """The identity-map attention submodule ``ReLU(MHA(LN(h̃)))`` and what the attention returns beside it."""
        y, carried = self.attn(self.attn_norm(h), *context)
        return self.drop(y).relu(), carried

    def feedforward_branch(self, h: Tensor) -> Tensor:
        """The identity-map feed-forward submodule ``ReLU(f(LN(h)))``."""
        return self.drop(self.ff(self.ff_norm(h))).relu()

    def forward(self, h: Tensor, *context: Any) -> tuple[Tensor, Any]:
        """``h``: ``[B, T, D]`` this layer's input for the segment, ``context`` the attention's other
        arguments; returns the block's output and what the attention returns beside its own (the
        keys and values of ``[memory; segment]``, or the carry after the segment)."""
        if self.identity_map:
            y, carried = self.attention_branch(h, *context)
            stream = self.attn_gate(h, y)
            out = self.ff_gate(stream, self.feedforward_branch(stream))
        else:
            y, carried = self.attn(h, *context)
            stream = self.attn_norm(self.attn_gate(h, self.drop(y)))
            out = self.ff_norm(self.ff_gate(stream, self.drop(self.ff(stream))))
        return out, carried
