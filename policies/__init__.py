"""Memory backbones (Transformer-XL family, Universal Transformer with ACT, RNN and MLP
baselines) and the components they are built from."""

from policies import (  # noqa: F401  (each module registers its attention)
    absolute_attention,
    adaptive_span,
    alibi,
    bigbird_attention,
    blockwise_attention,
    compressive_memory,
    distance_aware,
    fixed_attention,
    global_local_attention,
    image_local_attention,
    knn_memory,
    linformer_attention,
    local_attention,
    lsh_attention,
    relative_attention,
    shaw_attention,
    strided_attention,
)
from policies.attention import ATTENTIONS
from policies.backbone import MemoryBackbone
from policies.registry import BACKBONES, make_backbone

__all__ = ["ATTENTIONS", "BACKBONES", "MemoryBackbone", "make_backbone"]
