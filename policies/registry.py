"""Backbones by name: `make_backbone("gtrxl", input_dim, memory_length=64)`.

A saved model or run records every option of its backbone (`BackboneSpec.resolve`), so a later change
of a default never changes how it loads or resumes; a file that lacks an option is refused (`saved_options`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Annotated, Any

from envs.rules import ConfigError, OneOf, Range, Registry, shown
from policies.backbone import MemoryBackbone
from policies.backbones.ffm import FastForgetfulMemory
from policies.backbones.linear_transformer import LinearTransformer
from policies.backbones.lru import LinearRecurrentUnit
from policies.backbones.mamba import Mamba
from policies.backbones.mingru import MinGRU
from policies.backbones.mlp import FrameStack, MLPMemoryless
from policies.backbones.mlstm import MatrixLSTM
from policies.backbones.recurrent import RecurrentMemory
from policies.backbones.reversible_transformer import ReversibleTransformerXL
from policies.backbones.transformer_xl import TransformerXL
from policies.backbones.universal import UniversalTransformerACT


@dataclass(frozen=True)
class BackboneSpec:
    """A registry entry: the class, a one-line summary, and the options the name fixes."""

    cls: type[MemoryBackbone]
    summary: str
    fixed: dict[str, Any] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        """The options a user may set, with their defaults."""
        params = inspect.signature(self.cls.__init__).parameters
        return {name: p.default for name, p in params.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in self.fixed}

    def resolve(self, options: dict[str, Any]) -> dict[str, Any]:
        """Every option: `options` over the defaults (unknown names are left for `make_backbone`)."""
        return {**self.options(), **options}


BACKBONES: Registry[BackboneSpec] = Registry("backbone", {
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
    "ffm": BackboneSpec(FastForgetfulMemory, "Fast and Forgetful Memory: decaying, oscillating linear aggregator "
                                             "(Morad et al. 2023)"),
    "lru": BackboneSpec(LinearRecurrentUnit, "Linear Recurrent Unit: diagonal complex linear recurrence with ring "
                                             "initialisation (Orvieto et al. 2023)"),
    "mamba": BackboneSpec(Mamba, "Mamba: selective state space model (S6) blocks, plain PyTorch scan "
                                 "(Gu & Dao 2023)"),
    "mingru": BackboneSpec(MinGRU, "minGRU: a GRU whose gates read only the input, trained with a parallel scan "
                                   "(Feng et al. 2024)"),
    "mlstm": BackboneSpec(MatrixLSTM, "mLSTM: the matrix-memory LSTM of xLSTM, chunked parallel form "
                                      "(Beck et al. 2024)"),
    "mlp": BackboneSpec(MLPMemoryless, "memoryless MLP"),
    "framestack": BackboneSpec(FrameStack, "MLP over the last k observations"),
})

BackboneName = Annotated[str, OneOf(lambda: BACKBONES)]
CriticBackboneName = Annotated[str | None, OneOf(lambda: BACKBONES, optional=True)]
"""the critic's own backbone; ``None``: the actor's"""

def saved_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Every option of a backbone as saved in a model or run.

    Raises:
        ConfigError: (a ValueError) the file lacks an option of the backbone (saved before options were recorded).
    """
    if name not in BACKBONES:
        return dict(options)
    missing = sorted(set(BACKBONES[name].options()) - set(options))
    if missing:
        raise ConfigError(f"saved backbone {name!r} lacks option(s) {', '.join(missing)}: it was saved before every "
                         "option was recorded, and defaults may have changed since; retrain it, or add the options it "
                         "was trained with")
    return BACKBONES[name].resolve(options)


def make_backbone(name: str, input_dim: int, **options: Any) -> MemoryBackbone:
    """Build the backbone `name` for inputs of width `input_dim`.

    Raises:
        ConfigError: (a ValueError) an unknown name, an option the backbone does not take (or one its name fixes),
            or a value its rule refuses; one line naming the argument, the value and the valid choices.
    """
    spec = BACKBONES.entry(name, key="name")
    Range(1, integer=True).check("input_dim", input_dim)
    valid = spec.options()
    for option, value in options.items():
        if option in spec.fixed:
            raise ConfigError(f"{option}={shown(value)}: option {option!r} is fixed by backbone {name!r} "
                              f"({option}={shown(spec.fixed[option])}); valid options: {', '.join(valid)}")
    unknown = [option for option in options if option not in valid]
    if unknown:
        raise ConfigError(f"{', '.join(f'{option}={shown(options[option])}' for option in unknown)}: unknown "
                          f"option(s) {', '.join(map(repr, unknown))} for backbone {name!r}; valid options: "
                          f"{', '.join(valid)}")
    backbone = spec.cls(input_dim, **spec.fixed, **options)
    backbone.input_dim = input_dim
    return backbone
