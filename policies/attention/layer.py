"""Multi-head attention over ``[memory; segment]``: the projections, a position scheme and a key pattern,
joined at the one kernel (:func:`policies.attention.kernel.attend`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import Tensor

from policies.attention import ATTENTIONS
from policies.attention.kernel import HeadProjections, KeysValues, attend, join_memory, score_scale
from policies.attention.pattern import Pattern
from policies.positions import POSITIONS
from policies.positions.base import Position


class MultiHeadAttention(HeadProjections):
    """Attention of a segment over ``[memory; segment]`` (Vaswani et al. 2017, with Transformer-XL's memory,
    Dai et al. 2019: ``q = h W_q``, ``k = h̃ W_k``, ``v = h̃ W_v`` where ``h̃ = [SG(m); h]``), along two axes:

    - ``position`` (:data:`policies.POSITIONS`): the order information the scores get;
    - ``attention`` (:data:`policies.ATTENTIONS`): the key pattern or memory kind, which keys a query sees.

    Any position combines with any pattern; a pair that cannot is refused here, naming both and why. Without a
    ``position``, the pattern's ``default_position``. ``max_distance`` is the farthest key a query may see (the
    memory length).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0,
                 attention: str = "full", position: str | None = None,
                 attention_options: dict[str, Any] | None = None,
                 position_options: dict[str, Any] | None = None) -> None:
        if attention not in ATTENTIONS:
            raise ValueError(f"unknown attention {attention!r}; valid attentions: {', '.join(ATTENTIONS)}")
        pattern_cls = ATTENTIONS[attention].cls
        super().__init__(d_model, n_heads, d_head, shared_qk=pattern_cls.shared_qk)
        sizes = {"d_model": d_model, "n_heads": n_heads, "d_head": d_head, "max_distance": max_distance}
        position = pattern_cls.default_position if position is None else position
        # the position first: its parameters are drawn before the pattern's, as when patterns subclassed it
        self.position: Position = POSITIONS.build(position, position_options, **sizes)
        self.pattern: Pattern = ATTENTIONS.build(attention, attention_options, **sizes)
        reason = self.pattern.refuses(self.position)
        if reason is not None:
            raise ValueError(f"attention {attention!r} cannot combine with position {position!r}: {reason}")
        self.max_distance = max_distance
        self.scale = score_scale(d_head)
        self.dropout = dropout

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        """Load a state dict, also one saved when each attention was one class (before 2026-11, engram at
        265c8b3): the position's and the pattern's parameters sat on the attention itself (``attn.r_net.weight``,
        ``attn.u``, ``attn.span_fraction``) and now sit on its ``position`` and ``pattern``; their names within
        them are unchanged, so each such key moves to the one of the two that holds the name."""
        for part in ("position", "pattern"):
            for name in getattr(self, part).state_dict():
                old, new = prefix + name, f"{prefix}{part}.{name}"
                if old in state_dict and new not in state_dict:
                    state_dict[new] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def reach(self) -> int:
        """The farthest key, in steps back, that can change a query's output."""
        return self.pattern.reach

    @property
    def uses_episode_time(self) -> bool:
        """Whether the pattern is laid out in episode time (the backbone then keeps the episode clock)."""
        return self.pattern.uses_episode_time

    def episode_pattern(self, clock: Tensor, n_keys: int) -> Tensor:
        """The pattern's mask in episode time (:meth:`policies.attention.pattern.Pattern.episode_pattern`)."""
        return self.pattern.episode_pattern(clock, n_keys)

    @property
    def aux_loss_coefs(self) -> dict[str, float]:
        """Default coefficients of the losses among :meth:`aux_terms`."""
        return dict(self.pattern.aux_loss_coefs)

    def aux_terms(self) -> dict[str, Tensor]:
        """Scalar losses and statistics of the pattern's parameters, added to the backbone's ``aux`` in training."""
        return self.pattern.aux_terms()

    def position_terms(self) -> Tensor | None:
        """What the position scheme computes from its parameters once per pass (cached during rollouts)."""
        return self.position.terms(self)

    def segment_qkv(self, h: Tensor, memory_kv: KeysValues) -> tuple[Tensor, Tensor, Tensor]:
        """Queries of the segment ``h`` and keys and values of ``[memory; segment]``, ``[B, H, N, d_head]``."""
        k_seg, v_seg = self.keys_values(h)
        return self.queries(h), *join_memory(memory_kv, k_seg, v_seg)

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_terms: Tensor | None = None) -> tuple[Tensor, KeysValues]:
        """Attend from the segment ``h`` ``[B, T, D]`` to ``[memory; segment]``.

        Args:
            memory_kv: keys and values of the memory, ``[B, H, M, d_head]`` each, or its shared records.
            mask: ``[B, T, M + T]`` bool, ``True`` where query ``i`` may see key ``j``, or ``[B, H, T, M + T]``
                per head (a pattern with a per-head ``episode_pattern``).
            position_terms: what :meth:`position_terms` returned.

        Returns:
            The output ``[B, T, D]`` and the keys and values of ``[memory; segment]``
            ``[B, H, M + T, d_head]`` (a rollout step keeps their last ``M`` as its next cache).
        """
        q, k, v = self.segment_qkv(h, memory_kv)
        heads_mask = mask if mask.dim() == 4 else mask.unsqueeze(1)
        kernel = partial(attend, scale=self.scale, position=self.position, terms=position_terms,
                         dropout=self.dropout if self.training else 0.0)
        return self.merge(self.pattern.read(q, k, v, heads_mask, kernel)), (k, v)


def make_attention(attention: str, d_model: int, n_heads: int, d_head: int, *, max_distance: int,
                   dropout: float = 0.0, options: dict[str, Any] | None = None, position: str | None = None,
                   position_options: dict[str, Any] | None = None) -> MultiHeadAttention:
    """The attention with key pattern (or memory kind) ``attention`` and position scheme ``position``. A
    position scheme named as ``attention`` (the names of the flat layout: ``relative``, ``alibi``, ``shaw``,
    ``distance-aware``, ``absolute``, ``none``) means the full window with that position and those options.

    Raises:
        ValueError: an unknown name or option (the message lists the valid ones), or a pair that cannot combine.
    """
    if attention in POSITIONS and attention not in ATTENTIONS and position is None:
        # the flat layout registered each position scheme as an attention over the full window ("relative",
        # "alibi", ...): the name and its options keep that meaning
        attention, position, options, position_options = "full", attention, None, options
    return MultiHeadAttention(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout,
                              attention=attention, position=position, attention_options=options,
                              position_options=position_options)
