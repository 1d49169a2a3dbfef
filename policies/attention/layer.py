"""Multi-head attention over `[memory; segment]`: `MultiHeadAttention` is Transformer-XL's relative
attention in one `forward` (its docstring gives the score); the other members of the family plug into it along
two axes and read through `attend`:

- the **position scheme** (`policies.POSITIONS`, `Position`): hooks that rotate queries and keys, add
  a content-query bias, a score term or a value term, or replace the softmax (modules of `policies.positions`);
- the **key pattern** or **memory kind** (`policies.ATTENTIONS`, `Pattern`): narrows the mask, adds a
  soft bias, or decides which keys exist (modules of `policies.attention`).

Tensor layout: hidden states `[B, T, D]`, per-head tensors `[B, H, N, d_head]`, scores `[B, H, T, K]`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import OneOf
from policies.catalogue import ATTENTIONS, POSITIONS
from policies.window import key_distances


class SharedRecords(NamedTuple):
    """The keys (or values) of a minibatch's distinct memory records and where they sit in its windows
    (`policies.window.shared_windows`): `table` `[R, H, d_head]` holds them once per record, and
    window `n`'s slot `m` holds `table[slots[n, m]]` (`slots` `[N, M]`)."""

    table: Tensor
    slots: Tensor

    def windows(self) -> Tensor:
        """The windows' keys (or values), `[N, H, M, d_head]`."""
        return self.table[self.slots].transpose(1, 2)


KeysValues = tuple[Tensor | SharedRecords, Tensor | SharedRecords]
"""Keys and values ``[B, H, N, d_head]`` each; a memory's may be :class:`SharedRecords` (an update's minibatch)."""


def join_memory(memory_kv: KeysValues, k_seg: Tensor, v_seg: Tensor) -> tuple[Tensor, Tensor]:
    """The keys and values of `[memory; segment]`, `[B, H, M + T, d_head]` each, from the memory's `[B, H, M,
    d_head]` or its shared records and the segment's `[B, H, T, d_head]`. Shared records are gathered straight
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
    """`1/√d_head`, the scale of dot-product scores (Vaswani et al. 2017, Eq. 1)."""
    return 1.0 / math.sqrt(d_head)


class HeadProjections(nn.Module):
    """The projections every multi-head attention shares (Vaswani et al. 2017): queries `h W_q`,
    keys and values `h W_k`, `h W_v` split into `H` heads of width `d_head`, and the output
    projection of the concatenated heads (all without bias, Xavier-uniform as in Transformer-XL).

    `shared_qk`: the keys are the normalised queries, `k_j = q_j / ‖q_j‖` (Reformer's shared-QK,
    Kitaev et al. 2020, Sec. 2), and `kv_net` projects the values only.
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
        """`[B, N, H*d]` → `[B, H, N, d]`."""
        B, N, _ = x.shape
        return x.view(B, N, self.n_heads, self.d_head).transpose(1, 2)

    def queries(self, h: Tensor) -> Tensor:
        """Queries of hidden states `[B, N, D]`, `[B, H, N, d_head]`."""
        return self._heads(self.q_net(h))

    def keys_values(self, h: Tensor) -> KeysValues:
        """Keys and values of hidden states `[B, N, D]`, each `[B, H, N, d_head]`."""
        if self.shared_qk:
            return F.normalize(self.queries(h), dim=-1), self._heads(self.kv_net(h))
        k, v = self.kv_net(h).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def merge(self, heads: Tensor) -> Tensor:
        """Per-head outputs `[B, H, N, d_head]` → the projected output `[B, N, D]`."""
        B, _, N, _ = heads.shape
        return self.out_net(heads.transpose(1, 2).reshape(B, N, -1))


