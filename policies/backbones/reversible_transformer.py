"""The `trxl-rev` backbone: Transformer-XL memory in reversible layers (Reformer, Kitaev et al. 2020,
Sec. 3; RevNet, Gomez et al. 2017), trained without keeping any layer's activations."""

from __future__ import annotations

from torch import Tensor, nn

from envs.rules import Count, CountOrNone, OptionalMapping
from policies.attention.layer import AttentionName, KeysValues, PositionName, SharedRecords, make_attention
from policies.backbone import Aux
from policies.backbones.reversible import ReversibleLayer, reversible_stack
from policies.backbones.transformer_xl import TransformerXLBlock, WindowTransformer
from policies.options import checked


class ReversibleTransformerXL(WindowTransformer):
    """A stack of `n_layers` reversible layers (`ReversibleLayer`) over an
    episode memory of `memory_length` steps.

    The embedded input is duplicated, `X₁ = X₂ = E` (Reformer), every layer computes
    `Y₁ = X₁ + ReLU(MHA(LN([SG(m); X₂])))`, `Y₂ = X₂ + ReLU(f(LN(Y₁)))` (TrXL-I's submodules in
    RevNet's coupling), and the output is the mean `(Y₁ + Y₂) / 2` of the last layer's halves, so a
    fresh stack, whose branches are near zero, is near the identity like TrXL-I.

    Memory: the attention of layer `l` reads `X₂`, so the record a step leaves is every layer's
    `X₂`, `[n_layers, d_model]`, exactly as many bytes as GTrXL's (1,024 per step at d_model 128,
    2 layers, float32); layer `l` attends from `X₂` to its `X₂` of the last `M` steps of the
    episode (kept without gradient) and to the current step. Training segments run through
    `reversible_stack`, which keeps only the stack's outputs and the memory's
    keys and values for backward and recomputes each layer once in backward; rollout steps run the same
    layers without gradient, so both paths compute the same function.

    There is no `gate`: a GTrXL gate cannot be inverted by subtraction; and no `dropout`: the
    backward pass recomputes every branch and would need the forward's random numbers.
    """

    @checked()
    def __init__(self, input_dim: int, *, d_model: Count = 128, n_layers: Count = 2, n_heads: Count = 4,
                 d_head: CountOrNone = None, d_inner: CountOrNone = None, memory_length: Count = 64,
                 attention: AttentionName = "full", attention_options: OptionalMapping = None,
                 position: PositionName = None, position_options: OptionalMapping = None,
                 ff_chunks: Count = 1) -> None:
        super().__init__(input_dim, d_model=d_model, n_heads=n_heads, d_head=d_head,
                         memory_length=memory_length, n_depth=n_layers)
        self.layers = nn.ModuleList(
            ReversibleLayer(TransformerXLBlock(make_attention(attention, d_model, n_heads, self.d_head,
                                                              max_distance=memory_length, options=attention_options,
                                              position=position, position_options=position_options),
                                               d_model, d_inner or 4 * d_model, layout="identity-map",
                                               gate="residual", ff_chunks=ff_chunks))
            for _ in range(n_layers))

    @property
    def memory_blocks(self) -> list[TransformerXLBlock]:
        return [layer.block for layer in self.layers]

    def _depth(self, h: Tensor, memory_kv: list[KeysValues], mask: Tensor,
               position_terms: list[Tensor | None]) -> tuple[Tensor, Tensor, list[KeysValues], Aux]:
        # the reversible backward takes the gradient of plain tensors: shared records become windows here
        contexts = [(*(kv.windows() if isinstance(kv, SharedRecords) else kv for kv in pair), mask, terms)
                    for pair, terms in zip(memory_kv, position_terms, strict=True)]
        y1, y2, records, window_kv = reversible_stack(list(self.layers), h, h, contexts)
        return (y1 + y2) / 2, records, window_kv, {}
