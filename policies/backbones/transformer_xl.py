"""Transformer-XL memories for RL: TrXL, TrXL-I and GTrXL (Parisotto et al. 2020), in one file from the gates
to the stack. With `policies.attention.layer` (the attention of a layer) and `policies.window` (the
episode window and its mask) it is the whole of a GTrXL forward pass, rollout step and training segment.

- **Gates** (Sec. 3.2): a gate `g(x, y)` merges the residual stream `x` with a submodule output `y`. The
  gate bias `b_g` is a parameter of its own (not the bias of an `nn.Linear`), so SB3's `ortho_init`,
  which zeroes linear biases, cannot reset it. Its defaults follow the paper's gated identity initialisation:
  2 for the GRU gate, 1 for the others; a positive `b_g` pulls each gate towards passing `x` unchanged.
- **Blocks** (Sec. 3): attention over `[memory; segment]` plus a position-wise MLP, in three layouts, with
  `h̃ = [SG(M); E]`:

  - `post-ln` (canonical TrXL): `Y = LN(E + MHA(h̃))`, `E' = LN(Y + f(Y))`;
  - `identity-map` with residual gates (TrXL-I): `Y = E + ReLU(MHA(LN(h̃)))`, `E' = Y + ReLU(f(LN(Y)))`
    — LayerNorm only on submodule inputs, so an un-normalised identity path runs from the first layer's input
    to the last layer's output;
  - `identity-map` with a GTrXL gate in place of each residual: `Y = g_MHA(E, ReLU(MHA(LN(h̃))))`,
    `E' = g_MLP(Y, ReLU(f(LN(Y))))`.

  The position-wise MLP `f` can run on pieces of the time axis (`ff_chunks`, Reformer's chunking).
- **The window transformer** (`WindowTransformer`): what every Transformer-XL-style backbone shares (this
  stack, the Universal Transformer, the reversible one): the memory of per-depth inputs, the banded causal mask,
  and the key/value caches that make a rollout step cost O(M). Depth `n` attends to memory slot `n`: the
  inputs that depth `n` received at each of the last `M` steps of the episode (Dai et al. 2019, Sec. 3.2:
  each layer caches its own input).
- **The stack** (`TransformerXL`): `n_layers` distinct blocks.
"""

from __future__ import annotations

import math
import os
from abc import abstractmethod
from collections.abc import Callable
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from envs.rules import Count, CountOrNone, OneOf, OptionalMapping, Range
from policies.attention.layer import (
    AttentionName,
    HeadProjections,
    KeysValues,
    PositionName,
    SharedRecords,
    make_attention,
)
from policies.backbone import Aux, MemoryBackbone, Sequence
from policies.options import Relation, checked
from policies.positions.encodings import ABSOLUTE_ENCODINGS
from policies.window import (
    KeyValueCache,
    SharedWindows,
    State,
    Window,
    as_bool,
    as_windows,
    attention_mask,
    episode_clock,
    window_before,
    windows,
)


# -- gates ------------------------------------------------------------------------------------------------------
def _linear(d_in: int, d_out: int) -> nn.Linear:
    layer = nn.Linear(d_in, d_out, bias=False)
    nn.init.xavier_uniform_(layer.weight)
    return layer


class Residual(nn.Module):
    """Plain residual connection `g(x, y) = x + y` (TrXL, TrXL-I)."""

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return x + y


class _BiasedGate(nn.Module):
    """A gate with the scalar-per-channel bias `b_g`."""

    default_bias = 1.0

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__()
        self.initial_bias = self.default_bias if bias is None else float(bias)
        self.bias = nn.Parameter(torch.full((dim,), self.initial_bias))


class InputGate(_BiasedGate):
    """Input gating, `g = σ(W_g x + b_g) ⊙ x + y`."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return torch.sigmoid(self.w(x) + self.bias) * x + y


class OutputGate(_BiasedGate):
    """Output gating, `g = x + σ(W_g x − b_g) ⊙ y`."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return x + torch.sigmoid(self.w(x) - self.bias) * y


