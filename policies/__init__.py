"""The Transformer memory family and the SB3 policy around it (docs/design.md, "Where things live").

- :mod:`policies.positions`: position schemes (``POSITIONS``), which add score terms or input encodings;
- :mod:`policies.attention`: key patterns and memory kinds (``ATTENTIONS``), the one attention kernel;
- :mod:`policies.backbones`: the backbones (Transformer-XL family, Universal Transformer with ACT, reversible,
  linear, recurrent, MLP baselines), with their blocks and gates; :mod:`policies.registry` names them
  (``BACKBONES``, ``make_backbone``);
- :mod:`policies.lm`: the language model and its retrieval (kNN-LM, SPALM);
- at the root: the memory contract (:mod:`policies.backbone`), the window operations (:mod:`policies.window`),
  the SB3 policy (:mod:`policies.policy`) and its PopArt value head (:mod:`policies.popart`).
"""

from policies.attention import ATTENTIONS
from policies.backbone import MemoryBackbone
from policies.positions import POSITIONS
from policies.registry import BACKBONES, make_backbone

__all__ = ["ATTENTIONS", "BACKBONES", "POSITIONS", "MemoryBackbone", "make_backbone"]