class Slots(NamedTuple):
    """Keys that differ per query, scored beside the window's keys in the same softmax: the compressed
    blocks of the Compressive Transformer, the projected keys of Linformer. `keys` and `values`
    `[B, H, T, J, d_head]`; `visible` `[B, 1 or H, T, J]`; `distances` `[J]`, the distance the
    position scheme scores each slot at (`None`: slots carry no position)."""

    keys: Tensor
    values: Tensor
    visible: Tensor
    distances: Tensor | None = None


@POSITIONS.register("none", "no position information: content attention only (order shows through the memory's "
                            "content alone)")
class Position(nn.Module):
    """What a position scheme may contribute to `attend`; this base
    contributes nothing (`none`). A scheme overrides the hooks it needs:

    - `terms`: tensors computed from its parameters once per pass (cached during rollouts);
    - `rotate`: queries and keys before scoring (RoPE);
    - `content_query`: the query that multiplies the content keys (`q + u` in Transformer-XL);
    - `score`: an additive score term `[B or 1, H, T, K]`, already scaled;
    - `distance_score`: the same term for keys at given distances (a memory kind's per-query slots);
    - `values`: an additive value term (Shaw, absolute);
    - `weights`: a normaliser in place of the softmax (DA-Transformer).

    `fused`: whether the score is all it adds, so torch's fused softmax kernel can compute the attention.
    `softmax`: whether its weights are a softmax of the scores (not with `weights`).
    `scores_distances`: whether `distance_score` is defined (a compressed slot has a distance).
    `contributes`: whether it adds anything at all.
    """

    fused = True
    softmax = True
    scores_distances = True
    contributes = False
    name: str

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.max_distance = n_heads, d_head, max_distance
        self.scale = score_scale(d_head)

    def terms(self, projections: HeadProjections) -> Tensor | None:
        """What the scheme computes from its parameters (and the attention's `projections`) once per pass."""
        return None

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Queries `[B, H, T, d]` and keys `[B, H, K, d]` as the scores see them."""
        return q, k

    def content_query(self, q: Tensor, terms: Tensor | None) -> Tensor:
        """The query that multiplies the content keys."""
        return q

    def score(self, q: Tensor, terms: Tensor | None, n_keys: int) -> Tensor | None:
        """The additive score term of queries `q` over the `n_keys` keys of `[memory; segment]`."""
        return None

    def distance_score(self, q: Tensor, terms: Tensor | None, distances: Tensor | None) -> Tensor | None:
        """The additive score term `[B or 1, H, T, J]` of keys at `distances` `[J]` from every query."""
        return None

    def values(self, weights: Tensor, terms: Tensor | None) -> Tensor | None:
        """An additive output term `[B, H, T, d]` from the attention `weights` `[B, H, T, K]`."""
        return None

    def weights(self, scores: Tensor, mask: Tensor) -> Tensor | None:
        """Attention weights from the `scores` and `mask` in place of the softmax (`None`: the softmax)."""
        return None


def sinusoid_table(positions: Tensor, dim: int) -> Tensor:
    """Sinusoids of Vaswani et al. (2017): `[sin(p ω_i), cos(p ω_i)]`, `ω_i = 10000^(-2i/d)`.

    Transformer-XL (Dai et al. 2019, Sec. 3.3) uses the same table, evaluated at relative
    distances, as `R`. `positions`: `[N]` (any float or int dtype); returns `[N, dim]`.
    """
    if dim % 2:
        raise ValueError(f"sinusoidal encodings need an even dimension, got {dim}")
    dtype = positions.dtype if positions.is_floating_point() else torch.get_default_dtype()
    inv_freq = torch.exp(torch.arange(0, dim, 2, device=positions.device, dtype=dtype)
                         * (-math.log(10000.0) / dim))
    angles = positions.to(dtype).unsqueeze(-1) * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class SinusoidalPositionalEncoding(nn.Module):
    """Absolute sinusoidal encoding `PE(p)` (Vaswani et al. 2017), added to the inputs at position `p`."""

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoid_table(torch.arange(max_positions), dim), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """`positions`: `[N]` integers below `max_positions` → `[N, dim]`."""
        return self.table[positions]


def rel_shift(scores: Tensor) -> Tensor:
    """The relative shift of Transformer-XL (Dai et al. 2019, App. B): `scores[..., i, k]` (distances
    `K-1, ..., 0`) becomes the term for distance `(K - T) + i - j` at `[..., i, j]`; entries with
    `j > i + K - T` (future keys) are garbage and must be masked by the caller."""
    *lead, T, K = scores.shape
    padded = torch.cat([scores.new_zeros(*lead, T, 1), scores], dim=-1)  # [..., T, K+1]
    return padded.view(*lead, K + 1, T)[..., 1:, :].reshape(*lead, T, K)


@POSITIONS.register("relative", "Transformer-XL relative positions with u, v and the shift (Dai et al. 2019)")
class RelativePosition(Position):
    """Transformer-XL's relative positions (Dai et al. 2019, Sec. 3.3): the sinusoids `R` of distances
    `0..max_distance`, their bias-free projection `W_kR` and the learned biases `u` and `v`
    (`position_bias`), `[H, d_head]` each, N(0, 0.02). `MultiHeadAttention` computes the score with
    them; the hooks below serve the other key patterns through `attend`."""

    contributes = True

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.r_net = nn.Linear(d_model, n_heads * d_head, bias=False)  # W_kR
        nn.init.xavier_uniform_(self.r_net.weight)
        self.u = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)
        self.position_bias = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)  # v

    def terms(self, projections: HeadProjections) -> Tensor:
        """`W_kR R` as `[H, max_distance + 1, d_head]` in descending distance order `max_distance, ..., 0`:
        the order of the keys of a rollout step (`M` memory slots, then the step itself). `R` is evaluated in
        the parameters' dtype (no float32 table in a float64 model); distances beyond `max_distance` never occur
        under the banded mask."""
        weight = self.r_net.weight
        descending = torch.arange(self.max_distance, -1, -1, device=weight.device, dtype=weight.dtype)
        table = sinusoid_table(descending, weight.shape[1])
        return self.r_net(table).view(-1, self.n_heads, self.d_head).transpose(0, 1)

    def content_query(self, q: Tensor, terms: Tensor | None) -> Tensor:
        return q + self.u.unsqueeze(1)  # (a) + (c): (q + u)ᵀk

    def score(self, q: Tensor, terms: Tensor | None, n_keys: int) -> Tensor:
        """(b) + (d): `rel_shift((q + v)ᵀ W_kR R) / √d_head`, `[B, H, T, K]`."""
        if terms is None:
            raise ValueError("relative positions need their terms (W_kR R)")
        max_distance = terms.shape[1] - 1
        if n_keys != max_distance + 1:
            # raw column k holds distance K-1-k, clamped: longer distances are masked anyway
            distance = (n_keys - 1 - torch.arange(n_keys, device=q.device)).clamp(max=max_distance)
            terms = terms[:, max_distance - distance]
        raw = torch.einsum("bhtd,hkd->bhtk", q + self.position_bias.unsqueeze(1), terms)  # [B, H, T, K]
        shifted = raw if q.shape[2] == 1 else rel_shift(raw)  # one query: already aligned
        return shifted * self.scale

    def distance_score(self, q: Tensor, terms: Tensor | None, distances: Tensor | None) -> Tensor | None:
        """(b) + (d) at `distances` `[J]`: `(q + v)ᵀ W_kR R_d / √d_head`, `[B, H, T, J]`."""
        if terms is None or distances is None:
            raise ValueError("relative positions need their terms (W_kR R) and the keys' distances")
        at = terms[:, terms.shape[1] - 1 - distances]  # [H, J, d]
        return torch.einsum("bhtd,hjd->bhtj", q + self.position_bias.unsqueeze(1), at) * self.scale


Kernel = Callable[..., Tensor]
""":func:`attend` with the layer's position scheme, its terms, scale and dropout bound"""