class HighwayGate(_BiasedGate):
    """Highway gating, `g = σ(W_g x + b_g) ⊙ x + (1 − σ(W_g x + b_g)) ⊙ y`."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        carry = torch.sigmoid(self.w(x) + self.bias)
        return carry * x + (1.0 - carry) * y


class SigmoidTanhGate(_BiasedGate):
    """Sigmoid-tanh gating, `g = x + σ(W_g y − b_g) ⊙ tanh(U_g y)`."""

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w = _linear(dim, dim)
        self.u = _linear(dim, dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return x + torch.sigmoid(self.w(y) - self.bias) * torch.tanh(self.u(y))


class GRUGate(_BiasedGate):
    """GRU-type gating, the best variant of GTrXL.

    `r = σ(W_r y + U_r x)`, `z = σ(W_z y + U_z x − b_g)`, `ĥ = tanh(W_g y + U_g (r ⊙ x))`,
    `g = (1 − z) ⊙ x + z ⊙ ĥ`: six bias-free `D×D` matrices (W acts on the submodule output
    `y`, U on the stream `x`) and only `b_g` on `z`. `W_r, W_z, W_g` are fused in one
    matrix and so are `U_r, U_z`.
    """

    default_bias = 2.0

    def __init__(self, dim: int, bias: float | None = None) -> None:
        super().__init__(dim, bias)
        self.w_rzg = nn.Linear(dim, 3 * dim, bias=False)
        self.u_rz = nn.Linear(dim, 2 * dim, bias=False)
        self.u_g = _linear(dim, dim)
        for fused, parts in ((self.w_rzg, 3), (self.u_rz, 2)):
            for chunk in fused.weight.data.chunk(parts, dim=0):
                nn.init.xavier_uniform_(chunk)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        w_r, w_z, w_g = self.w_rzg(y).chunk(3, dim=-1)
        u_r, u_z = self.u_rz(x).chunk(2, dim=-1)
        r = torch.sigmoid(w_r + u_r)
        z = torch.sigmoid(w_z + u_z - self.bias)
        candidate = torch.tanh(w_g + self.u_g(r * x))
        return x + z * (candidate - x)


GATES: dict[str, type[nn.Module]] = {
    "residual": Residual,
    "input": InputGate,
    "output": OutputGate,
    "highway": HighwayGate,
    "sigmoid-tanh": SigmoidTanhGate,
    "gru": GRUGate,
}


Gate = Annotated[str, OneOf(lambda: GATES)]
GateBias = Annotated[float | None, Range(optional=True)]
"""``b_g``; ``None``: the gate's default (2 for ``gru``, 1 for the others)"""


def make_gate(name: str, dim: int, bias: float | None = None) -> nn.Module:
    """Build a gate by name; `bias` overrides the default `b_g` (not for `residual`)."""
    if name not in GATES:
        raise ValueError(f"unknown gate {name!r}; valid gates: {', '.join(GATES)}")
    if name == "residual":
        if bias is not None:
            raise ValueError("gate 'residual' has no gate bias; gate_bias applies to the GTrXL gates")
        return Residual()
    return GATES[name](dim, bias)


# -- blocks -----------------------------------------------------------------------------------------------------
LAYOUTS = ("post-ln", "identity-map")
Layout = Annotated[str, OneOf(lambda: LAYOUTS)]
Dropout = Annotated[float, Range(0.0, 1.0, high_open=True)]
EpisodeTime = Annotated[str, OneOf(lambda: ["none", *ABSOLUTE_ENCODINGS])]
"""how the step's time in its episode is encoded and added to the input (``none``: not at all)"""

POST_LN_IS_RESIDUAL = Relation(
    "gate", ("gate", "layout"), lambda o: o["layout"] != "post-ln" or o["gate"] == "residual",
    lambda o: f"residual with {o.show('layout')} (TrXL's LayerNorm follows the merge)")
"""the post-LN layout (TrXL) merges with residual connections, not with a GTrXL gate"""
HEADS_DIVIDE_D_MODEL = Relation(
    "n_heads", ("n_heads", "d_model", "d_head"), lambda o: o["d_head"] is not None or o["d_model"] % o["n_heads"] == 0,
    lambda o: f"a divisor of {o.show('d_model')} (or set {o.name('d_head')})")
