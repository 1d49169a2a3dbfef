"""The Transformer memory family and the SB3 policy around it (docs/design.md, "Where things live").

- `policies.positions`: position schemes (`POSITIONS`), which add score terms or input encodings;
- `policies.attention`: key patterns and memory kinds (`ATTENTIONS`), the one attention kernel;
- `policies.backbones`: the backbones (Transformer-XL family, Universal Transformer with ACT, reversible,
  linear, recurrent, MLP baselines), with their blocks and gates; `policies.registry` names them
  (`BACKBONES`, `make_backbone`);
- `policies.lm`: the language model and its retrieval (kNN-LM, SPALM);
- at the root: the memory contract (`policies.backbone`), the window operations (`policies.window`),
  the SB3 policy (`policies.policy`) and its PopArt value head (`policies.popart`);
- the rules of options and their check (`envs.rules`, `policies.options`), which import no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPORTS = {"ATTENTIONS": "policies.attention", "BACKBONES": "policies.registry", "POSITIONS": "policies.positions",
           "MemoryBackbone": "policies.backbone", "make_backbone": "policies.registry"}
"""the package's names and the modules that define them, imported on first use: importing the torch-free
:mod:`envs.rules` and :mod:`policies.options` (the command line's run settings) loads no torch"""

__all__ = list(EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module 'policies' has no attribute {name!r}")
    return getattr(importlib.import_module(EXPORTS[name]), name)
