"""Multi-head attention of a segment over ``[memory; segment]``, and the registry of attentions.

Queries come from the segment only; keys and values from the memory (kept without gradient by
the caller) followed by the segment, as in Transformer-XL (Dai et al. 2019, Sec. 3.2). A
boolean mask says which keys each query may see; it always allows the query itself, so no row
is fully masked and ``-inf`` never turns into NaN.

Every attention is registered by name (:data:`ATTENTIONS`, :func:`make_attention`) and owns
its position scheme: the terms it precomputes from its parameters once per forward pass
(:meth:`MultiHeadAttention.position_terms`, cached during rollouts) and the bias they add to
the scores (:meth:`MultiHeadAttention.score_bias`). A block takes an attention by name
(``-p gtrxl.attention=alibi``); a new scheme is one module with a registered subclass.

Tensor layout: hidden states ``[B, T, D]``, per-head tensors ``[B, H, N, d_head]``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SharedRecords(NamedTuple):
    """The keys (or values) of a minibatch's distinct memory records and where they sit in its windows
    (:func:`policies.memory.shared_windows`): ``table`` ``[R, H, d_head]`` holds them once per record, and
    window ``n``'s slot ``m`` holds ``table[slots[n, m]]`` (``slots`` ``[N, M]``)."""

    table: Tensor
    slots: Tensor

    def windows(self) -> Tensor:
        """The windows' keys (or values), ``[N, H, M, d_head]``."""
        return self.table[self.slots].transpose(1, 2)


KeysValues = tuple[Tensor | SharedRecords, Tensor | SharedRecords]
"""Keys and values ``[B, H, N, d_head]`` each; a memory's may be :class:`SharedRecords` (an update's minibatch)."""


def join_memory(memory_kv: KeysValues, k_seg: Tensor, v_seg: Tensor) -> tuple[Tensor, Tensor]:
    """The keys and values of ``[memory; segment]``, ``[B, H, M + T, d_head]`` each, from the memory's ``[B, H, M,
    d_head]`` or its shared records and the segment's ``[B, H, T, d_head]``. Shared records are gathered straight
    into the joined layout: one contiguous copy, where gathering the windows and then concatenating made two,
    the first of them strided (README, "Training speed"); keys and values share the index of their rows."""
    keys, values = memory_kv
    if isinstance(keys, Tensor) and isinstance(values, Tensor):
        return torch.cat([keys, k_seg], dim=2), torch.cat([values, v_seg], dim=2)
    assert isinstance(keys, SharedRecords) and isinstance(values, SharedRecords)
    B, H, T, d = k_seg.shape
    R = keys.table.shape[0]
    own = R + torch.arange(B * T, device=k_seg.device).view(B, T)  # the segment's rows
    rows = torch.cat([keys.slots, own], dim=1)  # [B, M + T]: the row behind every key
    index = rows.unsqueeze(1) * H + torch.arange(H, device=k_seg.device).view(1, H, 1)  # [B, H, M + T]

    def gather(memory: SharedRecords, segment: Tensor) -> Tensor:
        table = torch.cat([memory.table, segment.transpose(1, 2).reshape(B * T, H, d)])  # [R + B T, H, d]
        return F.embedding(index, table.view(-1, d))

    return gather(keys, k_seg), gather(values, v_seg)

ATTENTIONS: dict[str, type[MultiHeadAttention]] = {}
"""name → attention class; filled by :func:`register_attention` when ``policies`` is imported."""


def register_attention(name: str) -> Callable[[type[MultiHeadAttention]], type[MultiHeadAttention]]:
    """Class decorator: make an attention selectable as ``attention=name``."""

    def register(cls: type[MultiHeadAttention]) -> type[MultiHeadAttention]:
        if name in ATTENTIONS:
            raise ValueError(f"attention {name!r} is registered twice")
        ATTENTIONS[name] = cls
        return cls

    return register


def attention_options(name: str) -> dict[str, Any]:
    """The options of attention ``name`` beyond the shared ones, with their defaults (e.g. ``knn``'s ``top_k``)."""
    params = inspect.signature(ATTENTIONS[name].__init__).parameters
    return {option: p.default for option, p in params.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and option not in ("max_distance", "dropout")}