"""each head is ``d_model / n_heads`` wide unless ``d_head`` sets its width"""


def _dropout(p: float) -> nn.Module:
    """Dropout with probability `p`; none at all (no op in the step) when `p` is 0."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class PositionwiseFeedForward(nn.Module):
    """`f(x) = W_2 ReLU(W_1 x + b_1) + b_2`; its output has no activation of its own.

    With `chunks = c > 1`, `f` runs on `c` consecutive pieces of the time axis one after the
    other (Reformer, Kitaev et al. 2020, Sec. 3 "Chunking": `Y_2 = [Y_2^(1); …; Y_2^(c)]` with
    `Y_2^(j) = X_2^(j) + f(Y_1^(j))`). `f` acts on each position alone, so outputs and gradients
    are those of one pass, and the `d_inner`-wide activation exists for `⌈T/c⌉` positions at a
    time. That lowers peak memory only if a piece's activation is not kept for backward: whenever
    autograd records, each piece runs under activation checkpointing (`torch.utils.checkpoint`,
    non-reentrant) and is recomputed in backward, at the cost of a second forward of `f`.
    Without gradient (rollouts) pieces are only run one after the other.
    """

    @checked()
    def __init__(self, d_model: int, d_inner: int, dropout: float = 0.0, chunks: Count = 1) -> None:
        super().__init__()
        self.chunks = chunks
        self.net = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), _dropout(dropout),
                                 nn.Linear(d_inner, d_model))

    def forward(self, x: Tensor) -> Tensor:
        """`x`: `[..., T, d_model]`."""
        if self.chunks == 1:
            return self.net(x)
        pieces = x.split(math.ceil(x.shape[-2] / self.chunks), dim=-2)
        if not torch.is_grad_enabled():
            return torch.cat([self.net(piece) for piece in pieces], dim=-2)
        return torch.cat([checkpoint(self.net, piece, use_reentrant=False) for piece in pieces], dim=-2)

    def extra_repr(self) -> str:
        return f"chunks={self.chunks}"


class TransformerXLBlock(nn.Module):
    """One Transformer-XL layer in the `post-ln` or `identity-map` layout (see module doc).

    `gate` names the merge of stream and submodule output (`residual` or a GTrXL gate
    of `GATES`); the post-LN layout only takes `residual`. `attention` is the
    attention module (`policies.attention.layer.make_attention` for the windowed ones); the block
    passes whatever context it needs (memory keys and values, mask, position terms, or a
    recurrent carry) through and returns what the attention returns beside its output.
    `ff_chunks` runs the MLP on that many pieces of the time axis (`PositionwiseFeedForward`).
    """

    @checked(POST_LN_IS_RESIDUAL)
    def __init__(self, attention: HeadProjections, d_model: int, d_inner: int, *, layout: Layout = "identity-map",
                 gate: Gate = "residual", gate_bias: GateBias = None, dropout: Dropout = 0.0,
                 ff_chunks: Count = 1) -> None:
        super().__init__()
        self.identity_map = layout == "identity-map"
        self.attn = attention
        self.ff = PositionwiseFeedForward(d_model, d_inner, dropout, ff_chunks)
        self.attn_norm = nn.LayerNorm(d_model)
        self.ff_norm = nn.LayerNorm(d_model)
        self.attn_gate = make_gate(gate, d_model, gate_bias)
        self.ff_gate = make_gate(gate, d_model, gate_bias)
        self.drop = _dropout(dropout)

    def memory_kv(self, memory: Tensor) -> KeysValues:
        """Keys and values of this layer's memory `[B, M, D]` (normalised first in identity-map)."""
        return self.attn.keys_values(self.attn_norm(memory) if self.identity_map else memory)

    def attention_branch(self, h: Tensor, *context: Any) -> tuple[Tensor, Any]:
        """The identity-map attention submodule `ReLU(MHA(LN(h̃)))` and what the attention returns beside it."""
        y, carried = self.attn(self.attn_norm(h), *context)
        return self.drop(y).relu(), carried

    def feedforward_branch(self, h: Tensor) -> Tensor:
        """The identity-map feed-forward submodule `ReLU(f(LN(h)))`."""
        return self.drop(self.ff(self.ff_norm(h))).relu()

    def forward(self, h: Tensor, *context: Any) -> tuple[Tensor, Any]:
        """`h`: `[B, T, D]` this layer's input for the segment, `context` the attention's other
        arguments; returns the block's output and what the attention returns beside its own (the
        keys and values of `[memory; segment]`, or the carry after the segment)."""
        if self.identity_map:
            y, carried = self.attn(self.attn_norm(h), *context)
            stream = self.attn_gate(h, self.drop(y).relu())
            out = self.ff_gate(stream, self.drop(self.ff(self.ff_norm(stream))).relu())
        else:
            y, carried = self.attn(h, *context)
            stream = self.attn_norm(self.attn_gate(h, self.drop(y)))
            out = self.ff_norm(self.ff_gate(stream, self.drop(self.ff(stream))))
        return out, carried


