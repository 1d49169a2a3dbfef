"""The attention kernel: every member of the family computes its scores, mask and weights in :func:`attend`.

Queries come from the segment only; keys and values from the memory (kept without gradient by the caller)
followed by the segment, as in Transformer-XL (Dai et al. 2019, Sec. 3.2). The three axes meet here:

- the **position scheme** (:mod:`policies.positions`) rotates queries and keys, adds a content-query bias,
  a score term and a value term, or replaces the softmax;
- the **key pattern** (:mod:`policies.attention`) narrows the mask or adds a soft bias;
- the **memory kind** decides which keys exist: the window's, or per-query slots (compressed blocks,
  projected keys) handed in as :class:`Slots`.

Tensor layout: hidden states ``[B, T, D]``, per-head tensors ``[B, H, N, d_head]``, scores ``[B, H, T, K]``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.window import key_distances

if TYPE_CHECKING:
    from policies.positions.base import Position


class SharedRecords(NamedTuple):
    """The keys (or values) of a minibatch's distinct memory records and where they sit in its windows
    (:func:`policies.window.shared_windows`): ``table`` ``[R, H, d_head]`` holds them once per record, and
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
    the first of them strided (docs/design.md, "Where the time goes"); keys and values share the index of their rows."""
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


def score_scale(d_head: int) -> float:
    """``1/√d_head``, the scale of dot-product scores (Vaswani et al. 2017, Eq. 1)."""
    return 1.0 / math.sqrt(d_head)


class HeadProjections(nn.Module):
    """The projections every multi-head attention shares (Vaswani et al. 2017): queries ``h W_q``,
    keys and values ``h W_k``, ``h W_v`` split into ``H`` heads of width ``d_head``, and the output
    projection of the concatenated heads (all without bias, Xavier-uniform as in Transformer-XL).

    ``shared_qk``: the keys are the normalised queries, ``k_j = q_j / ‖q_j‖`` (Reformer's shared-QK,
    Kitaev et al. 2020, Sec. 2), and ``kv_net`` projects the values only.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, shared_qk: bool = False) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.shared_qk = n_heads, d_head, shared_qk
        self.q_net = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.kv_net = nn.Linear(d_model, (1 if shared_qk else 2) * n_heads * d_head, bias=False)
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
        if self.shared_qk:
            return F.normalize(self.queries(h), dim=-1), self._heads(self.kv_net(h))
        k, v = self.kv_net(h).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def merge(self, heads: Tensor) -> Tensor:
        """Per-head outputs ``[B, H, N, d_head]`` → the projected output ``[B, N, D]``."""
        B, _, N, _ = heads.shape
        return self.out_net(heads.transpose(1, 2).reshape(B, N, -1))


class Slots(NamedTuple):
    """Keys that differ per query, scored beside the window's keys in the same softmax: the compressed
    blocks of the Compressive Transformer, the projected keys of Linformer. ``keys`` and ``values``
    ``[B, H, T, J, d_head]``; ``visible`` ``[B, 1 or H, T, J]``; ``distances`` ``[J]``, the distance the
    position scheme scores each slot at (``None``: slots carry no position)."""

    keys: Tensor
    values: Tensor
    visible: Tensor
    distances: Tensor | None = None


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, *, scale: float, position: Position | None = None,
           terms: Tensor | None = None, bias: Tensor | None = None, slots: Slots | None = None,
           dropout: float = 0.0) -> Tensor:
    """The per-head outputs ``[B, H, T, d_head]`` of queries ``q`` over keys ``k`` and values ``v``
    (``[B, H, K, d_head]``, the keys of ``[memory; segment]``), under ``mask`` ``[B, 1 or H, T, K]``::

        A_ij = s · q̃_iᵀ k_j  +  P_ij  +  B_ij          (masked: −∞ where mask_ij is false)
        z_i  = Σ_j softmax_j(A_ij) v_j  +  Σ_j softmax_j(A_ij) a^V_ij

    with ``s = scale`` (``1/√d_head``). The ``position`` scheme (none: content only) supplies, from its
    per-pass ``terms``: the rotation of ``q`` and ``k`` (RoPE), the content query ``q̃`` (``q + u`` in
    Transformer-XL), the score term ``P`` (Transformer-XL's ``rel_shift((q + v)ᵀ W_kR R)``, ALiBi's ``−m·d``,
    Shaw's ``qᵀa^K``) and the value term ``a^V`` (Shaw, absolute), or a normaliser in place of the softmax
    (DA-Transformer). ``bias`` ``B`` is a soft key pattern (adaptive span's ``log m_z``, global-local's
    ``log σ``). ``slots`` are per-query keys scored in the same softmax (:class:`Slots`).

    No empty softmax row: a query that may see no key at all (a blockwise head early in an episode, a kNN
    retrieval before any old key) reads its own step, so nothing turns into NaN, and its output is zero.
    """
    T, K = q.shape[2], k.shape[2]
    if position is not None:
        q, k = position.rotate(q, k)
        query, score = position.content_query(q, terms), position.score(q, terms, K)  # q̃; P [B|1, H, T, K]
        bias = score if bias is None else bias if score is None else score + bias
    else:
        query = q
    visible = mask.any(dim=-1, keepdim=True)
    if slots is not None:
        visible = visible | slots.visible.any(dim=-1, keepdim=True)
    empty = ~visible  # [B, 1|H, T, 1]
    mask = mask | (empty & (key_distances(T, K, q.device) == 0))
    fused = slots is None and (position is None or position.fused) and (bias is None or not bias.requires_grad)
    if fused:  # torch's fused kernel computes s·q̃ᵀk + P + B, the mask and the softmax at once
        attn_mask = mask if bias is None else bias.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=attn_mask, dropout_p=dropout, scale=scale)
        return out.masked_fill(empty, 0.0)
    # A bias that needs a gradient sends torch's fused CPU kernel to its unfused path, which scales every
    # key; here the scale goes on the queries, of which an update has one per window (docs/design.md,
    # "Where the time goes").
    scores = (query * scale) @ k.transpose(-2, -1)  # s · q̃ᵀk, [B, H, T, K]
    if bias is not None:
        scores = scores + bias
    if slots is not None:  # s · q̃ᵀk̄_j + P(d_j) for every query's own slots, [B, H, T, J]
        slot_scores = torch.einsum("bhtd,bhtjd->bhtj", query * scale, slots.keys)
        slot_position = None if position is None else position.distance_score(q, terms, slots.distances)
        if slot_position is not None:
            slot_scores = slot_scores + slot_position
        scores = torch.cat([slot_scores.masked_fill(~slots.visible, float("-inf")), scores], dim=-1)
        mask = torch.cat([slots.visible.expand(*mask.shape[:-1], -1), mask], dim=-1)
    normalised = None if position is None else position.weights(scores, mask)
    if normalised is None:
        normalised = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    weights = F.dropout(normalised, dropout, dropout > 0)
    if slots is not None:  # the slots' share, then the window's weights alone
        J = slots.keys.shape[3]
        slot_out, weights = torch.einsum("bhtj,bhtjd->bhtd", weights[..., :J], slots.values), weights[..., J:]
    out = weights @ v if slots is None else slot_out + weights @ v
    value_term = None if position is None else position.values(weights, terms)  # Σ_j α_ij a^V_ij
    if value_term is not None:
        out = out + value_term
    return out.masked_fill(empty, 0.0)
