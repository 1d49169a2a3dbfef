"""Backbones by name: ``make_backbone("gtrxl", input_dim, memory_length=64)``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from policies.backbone import MemoryBackbone
from policies.backbones.linear_transformer import LinearTransformer
from policies.backbones.mlp import FrameStack, MLPMemoryless
from policies.backbones.recurrent import RecurrentMemory
from policies.backbones.reversible_transformer import ReversibleTransformerXL
from policies.backbones.transformer_xl import TransformerXL
from policies.backbones.universal import UniversalTransformerACT


@dataclass(frozen=True)
class BackboneSpec:
    """A registry entry: the class, the options the name fixes, and a one-line summary."""

    cls: type[MemoryBackbone]
    summary: str
    fixed: dict[str, Any] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        """The options a user may set, with their defaults."""
        params = inspect.signature(self.cls.__init__).parameters
        return {name: p.default for name, p in params.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in self.fixed}


BACKBONES: dict[str, BackboneSpec] = {
    "trxl": BackboneSpec(TransformerXL, "Transformer-XL, post-LN blocks (Dai et al. 2019)",
                         {"layout": "post-ln", "gate": "residual", "gate_bias": None}),
    "trxl-i": BackboneSpec(TransformerXL, "TrXL-I: identity-map reordering (Parisotto et al. 2020)",
                           {"layout": "identity-map", "gate": "residual", "gate_bias": None}),
    "gtrxl": BackboneSpec(TransformerXL, "GTrXL: TrXL-I with gating layers (Parisotto et al. 2020)",
                          {"layout": "identity-map"}),
    "trxl-rev": BackboneSpec(ReversibleTransformerXL,
                             "reversible Transformer-XL: TrXL-I submodules in RevNet couplings, no activations "
                             "kept for backward (Gomez et al. 2017; Kitaev et al. 2020)"),
    "ut-act": BackboneSpec(UniversalTransformerACT,
                           "Universal Transformer with ACT halting (Dehghani et al. 2019; Graves 2016)"),
    "linear": BackboneSpec(LinearTransformer,
                           "Linear Transformer: causal linear attention in recurrent form (Katharopoulos et al. 2020)"),
    "lstm": BackboneSpec(RecurrentMemory, "LSTM (Hochreiter & Schmidhuber 1997)", {"cell": "lstm"}),
    "gru": BackboneSpec(RecurrentMemory, "GRU (Cho et al. 2014)", {"cell": "gru"}),
    "mlp": BackboneSpec(MLPMemoryless, "memoryless MLP"),
    "framestack": BackboneSpec(FrameStack, "MLP over the last k observations"),
}


def make_backbone(name: str, input_dim: int, **options: Any) -> MemoryBackbone:
    """Build the backbone ``name`` for inputs of width ``input_dim``.

    Raises:
        ValueError: unknown name or option; the message lists the valid ones.
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; valid backbones: {', '.join(BACKBONES)}")
    spec = BACKBONES[name]
    valid = spec.options()
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(map(repr, unknown))} for backbone {name!r}; "
                         f"valid options: {', '.join(valid)}")
    return spec.cls(input_dim, **spec.fixed, **options)