@ATTENTIONS.register("full", "every key of the memory window (Transformer-XL's dense window, Dai et al. 2019)")
class Pattern(nn.Module):
    """Which keys a query sees, and how they exist; this base sees the whole window (`full`). A key pattern
    overrides `mask` (a hard mask from distances), `episode_pattern` (a hard mask from episode
    times, with `uses_episode_time`) or `bias` (a soft one); a memory kind overrides `read`,
    which calls the kernel on the keys it makes. `refuses` names the position schemes it cannot take.

    `default_position`: the position scheme the pattern takes when the backbone names none.
    """

    complexity = "O(n²)"
    """the time its paper claims for a sequence of ``n`` tokens (here every windowed member scores its ``M + T``
    keys densely and masks them: ``benchmarks/attention_scaling.py``)"""
    default_position = "relative"
    uses_episode_time = False
    """whether the pattern restricts keys by the queries' episode time (:meth:`episode_pattern`); the backbone
    then keeps the episode clock in its state and narrows the mask with it"""
    shared_qk = False
    """whether keys are the normalised queries (:class:`HeadProjections`)"""
    aux_loss_coefs: dict[str, float] = {}
    """default coefficients of the losses among :meth:`aux_terms`"""
    name: str

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.max_distance = n_heads, d_head, max_distance
        self.scale = score_scale(d_head)

    @property
    def reach(self) -> int:
        """The farthest key, in steps back, that can change a query's output (the memory length here)."""
        return self.max_distance

    def refuses(self, position: Position) -> str | None:
        """Why `position` cannot combine with this pattern (`None`: it can)."""
        return None

    def episode_pattern(self, clock: Tensor, n_keys: int) -> Tensor:
        """`[B, T, K]` (or `[B, H, T, K]`): keys the queries at episode times `clock` may see."""
        raise NotImplementedError(f"attention {self.name!r} is not laid out in episode time")

    def mask(self, n_queries: int, n_keys: int, like: Tensor) -> Tensor | None:
        """`[T, K]`: which keys of `[memory; segment]` the pattern lets each query see (`None`: all)."""
        return None

    def bias(self, q: Tensor, k: Tensor) -> Tensor | None:
        """A soft pattern: an additive, already scaled term of the `[B, H, T, K]` scores (`None`: none)."""
        return None

    def aux_terms(self) -> dict[str, Tensor]:
        """Scalar losses and statistics of the pattern's own parameters (none here)."""
        return {}

    def read(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kernel: Kernel) -> Tensor:
        """The per-head outputs `[B, H, T, d]` of queries `q` over the window's keys `k` and values `v`
        under the memory `mask` `[B, 1 or H, T, K]`: the kernel with the pattern's mask and bias."""
        narrowed = self.mask(q.shape[2], k.shape[2], q)
        return kernel(q, k, v, mask if narrowed is None else mask & narrowed, bias=self.bias(q, k))


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, *, scale: float, position: Position | None = None,
           terms: Tensor | None = None, bias: Tensor | None = None, slots: Slots | None = None,
           dropout: float = 0.0) -> Tensor:
    """The per-head outputs `[B, H, T, d_head]` of queries `q` over keys `k` and values `v`
    (`[B, H, K, d_head]`, the keys of `[memory; segment]`), under `mask` `[B, 1 or H, T, K]`::

        S = s · q̃ kᵀ + P + B   (−∞ where the mask is false),   z = softmax(S) v + softmax(S) a^V

    with `s = scale` (`1/√d_head`). The `position` scheme (none: content only) supplies, from its
    per-pass `terms`: the rotation of `q` and `k` (RoPE), the content query `q̃` (`q + u` in
    Transformer-XL), the score term `P` (Transformer-XL's `rel_shift((q + v)ᵀ W_kR R)`, ALiBi's `−m·d`,
    Shaw's `qᵀa^K`) and the value term `a^V` (Shaw, absolute), or a normaliser in place of the softmax
    (DA-Transformer). `bias` `B` is a soft key pattern (adaptive span's `log m_z`, global-local's
    `log σ`). `slots` are per-query keys scored in the same softmax (`Slots`).

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
    if slots is None and (position is None or position.fused):  # torch's fused kernel: the score, mask and softmax
        attn_mask = mask if bias is None else bias.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=attn_mask, dropout_p=dropout, scale=scale)
        return out.masked_fill(empty, 0.0)
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


class MultiHeadAttention(HeadProjections):
    """Transformer-XL's relative multi-head attention of a segment `h` over `h̃ = [SG(m); h]` (Dai et al. 2019,
    Sec. 3.3), with queries `q = h W_q`, keys `k = h̃ W_k` and values `v = h̃ W_v`::

        A_ij = s·(q_i + u)ᵀk_j + s·(q_i + v)ᵀW_kR R_{i−j},   z_i = Σ_j softmax_j(A_ij masked) v_j,   out = z W_o

    with `s = 1/√d_head`, `R` the sinusoids of the distances and `u`, `v` learned (`RelativePosition`).
    Another `position` (`policies.POSITIONS`) or key pattern `attention` (`policies.ATTENTIONS`)
    replaces the score by its hooks (`Pattern.read`, `attend`); a pair that cannot combine is refused.
    `max_distance` is the farthest key a query may see (the memory length).
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
        self.position: Position = POSITIONS.build(position, position_options, **sizes)
        self.pattern: Pattern = ATTENTIONS.build(attention, attention_options, **sizes)
        reason = self.pattern.refuses(self.position)
        if reason is not None:
            raise ValueError(f"attention {attention!r} cannot combine with position {position!r}: {reason}")
        self.transformer_xl = type(self.position) is RelativePosition and type(self.pattern) is Pattern
        self.max_distance = max_distance
        self.scale = score_scale(d_head)
        self.dropout = dropout

    @property
    def reach(self) -> int:
        """The farthest key, in steps back, that can change a query's output."""
        return self.pattern.reach

    def episode_mask(self, mask: Tensor, clock: Tensor | None) -> Tensor:
        """The memory `mask` `[B, T, K]` narrowed to the pattern's layout in episode time for queries at times
        `clock` `[B, T]` (`uses_episode_time`); a per-head pattern gives `[B, H, T, K]`."""
        if not self.pattern.uses_episode_time:
            return mask
        if clock is None:
            raise ValueError(f"attention {self.pattern.name!r} is laid out in episode time, but the state has "
                             "no 'clock'; build states with initial_state")
        pattern = self.pattern.episode_pattern(clock, mask.shape[-1])
        return (mask.unsqueeze(1) if pattern.dim() == 4 else mask) & pattern

    @property
    def aux_loss_coefs(self) -> dict[str, float]:
        """Default coefficients of the losses among `aux_terms`."""
        return dict(self.pattern.aux_loss_coefs)

    def aux_terms(self) -> dict[str, Tensor]:
        """Scalar losses and statistics of the pattern's parameters, added to the backbone's `aux` in training."""
        return self.pattern.aux_terms()

    def position_terms(self) -> Tensor | None:
        """What the position scheme computes from its parameters once per pass (`W_kR R` for Transformer-XL)."""
        return self.position.terms(self)

    def segment_qkv(self, h: Tensor, memory_kv: KeysValues) -> tuple[Tensor, Tensor, Tensor]:
        """Queries of the segment `h` and keys and values of `[memory; segment]`, `[B, H, N, d_head]`."""
        return self.queries(h), *join_memory(memory_kv, *self.keys_values(h))

    def forward(self, h: Tensor, memory_kv: KeysValues, mask: Tensor,
                position_terms: Tensor | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Attend from the segment `h` `[B, T, D]` to `[memory; segment]`: `memory_kv` holds the memory's
        keys and values (`[B, H, M, d_head]` each, or shared records), `mask` `[B, T, K]` (or `[B, H, T, K]`)
        is `True` where query `i` may see key `j`, `position_terms` is `position_terms`. Returns the
        output `[B, T, D]` and the keys and values of `[memory; segment]` `[B, H, K, d_head]`."""
        B, T, _ = h.shape
        H, d = self.n_heads, self.d_head
        if self.shared_qk:
            q = self.q_net(h).view(B, T, H, d).transpose(1, 2)  # [B, H, T, d]
            k_seg, v_seg = F.normalize(q, dim=-1), self._heads(self.kv_net(h))
        else:  # W_q and W_kv in one product
            qkv = F.linear(h, torch.cat([self.q_net.weight, self.kv_net.weight]))  # [B, T, 3 H d]
            q, k_seg, v_seg = qkv.view(B, T, 3, H, d).permute(2, 0, 3, 1, 4)  # [B, H, T, d] each
        k, v = join_memory(memory_kv, k_seg, v_seg)  # [B, H, K, d], K = M + T
        mask = mask if mask.dim() == 4 else mask.unsqueeze(1)  # [B, 1 or H, T, K]
        if not self.transformer_xl:
            kernel = partial(attend, scale=self.scale, position=self.position, terms=position_terms,
                             dropout=self.dropout if self.training else 0.0)
            out = self.pattern.read(q, k, v, mask, kernel)  # [B, H, T, d]
            return self.out_net(out.transpose(1, 2).reshape(B, T, H * d)), (k, v)
        K = k.shape[2]
        if position_terms is None:
            raise ValueError("relative positions need their terms (W_kR R)")
        r = position_terms  # W_kR R at distances max_distance, ..., 0: [H, max_distance + 1, d]
        if r.shape[1] != K:  # distances K-1, ..., 0; beyond max_distance clamped (masked anyway)
            r = r[:, (r.shape[1] - K + torch.arange(K, device=h.device)).clamp(min=0)]
        ac = (q + self.position.u.unsqueeze(1)) @ k.transpose(-2, -1)  # (a) + (c): [B, H, T, K]
        bd = torch.einsum("bhtd,hkd->bhtk", q + self.position.position_bias.unsqueeze(1), r)  # (b) + (d)
        if T > 1:
            bd = rel_shift(bd)  # column j: key j, at distance K - T + i - j from query i
        scores = torch.where(mask, (ac + bd) * self.scale, float("-inf"))  # [B, H, T, K]
        weights = scores.softmax(dim=-1)
        if self.dropout and self.training:
            weights = F.dropout(weights, self.dropout)
        z = weights @ v  # [B, H, T, d]
        return self.out_net(z.transpose(1, 2).reshape(B, T, H * d)), (k, v)


AttentionName = Annotated[str, OneOf(lambda: ATTENTIONS)]
PositionName = Annotated[str | None, OneOf(lambda: POSITIONS, optional=True)]
"""a position scheme; ``None``: the attention's own (its ``default_position``)"""


def make_attention(attention: str, d_model: int, n_heads: int, d_head: int, *, max_distance: int,
                   dropout: float = 0.0, options: dict[str, Any] | None = None, position: str | None = None,
                   position_options: dict[str, Any] | None = None) -> MultiHeadAttention:
    """The attention with key pattern (or memory kind) `attention` and position scheme `position`.

    Raises:
        ValueError: an unknown name or option (the message lists the valid ones), or a pair that cannot combine.
    """
    if attention in POSITIONS and attention not in ATTENTIONS:
        raise ValueError(f"attention {attention!r} is a position scheme: set position={attention!r} (and its options "
                         "in position_options) with a key pattern such as attention='full'")
    return MultiHeadAttention(d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout,
                              attention=attention, position=position, attention_options=options,
                              position_options=position_options)
