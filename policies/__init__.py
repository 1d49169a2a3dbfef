"""Memory backbones (Transformer-XL family, Universal Transformer with ACT, RNN and MLP
baselines) and the components they are built from."""

from policies.backbone import MemoryBackbone
from policies.registry import BACKBONES, make_backbone

__all__ = ["BACKBONES", "MemoryBackbone", "make_backbone"]
