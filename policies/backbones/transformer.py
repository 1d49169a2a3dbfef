"""What Transformer-XL-style backbones share: the memory of per-depth inputs, the banded
causal mask, and the key/value caches that make a rollout step cost O(M).

A subclass defines the depth computation (:meth:`WindowTransformer._depth`): a stack of
distinct blocks (TrXL, TrXL-I, GTrXL) or one shared block applied with ACT halting
(Universal Transformer). Depth ``n`` attends to memory slot ``n``: the inputs that depth
``n`` received at each of the last ``M`` steps of the episode (Dai et al. 2019, Sec. 3.2:
each layer caches its own input).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from policies.attention.layer import KeysValues, SharedRecords
from policies.backbone import Aux, MemoryBackbone, as_bool
from policies.backbones.blocks import TransformerXLBlock
from policies.backbones.step_cache import StepCache
from policies.positions.encodings import ABSOLUTE_ENCODINGS
from policies.window import State, attention_mask, episode_clock, window_before, windows


class WindowTransformer(MemoryBackbone):
    """Base of the Transformer memories: input projection, memory, masks and caches.

    The state holds ``memory`` ``[B, M, n_depth, d_model]`` (the input of every depth at each
    of the last ``M`` steps) and ``valid`` ``[B, M]``; ``step`` adds ``cache_keys_<n>`` and
    ``cache_values_<n>`` ``[B, H, M, d_head]`` per depth ``n``, computed once from ``memory`` and
    then rolled with it, plus ``cache_stamp`` ``[B]``, a fingerprint of the parameters the
    caches were computed with; any update of those parameters invalidates them. With
    ``episode_time`` or an attention laid out in episode time (``fixed``), the state also holds
    ``clock`` ``[B]`` (:func:`policies.window.episode_clock`).
    """

    def __init__(self, input_dim: int, *, d_model: int, n_heads: int, d_head: int | None,
                 memory_length: int, n_depth: int, episode_time: str = "none", max_episode_time: int = 1024) -> None:
        super().__init__()
        if memory_length < 1:
            raise ValueError(f"memory_length must be >= 1, got {memory_length}")
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}; set d_head")
            d_head = d_model // n_heads
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.memory_length = memory_length
        self.output_dim = d_model
        self.record_shape = (n_depth, d_model)
        self.embed = nn.Linear(input_dim, d_model)
        if episode_time != "none" and episode_time not in ABSOLUTE_ENCODINGS:
            raise ValueError(f"unknown episode_time {episode_time!r}; valid: none, {', '.join(ABSOLUTE_ENCODINGS)}")
        if max_episode_time < 1:
            raise ValueError(f"max_episode_time must be >= 1, got {max_episode_time}")
        self.max_episode_time = max_episode_time
        self.time_encoding = (None if episode_time == "none"
                              else ABSOLUTE_ENCODINGS[episode_time](d_model, max_episode_time))
        self.step_cache = StepCache(self._distinct_blocks)

    @property
    def keeps_clock(self) -> bool:
        """Whether the state carries the episode clock: for an encoding of episode time, or for an
        attention laid out in episode time (``uses_episode_time``, the Sparse Transformer's fixed pattern)."""
        return self.time_encoding is not None or self.memory_blocks[0].attn.uses_episode_time

    def initial_state(self, n_envs: int) -> State:
        state = super().initial_state(n_envs)
        if self.keeps_clock:
            state["clock"] = torch.zeros(n_envs, dtype=torch.long, device=state["valid"].device)
        return state

    def _episode_pattern(self, mask: Tensor, clock: Tensor | None) -> Tensor:
        """``mask`` ``[B, T, K]`` narrowed to the attention's episode-time pattern for queries at times
        ``clock`` ``[B, T]``, when it has one (every depth uses the backbone's one attention scheme); a
        per-head pattern ``[B, H, T, K]`` gives a per-head mask."""
        attention = self.memory_blocks[0].attn
        if not attention.uses_episode_time:
            return mask
        if clock is None:
            raise ValueError(f"attention {attention.pattern.name!r} is laid out in episode time, but the state has "
                             "no 'clock'; build states with initial_state")
        pattern = attention.episode_pattern(clock, mask.shape[-1])
        return (mask.unsqueeze(1) if pattern.dim() == 4 else mask) & pattern

    def _inputs(self, x: Tensor, clock: Tensor | None) -> Tensor:
        """The first depth's input: ``E x``, plus the encoding of each step's episode time ``clock``
        (the same shape as ``x`` without its last axis) when the backbone has one, Decision Transformer's
        timestep embedding (Chen et al. 2021); times from ``max_episode_time`` on share the last."""
        h = self.embed(x)
        if self.time_encoding is None:
            return h
        if clock is None:  # without it the steps would silently lose their time
            raise ValueError("this backbone encodes episode time (episode_time), but the state has no 'clock'; "
                             "build states with initial_state")
        times = clock.clamp(max=self.max_episode_time - 1)
        return h + self.time_encoding(times.flatten()).view(*times.shape, -1).to(h.dtype)

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
        """The block that reads memory slot ``n``, for every depth ``n``."""

    @abstractmethod
    def _depth(self, h: Tensor, memory_kv: list[KeysValues], mask: Tensor,
               position_terms: list[Tensor | None]) -> tuple[Tensor, Tensor, list[KeysValues], Aux]:
        """Run every depth on the segment ``h`` ``[B, T, D]``.

        Returns the output ``[B, T, D]``, the records ``[B, T, n_depth, D]`` (input of each
        depth), the keys and values of ``[memory; segment]`` per depth, and auxiliary terms per position
        ``[B, T]``.
        """

    # -- positions -------------------------------------------------------------------------
    def _position_terms(self) -> list[Tensor | None]:
        """The position terms of every depth's attention (computed once per distinct block)."""
        by_block: dict[int, Tensor | None] = {}
        for block in self.memory_blocks:
            if id(block) not in by_block:
                by_block[id(block)] = block.attn.position_terms()
        return [by_block[id(block)] for block in self.memory_blocks]

    def _apply(self, fn: Any, recurse: bool = True) -> WindowTransformer:
        self.step_cache.forget()  # .to, .double, ... replace the tensors
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self.step_cache.forget()  # load_state_dict(assign=True) replaces parameters
        super()._load_from_state_dict(*args, **kwargs)

    # -- the two execution paths -----------------------------------------------------------
    shares_records = True

    def forward_sequence(self, x: Tensor, state: State, episode_starts: Tensor) -> tuple[Tensor, State, Aux]:
        y, _, state_after, aux = self.forward_with_depths(x, state, episode_starts)
        return y, state_after, aux

    def forward_outputs(self, x: Tensor, state: State, episode_starts: Tensor) -> tuple[Tensor, Aux]:
        y, _, aux = self._segment(x, state, episode_starts)
        return y, aux

    def forward_with_depths(self, x: Tensor, state: State, episode_starts: Tensor
                            ) -> tuple[Tensor, Tensor, State, Aux]:
        """:meth:`forward_sequence` plus the input of every depth ``[T, B, n_depth, D]`` (with gradient):
        depth ``n + 1``'s input is depth ``n``'s output, which the language model's intermediate-layer
        losses read (Al-Rfou et al. 2019)."""
        y, records, aux = self._segment(x, state, episode_starts)
        return y, records, self._state_after(records, state, episode_starts), aux

    def _segment(self, x: Tensor, state: State, episode_starts: Tensor,
                 depth: Callable[..., tuple[Tensor, Tensor, list[KeysValues], Aux]] | None = None
                 ) -> tuple[Tensor, Tensor, Aux]:
        """The outputs ``[T, B, D]``, records ``[T, B, n_depth, D]`` and ``aux`` of a segment, through
        ``depth`` (:meth:`_depth` unless given). Shared records (:func:`policies.window.shared_windows`)
        are projected once and never expanded into windows."""
        starts = as_bool(episode_starts).transpose(0, 1)  # [B, T]
        mask = attention_mask(state["valid"], starts, self.memory_length)
        memory_kv = self._memory_kv(state["memory"]) if "memory" in state else self._shared_memory_kv(state)
        clock = episode_clock(state["clock"], starts) if "clock" in state else None
        mask = self._episode_pattern(mask, clock)
        y, records, _, aux = (depth or self._depth)(self._inputs(x.transpose(0, 1), clock), memory_kv, mask,
                                                     self._position_terms())
        aux = {name: value.transpose(0, 1) for name, value in aux.items()}  # [T, B] like the output
        blocks = self._distinct_blocks()
        for block in blocks:  # the attentions' own terms, averaged over blocks, at every position
            for name, value in block.attn.aux_terms().items():
                aux[name] = aux.get(name, 0.0) + value.expand(x.shape[0], x.shape[1]) / len(blocks)
        return y.transpose(0, 1), records.transpose(0, 1), aux

    def _state_after(self, records: Tensor, state: State, episode_starts: Tensor) -> State:
        """The window after the segment: the last ``M`` steps of ``[memory; records]`` in the episode."""
        starts = as_bool(episode_starts).transpose(0, 1)
        T = torch.tensor([records.shape[0]], device=records.device)
        new_memory, new_valid = window_before(windows(state), state["valid"], records.detach().transpose(0, 1),
                                              starts, T)
        after = {"memory": new_memory[:, 0], "valid": new_valid[:, 0]}
        if "clock" in state:
            after["clock"] = episode_clock(state["clock"], starts)[:, -1] + 1
        return after

    def _memory_kv(self, memory: Tensor) -> list[KeysValues]:
        """Keys and values of every memory slot, each ``[B, H, M, d_head]``."""
        return [block.memory_kv(memory[:, :, n]) for n, block in enumerate(self.memory_blocks)]

    def _shared_memory_kv(self, state: State) -> list[KeysValues]:
        """Keys and values of shared records (:func:`policies.window.shared_windows`): each distinct
        record is normalised and projected once; the attention gathers them into every window that holds
        it (:func:`policies.attention.layer.join_memory`; the backward pass sums the gradients of its copies)."""
        slots = state["slots"]  # [N, M]
        projected = self._memory_kv(state["records"].unsqueeze(0))  # per depth [1, H, R, d] twice
        return [(SharedRecords(keys[0].transpose(0, 1), slots), SharedRecords(values[0].transpose(0, 1), slots))
                for keys, values in projected]

    def _read(self, x: Tensor, state: State, valid: Tensor) -> tuple[Tensor, Tensor, State]:
        stamp = self.step_cache.stamp()
        memory_kv = self._caches(state, stamp)
        no_start = valid.new_zeros(valid.shape[0], 1)  # the window is already reset
        mask = attention_mask(valid, no_start, self.memory_length)  # [B, 1, M+1]
        # the window is empty only at an episode's first step (M >= 1 keeps the step before): time 0
        clock = torch.where(valid.any(dim=1), state["clock"], 0) if "clock" in state else None
        mask = self._episode_pattern(mask, None if clock is None else clock.view(-1, 1))
        y, records, window_kv, _ = self._depth(self._inputs(x, clock).unsqueeze(1), memory_kv, mask,
                                               self.step_cache.position_terms(stamp, self._position_terms))
        derived = {"cache_stamp": valid.new_full((valid.shape[0],), stamp, dtype=torch.long)}
        if clock is not None:
            derived["clock"] = clock + 1
        for n, (keys, values) in enumerate(window_kv):  # [B, H, M+1, d]: drop the oldest slot
            derived[f"cache_keys_{n}"], derived[f"cache_values_{n}"] = keys[:, :, 1:], values[:, :, 1:]
        return y[:, 0], records[:, 0], derived

    def _caches(self, state: State, stamp: int) -> list[KeysValues]:
        """The state's key/value caches per depth, rebuilt from ``memory`` when missing or stale."""
        cached = state.get("cache_stamp")
        if cached is not None and bool((cached == stamp).all()):
            return [(state[f"cache_keys_{n}"], state[f"cache_values_{n}"]) for n in range(self.record_shape[0])]
        with torch.no_grad():
            return self._memory_kv(state["memory"])