def make_attention(name: str, d_model: int, n_heads: int, d_head: int, *, max_distance: int,
                   dropout: float = 0.0, options: dict[str, Any] | None = None) -> MultiHeadAttention:
    """The attention ``name``; ``max_distance`` is the farthest key a query may see (the memory length),
    ``options`` the attention's own settings (:func:`attention_options`).

    Raises:
        ValueError: unknown name or option; the message lists the valid ones.
    """
    if name not in ATTENTIONS:
        raise ValueError(f"unknown attention {name!r}; valid attentions: {', '.join(ATTENTIONS)}")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"the options of attention {name!r} must be a mapping of option to value, got {options!r}; "
                         f"valid options: {', '.join(attention_options(name)) or 'none'}")
    unknown = sorted(set(options) - set(attention_options(name)))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(map(repr, unknown))} for attention {name!r}; "
                         f"valid options: {', '.join(attention_options(name)) or 'none'}")
    return ATTENTIONS[name](d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout, **options)


def key_distances(n_queries: int, n_keys: int, device: torch.device) -> Tensor:
    """``[T, K]`` distances from query ``i`` of the segment to key ``j`` of ``[memory; segment]``:
    ``(K - T) + i - j`` (negative for keys in the future, which the mask hides)."""
    queries = torch.arange(n_queries, device=device).view(-1, 1) + (n_keys - n_queries)
    return queries - torch.arange(n_keys, device=device).view(1, -1)


def key_times(clock: Tensor, n_keys: int) -> Tensor:
    """``[B, T, K]`` episode time of each key of ``[memory; segment]`` for the queries at episode times ``clock``
    ``[B, T]``: a key ``d`` steps before a query at time ``t`` has time ``t − d`` (below 0 for keys before the
    episode, above ``t`` for later ones: the memory mask hides both)."""
    return clock.unsqueeze(-1) - key_distances(clock.shape[1], n_keys, clock.device)