# -- the window transformer -------------------------------------------------------------------------------------
def _invalidate_after_load(module: WindowTransformer, keys: Any) -> None:
    module.invalidate_caches()


def new_generation() -> int:
    """62 random bits: a cache generation no other backbone holds, in this process or another."""
    return int.from_bytes(os.urandom(8), "little") >> 2


class WindowTransformer(MemoryBackbone):
    """Base of the Transformer memories: input projection, memory, masks and caches. A subclass defines the depth
    computation (`_depth`: a stack of distinct blocks, or one shared block applied with ACT halting) and
    the block that reads each memory slot (`memory_blocks`).

    The state's `memory` is `[B, M, n_depth, d_model]` (the input of every depth at each of the last `M`
    steps), with `clock` `[B]` when the backbone keeps an episode clock. `step` adds a `KeyValueCache`, rolled
    with the window, stamped with the `generation` of the parameters it was computed with (`new_generation`:
    unique to this backbone). The learner calls `invalidate_caches` after each optimiser step (loading a state
    dict does too), which drops the position terms computed once per rollout and makes every state's cache stale.
    """

    @checked(HEADS_DIVIDE_D_MODEL)
    def __init__(self, input_dim: int, *, d_model: Count, n_heads: Count, d_head: CountOrNone,
                 memory_length: Count, n_depth: Count, episode_time: EpisodeTime = "none",
                 max_episode_time: Count = 1024) -> None:
        super().__init__()
        if d_head is None:
            d_head = d_model // n_heads
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.memory_length = memory_length
        self.output_dim = d_model
        self.record_shape = (n_depth, d_model)
        self.embed = nn.Linear(input_dim, d_model)
        self.max_episode_time = max_episode_time
        self.time_encoding = (None if episode_time == "none"
                              else ABSOLUTE_ENCODINGS[episode_time](d_model, max_episode_time))
        self.generation = new_generation()
        self._terms: list[Tensor | None] | None = None
        self._terms_like: tuple[torch.device, torch.dtype] | None = None
        self.register_load_state_dict_post_hook(_invalidate_after_load)

    def invalidate_caches(self) -> None:
        """Forget what was computed from the parameters: the position terms and every state's key/value caches."""
        self.generation = new_generation()
        self._terms = None

    @property
    def keeps_clock(self) -> bool:
        """Whether the state carries the episode clock (time encoding, or `uses_episode_time` attention)."""
        return self.time_encoding is not None or self.memory_blocks[0].attn.pattern.uses_episode_time

    def initial_state(self, n_envs: int) -> Window:
        state = super().initial_state(n_envs)
        if self.keeps_clock:
            return state._replace(clock=torch.zeros(n_envs, dtype=torch.long, device=state.valid.device))
        return state

    def _inputs(self, x: Tensor, clock: Tensor | None) -> Tensor:
        """The first depth's input: `E x`, plus the encoding of each step's episode time `clock`
        (the same shape as `x` without its last axis) when the backbone has one, Decision Transformer's
        timestep embedding (Chen et al. 2021); times from `max_episode_time` on share the last."""
        h = self.embed(x)
        if self.time_encoding is None:
            return h
        if clock is None:  # without it the steps would silently lose their time
            raise ValueError("this backbone encodes episode time (episode_time), but the state has no 'clock'; "
                             "build states with initial_state")
        times = clock.clamp(max=self.max_episode_time - 1)
        encoded = (self.time_encoding(times) if times.dim() == 1  # a step's [B]; a segment's [B, T]
                   else self.time_encoding(times.flatten()).view(*times.shape, -1))
        return h + (encoded if encoded.dtype == h.dtype else encoded.to(h.dtype))

    depth_loss_coefs: dict[str, float] = {}
    """default coefficients of the losses the depth computation reports (ACT's ponder cost)"""

    @property
    def aux_loss_coefs(self) -> dict[str, float]:  # type: ignore[override]
        """The depth computation's losses and those of the attentions (an adaptive span's penalty)."""
        coefs = dict(self.depth_loss_coefs)
        for block in self._distinct_blocks():
            coefs.update(block.attn.aux_loss_coefs)
        return coefs

    def _distinct_blocks(self) -> list[TransformerXLBlock]:
        return list({id(block): block for block in self.memory_blocks}.values())

    @property
    @abstractmethod
    def memory_blocks(self) -> list[TransformerXLBlock]:
        """The block that reads memory slot `n`, for every depth `n`."""

    @abstractmethod
    def _depth(self, h: Tensor, memory_kv: list[KeysValues], mask: Tensor,
               position_terms: list[Tensor | None]) -> tuple[Tensor, Tensor, list[KeysValues], Aux]:
        """Run every depth on the segment `h` `[B, T, D]`.

        Returns the output `[B, T, D]`, the records `[B, T, n_depth, D]` (input of each
        depth), the keys and values of `[memory; segment]` per depth, and auxiliary terms per position
        `[B, T]`.
        """

    def _position_terms(self) -> list[Tensor | None]:
        """The position terms of every depth's attention, computed once per distinct block. Without gradient
        (rollouts, `predict`) they are kept until `invalidate_caches`, as ordinary tensors even under
        `torch.inference_mode`, so a later pass with gradient may read them; with gradient they are computed
        afresh, so the gradient reaches the position parameters."""
        like = self.embed.weight
        if self._terms_like != (like.device, like.dtype):  # moved or cast (.to): every cache is stale
            self.invalidate_caches()
            self._terms_like = (like.device, like.dtype)
        grad = torch.is_grad_enabled()
        if self._terms is not None and not grad:
            return self._terms
        with torch.inference_mode(False), torch.set_grad_enabled(grad):
            by_block = {id(block): block.attn.position_terms() for block in self._distinct_blocks()}
            terms = [by_block[id(block)] for block in self.memory_blocks]
        if not grad:
            self._terms = terms
        return terms

    # -- the two execution paths -----------------------------------------------------------
    shares_records = True
    """whether :meth:`segment_state` keeps shared records (:func:`policies.window.shared_windows`): each distinct
    record is then normalised and projected once (:meth:`_shared_memory_kv`) rather than once per window"""

    def segment_state(self, state: State) -> State:
        """A stored state as `forward_sequence` takes it: shared records stay shared (`shares_records`)."""
        return state if self.shares_records else as_windows(state)

    def forward_sequence(self, x: Tensor, state: State, episode_starts: Tensor, final_state: bool = True
                         ) -> Sequence:
        self.check_inputs(x, state, episode_starts, 3)
        y, records, aux = self._segment(x, state, episode_starts)
        return Sequence(y, self._state_after(records, state, episode_starts) if final_state else None, aux)

    def _segment(self, x: Tensor, state: State, episode_starts: Tensor,
                 depth: Callable[..., tuple[Tensor, Tensor, list[KeysValues], Aux]] | None = None
                 ) -> tuple[Tensor, Tensor, Aux]:
        """The outputs `[T, B, D]`, records `[T, B, n_depth, D]` and `aux` of a segment, through
        `depth` (`_depth` unless given). Shared records (`policies.window.shared_windows`)
        are projected once and never expanded into windows."""
        starts = as_bool(episode_starts).transpose(0, 1)  # [B, T]
        memory_kv = self._shared_memory_kv(state) if isinstance(state, SharedWindows) else self._memory_kv(state.memory)
        clock = None if state.clock is None else episode_clock(state.clock, starts)  # [B, T]
        mask = self.memory_blocks[0].attn.episode_mask(attention_mask(state.valid, starts, self.memory_length),
                                                      clock)  # [B, T, M + T], or per head [B, H, T, M + T]
        y, records, _, aux = (depth or self._depth)(self._inputs(x.transpose(0, 1), clock), memory_kv, mask,
                                                     self._position_terms())
        aux = {name: value.transpose(0, 1) for name, value in aux.items()}  # [T, B] like the output
        blocks = self._distinct_blocks()
        for block in blocks:  # the attentions' own terms, averaged over blocks, at every position
            for name, value in block.attn.aux_terms().items():
                aux[name] = aux.get(name, 0.0) + value.expand(x.shape[0], x.shape[1]) / len(blocks)
        return y.transpose(0, 1), records.transpose(0, 1), aux

    def _state_after(self, records: Tensor, state: State, episode_starts: Tensor) -> Window:
        """The window after the segment: the last `M` steps of `[memory; records]` in the episode."""
        starts = as_bool(episode_starts).transpose(0, 1)
        T = torch.tensor([records.shape[0]], device=records.device)
        new_memory, new_valid = window_before(windows(state), state.valid, records.detach().transpose(0, 1),
                                              starts, T)
        clock = None if state.clock is None else episode_clock(state.clock, starts)[:, -1] + 1
        return Window(new_memory[:, 0], new_valid[:, 0], clock)

    def _memory_kv(self, memory: Tensor) -> list[KeysValues]:
        """Keys and values of every memory slot, each `[B, H, M, d_head]`."""
        return [block.memory_kv(memory[:, :, n]) for n, block in enumerate(self.memory_blocks)]

    def _shared_memory_kv(self, state: SharedWindows) -> list[KeysValues]:
        """Keys and values of shared records (`policies.window.shared_windows`): each distinct
        record is normalised and projected once; the attention gathers them into every window that holds
        it (`policies.attention.layer.join_memory`; the backward pass sums the gradients of its copies)."""
        slots = state.slots  # [N, M]
        projected = self._memory_kv(state.records.unsqueeze(0))  # per depth [1, H, R, d] twice
        return [(SharedRecords(keys[0].transpose(0, 1), slots), SharedRecords(values[0].transpose(0, 1), slots))
                for keys, values in projected]

    def _cache_fits(self, cache: KeyValueCache | None, B: int, M: int) -> bool:
        """Whether `cache` holds what this backbone's current parameters give for a window of `B` envs × `M` slots:
        its generation, and keys and values `[B, H, M, d_head]` of every depth in the parameters' dtype and device."""
        if cache is None or cache.generation != self.generation:
            return False
        like, shape = self.embed.weight, (B, self.n_heads, M, self.d_head)
        parts = (*cache.keys, *cache.values)
        return len(parts) == 2 * len(self.memory_blocks) and all(
            t.shape == shape and t.dtype == like.dtype and t.device == like.device for t in parts)

    def step(self, x: Tensor, state: Window, episode_start: Tensor) -> tuple[Tensor, Window]:
        """One rollout step `x` `[B, D_in]`: the windows of envs whose episode starts are reset, the step
        attends to its window through the state's key/value caches (rebuilt from `memory` when missing or
        stale), and its record (the input of every depth) is pushed."""
        self.check_inputs(x, state, episode_start, 2)
        starts = episode_start if episode_start.dtype == torch.bool else episode_start != 0
        B, M = state.valid.shape
        terms = self._position_terms()
        valid = state.valid & ~starts.view(B, 1)  # [B, M]: the window, reset at episode starts
        keys = F.pad(valid, (0, 1), value=True)  # [B, M + 1]: the keys the step sees, itself last
        clock = state.clock
        if clock is not None:  # 0 at an episode's first step (its window is empty)
            clock = torch.where(valid.any(dim=1), clock, 0)
        if self._cache_fits(state.cache, B, M):
            memory_kv = list(zip(state.cache.keys, state.cache.values, strict=True))
        else:
            with torch.no_grad():
                memory_kv = self._memory_kv(state.memory)  # per depth [B, H, M, d_head] twice
        mask = keys.view(B, 1, 1, M + 1)  # [B, 1, T = 1, K]
        attn = self.memory_blocks[0].attn
        if attn.pattern.uses_episode_time:
            mask = attn.episode_mask(keys.view(B, 1, M + 1), None if clock is None else clock.view(B, 1))
        y, records, window_kv, _ = self._depth(self._inputs(x, clock).unsqueeze(1), memory_kv, mask, terms)
        memory = state.memory
        records = records if records.dtype == memory.dtype else records.to(memory.dtype)  # [B, 1, n_depth, D]
        cache = KeyValueCache(tuple(k[:, :, 1:] for k, _ in window_kv),  # [B, H, M + 1, d]: drop the oldest slot
                              tuple(v[:, :, 1:] for _, v in window_kv), self.generation)
        return y[:, 0], Window(torch.cat([memory[:, 1:], records], dim=1), keys[:, 1:],
                               None if clock is None else clock + 1, cache)


