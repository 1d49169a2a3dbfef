"""Transformer-XL blocks: attention over ``[memory; segment]`` plus a position-wise MLP.

Three layouts from Parisotto et al. (2020, Sec. 3), with ``h̃ = [SG(M); E]``:

- ``post-ln`` (canonical TrXL): ``Y = LN(E + MHA(h̃))``, ``E' = LN(Y + f(Y))``;
- ``identity-map`` with residual gates (TrXL-I): ``Y = E + ReLU(MHA(LN(h̃)))``,
  ``E' = Y + ReLU(f(LN(Y)))`` — LayerNorm only on submodule inputs, so an un-normalised
  identity path runs from the first layer's input to the last layer's output;
- ``identity-map`` with a GTrXL gate in place of each residual:
  ``Y = g_MHA(E, ReLU(MHA(LN(h̃))))``, ``E' = g_MLP(Y, ReLU(f(LN(Y))))``.
"""

from __future__ import annotations

from torch import Tensor, nn

from policies.attention import KeysValues, make_attention
from policies.gates import make_gate

LAYOUTS = ("post-ln", "identity-map")


class PositionwiseFeedForward(nn.Module):
    """``f(x) = W_2 ReLU(W_1 x + b_1) + b_2``; its output has no activation of its own."""

    def __init__(self, d_model: int, d_inner: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(d_inner, d_model))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class TransformerXLBlock(nn.Module):
    """One Transformer-XL layer in the ``post-ln`` or ``identity-map`` layout (see module doc).

    ``gate`` names the merge of stream and submodule output (``residual`` or a GTrXL gate
    from :mod:`policies.gates`); the post-LN layout only takes ``residual``. ``attention`` names
    a registered attention (:data:`policies.attention.ATTENTIONS`) and with it the position
    scheme; ``max_distance`` is the farthest key a query sees (the memory length).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, d_inner: int, *, max_distance: int,
                 layout: str = "identity-map", gate: str = "residual", gate_bias: float | None = None,
                 attention: str = "relative", dropout: float = 0.0) -> None:
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"unknown block layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
        if layout == "post-ln" and gate != "residual":
            raise ValueError(f"the post-ln layout (TrXL) uses residual connections, not gate {gate!r}")
        self.identity_map = layout == "identity-map"
        self.attn = make_attention(attention, d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, d_inner, dropout)
        self.attn_norm = nn.LayerNorm(d_model)
        self.ff_norm = nn.LayerNorm(d_model)
        self.attn_gate = make_gate(gate, d_model, gate_bias)
        self.ff_gate = make_gate(gate, d_model, gate_bias)
        self.drop = nn.Dropout(dropout)

    def memory_kv(self, memory: Tensor) -> KeysValues:
        """Keys and values of this layer's memory ``[B, M, D]`` (normalised first in identity-map)."""
        return self.attn.keys_values(self.attn_norm(memory) if self.identity_map else memory)

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_terms: Tensor | None = None) -> tuple[Tensor, KeysValues]:
        """``h``: ``[B, T, D]`` this layer's input for the segment; returns its output and the keys
        and values of ``[memory; segment]``."""
        if self.identity_map:
            y, kv = self.attn(self.attn_norm(h), memory_kv, mask, position_terms)
            stream = self.attn_gate(h, self.drop(y).relu())
            out = self.ff_gate(stream, self.drop(self.ff(self.ff_norm(stream))).relu())
        else:
            y, kv = self.attn(h, memory_kv, mask, position_terms)
            stream = self.attn_norm(self.attn_gate(h, self.drop(y)))
            out = self.ff_norm(self.ff_gate(stream, self.drop(self.ff(stream))))
        return out, kv