class HeadProjections(nn.Module):
    """The projections every multi-head attention shares (Vaswani et al. 2017): queries ``h W_q``,
    keys and values ``h W_k``, ``h W_v`` split into ``H`` heads of width ``d_head``, and the output
    projection of the concatenated heads (all without bias, Xavier-uniform as in Transformer-XL)."""

    def __init__(self, d_model: int, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.q_net = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.kv_net = nn.Linear(d_model, 2 * n_heads * d_head, bias=False)
        self.out_net = nn.Linear(n_heads * d_head, d_model, bias=False)
        for layer in (self.q_net, self.kv_net, self.out_net):
            nn.init.xavier_uniform_(layer.weight)

    def _heads(self, x: Tensor) -> Tensor:
        """``[B, N, H*d]`` → ``[B, H, N, d]``."""
        B, N, _ = x.shape
        return x.view(B, N, self.n_heads, self.d_head).transpose(1, 2)

    def queries(self, h: Tensor) -> Tensor:
        """Queries of hidden states ``[B, N, D]``, ``[B, H, N, d_head]``."""
        return self._heads(self.q_net(h))

    def keys_values(self, h: Tensor) -> KeysValues:
        """Keys and values of hidden states ``[B, N, D]``, each ``[B, H, N, d_head]``."""
        k, v = self.kv_net(h).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def merge(self, heads: Tensor) -> Tensor:
        """Per-head outputs ``[B, H, N, d_head]`` → the projected output ``[B, N, D]``."""
        B, _, N, _ = heads.shape
        return self.out_net(heads.transpose(1, 2).reshape(B, N, -1))


@register_attention("none")
class MultiHeadAttention(HeadProjections):
    """Scaled dot-product attention, ``softmax(q kᵀ / √d_head + bias) v``, over ``[memory; segment]``.

    Vaswani et al. (2017), with Transformer-XL's memory: ``q = h W_q``, ``k = h̃ W_k``,
    ``v = h̃ W_v`` where ``h̃ = [SG(m); h]``. Registered as ``none``: content only, no position
    information (order is then only visible through the memory's content). Subclasses add a
    position scheme through :meth:`position_terms`, :meth:`score_bias` and :meth:`content_query`.
    """

    complexity = "O(n²)"
    """the time its paper claims for a sequence of ``n`` tokens (here every windowed member scores its ``M + T``
    keys densely and masks them: ``benchmarks/attention_scaling.py``)"""

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_head)
        self.max_distance = max_distance
        self.scale = 1.0 / math.sqrt(d_head)
        self.dropout = dropout

    aux_loss_coefs: dict[str, float] = {}
    """default coefficients of the losses among :meth:`aux_terms`"""

    uses_episode_time = False
    """whether the attention restricts keys by the queries' episode time through an ``episode_pattern(clock,
    n_keys)`` method (:class:`~policies.fixed_attention.FixedAttention`); the backbone then keeps the episode
    clock in its state and narrows the mask with it. The pattern is ``[B, T, K]``, shared by the heads, or
    ``[B, H, T, K]``, one per head (:class:`~policies.blockwise_attention.BlockwiseAttention`), which makes
    the mask :meth:`forward` receives per head too"""

    @property
    def reach(self) -> int:
        """The farthest key, in steps back, that can change a query's output (the memory length here)."""
        return self.max_distance

    def position_terms(self) -> Tensor | None:
        """What the position scheme computes from its parameters once per pass (none here)."""
        return None

    def aux_terms(self) -> dict[str, Tensor]:
        """Scalar losses and statistics of the attention's own parameters (e.g. a span penalty), added
        to the backbone's ``aux`` in training (none here)."""
        return {}

    def score_bias(self, q: Tensor, position_terms: Tensor | None, n_keys: int) -> Tensor | None:
        """An additive term for the ``[B, H, T, K]`` scores, already scaled (none here)."""
        return None

    def content_query(self, q: Tensor) -> Tensor:
        """The query that multiplies the content keys."""
        return q

    def key_bias(self, q: Tensor, k: Tensor) -> Tensor | None:
        """An additive term for the ``[B, H, T, K]`` scores that depends on the keys themselves, already
        scaled (none here; a learned gate on which keys stay visible, :mod:`policies.global_local_attention`)."""
        return None

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
                per head (an attention with a per-head ``episode_pattern``).
            position_terms: what :meth:`position_terms` returned.

        Returns:
            The output ``[B, T, D]`` and the keys and values of ``[memory; segment]``
            ``[B, H, M + T, d_head]`` (a rollout step keeps their last ``M`` as its next cache).
        """
        q, k, v = self.segment_qkv(h, memory_kv)
        heads_mask = mask if mask.dim() == 4 else mask.unsqueeze(1)
        return self.merge(self.attend(q, k, v, heads_mask, position_terms)), (k, v)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, position_terms: Tensor | None) -> Tensor:
        """The per-head outputs ``[B, H, T, d_head]`` of queries ``q`` over keys ``k`` and values ``v``
        (``[B, H, N, d_head]``); ``mask`` ``[B, 1, T, K]`` broadcasts over the heads (``[B, H, T, K]``: per head)."""
        bias = self.score_bias(q, position_terms, k.shape[2])
        key_bias = self.key_bias(q, k)
        if key_bias is not None:
            bias = key_bias if bias is None else bias + key_bias
        dropout = self.dropout if self.training else 0.0
        if bias is not None and bias.requires_grad:
            # A bias that needs a gradient sends torch's CPU kernel to its unfused path, which scales every
            # key; here the scale goes on the queries, of which an update has one per window (README,
            # "Training speed").
            scores = (self.content_query(q) * self.scale) @ k.transpose(-2, -1) + bias
            weights = F.dropout(scores.masked_fill(~mask, float("-inf")).softmax(dim=-1), dropout, self.training)
            return weights @ v
        attn_mask = mask if bias is None else bias.masked_fill(~mask, float("-inf"))
        return F.scaled_dot_product_attention(self.content_query(q), k, v, attn_mask=attn_mask, dropout_p=dropout,
                                              scale=self.scale)