# -- the stack --------------------------------------------------------------------------------------------------
class TransformerXL(WindowTransformer):
    """GTrXL by default: a stack of `n_layers` Transformer-XL blocks over an episode memory of
    `memory_length` steps; other `layout` and `gate` values give TrXL and TrXL-I.

    Layer `l` attends, from each step, to its own input at the last `M` steps of the
    episode (kept without gradient) and to the current step, with relative positions
    (Dai et al. 2019). The three RL variants differ only in the block:

    - `trxl`: `layout="post-ln"`, residual connections (fails to learn in RL per the GTrXL paper);
    - `trxl-i`: `layout="identity-map"`, residual connections;
    - `gtrxl`: `layout="identity-map"` with a gate (`gru` by default, `b_g = 2`).

    Examples:
        >>> backbone = TransformerXL(8, d_model=32, n_layers=2, n_heads=2, memory_length=16)
        >>> state = backbone.initial_state(n_envs=4)
        >>> y, state = backbone.step(torch.randn(4, 8), state, torch.ones(4, dtype=torch.bool))
        >>> y.shape
        torch.Size([4, 32])
    """

    @checked()
    def __init__(self, input_dim: int, *, d_model: Count = 64, n_layers: Count = 1, n_heads: Count = 4,
                 d_head: CountOrNone = None, d_inner: CountOrNone = None, memory_length: Count = 64,
                 layout: Layout = "identity-map", gate: Gate = "gru", gate_bias: GateBias = None,
                 attention: AttentionName = "full", attention_options: OptionalMapping = None,
                 position: PositionName = None, position_options: OptionalMapping = None,
                 dropout: Dropout = 0.0, ff_chunks: Count = 1, episode_time: EpisodeTime = "none",
                 max_episode_time: Count = 1024) -> None:
        super().__init__(input_dim, d_model=d_model, n_heads=n_heads, d_head=d_head,
                         memory_length=memory_length, n_depth=n_layers, episode_time=episode_time,
                         max_episode_time=max_episode_time)
        self.layers = nn.ModuleList(
            TransformerXLBlock(make_attention(attention, d_model, n_heads, self.d_head, max_distance=memory_length,
                                              dropout=dropout, options=attention_options,
                                              position=position, position_options=position_options),
                               d_model, d_inner or 4 * d_model, layout=layout, gate=gate, gate_bias=gate_bias,
                               dropout=dropout, ff_chunks=ff_chunks)
            for _ in range(n_layers))

    @property
    def memory_blocks(self) -> list[TransformerXLBlock]:
        return list(self.layers)

    def _depth(self, h: Tensor, memory_kv: list[KeysValues], mask: Tensor, position_terms: list[Tensor | None]
               ) -> tuple[Tensor, Tensor, list[KeysValues], Aux]:
        records, window_kv = [], []
        for layer, kv, terms in zip(self.layers, memory_kv, position_terms, strict=True):
            records.append(h)
            h, layer_kv = layer(h, kv, mask, terms)
            window_kv.append(layer_kv)
        return h, torch.stack(records, dim=2), window_kv, {}
