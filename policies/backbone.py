"""The memory contract every backbone implements (docs/design.md, "The memory contract")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import torch
from torch import Tensor, nn

from envs.rules import Range
from policies.window import (
    SharedWindows,
    State,
    Window,
    advance_window,
    as_bool,
    as_windows,
    empty_window,
    reset_window,
)

Aux = dict[str, Tensor]


def autocasting(device: torch.device) -> bool:
    """Whether `torch.autocast` is on for `device`'s type (`False` for a type autocast does not know, e.g. meta)."""
    try:
        return torch.is_autocast_enabled(device.type)
    except RuntimeError:
        return False


class Sequence(NamedTuple):
    """What `forward_sequence` returns: outputs `[T, B, output_dim]`, the state after the segment (`None` when
    not asked for) and `aux`."""

    output: Tensor
    state: Window | None
    aux: Aux


class MemoryBackbone(nn.Module, ABC):
    """A recurrent feature extractor with episode memory.

    - `initial_state(n_envs)`: the state of `n_envs` new episodes;
    - `step(x[B, D], state, episode_start[B]) -> (y[B, output_dim], state)`: one time step of a
      batch of envs (rollouts, evaluation, `predict`); `episode_start[i]` clears env `i`'s
      memory before the step is processed;
    - `forward_sequence(x[T, B, D], state, episode_starts[T, B]) -> Sequence(y[T, B, output_dim], state, aux)`:
      a stored segment at once (training); `aux` maps names to per-position values `[T, B]`
      (auxiliary losses and statistics). `aux_loss_coefs` names the entries that are losses
      and their default coefficients; learners add them to their loss and log every entry;

    The state is a `policies.window.Window` of the last `memory_length` per-step records
    (`[B, M, *record_shape]`) with its validity mask, so learners can store, index and
    concatenate it per env without knowing the backbone. `step` is for acting (call it
    without gradient); `forward_sequence` is the differentiable path and gives the same
    outputs (step equals sequence).
    """

    output_dim: int
    memory_length: int
    record_shape: tuple[int, ...]
    aux_loss_coefs: dict[str, float] = {}
    input_dim: int | None = None
    """the width `D` of the inputs (set by `policies.registry.make_backbone`; `None`: not checked)"""

    def check_inputs(self, x: Tensor, state: object, episode_starts: Tensor, axes: int) -> None:
        """`ValueError` naming what `step` (`axes=2`: `x[B, D]`, `episode_start[B]`) or `forward_sequence` (`axes=3`:
        `x[T, B, D]`, `episode_starts[T, B]`) cannot take: `x` no float tensor of at least one step and env of width
        `input_dim` in the parameters' dtype (any float under autocast), episode starts no tensor of one flag per step
        and env, or a state that is no window of this backbone for these envs (`check_state`)."""
        if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() != axes or not x.numel():
            given = (f"a {x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor)
                     else type(x).__name__)
            wanted = "[B, D] (one step of B envs)" if axes == 2 else "[T, B, D] (T steps of B envs)"
            raise ValueError(f"x is {given}; expected a float tensor {wanted}, not empty")
        if self.input_dim is not None and x.shape[-1] != self.input_dim:
            raise ValueError(f"x has width {x.shape[-1]} (shape {tuple(x.shape)}); this backbone takes inputs of "
                             f"width {self.input_dim}")
        module, name = self.__dict__.get("_like_place") or self._find_like()
        dtype = module._parameters[name].dtype
        if x.dtype != dtype and not autocasting(x.device):
            raise ValueError(f"x is a {x.dtype} tensor; this backbone's parameters are {dtype}: expected x of dtype "
                             f"{dtype} (cast x, or the backbone with .to)")
        if not isinstance(episode_starts, Tensor) or episode_starts.shape != x.shape[:-1]:
            given = (f"of shape {tuple(episode_starts.shape)}" if isinstance(episode_starts, Tensor)
                     else f"of type {type(episode_starts).__name__}")
            raise ValueError(f"episode starts are {given}; expected a tensor of one flag per step and env, "
                             f"{tuple(x.shape[:-1])}")
        n_envs, memory, valid = x.shape[axes - 2], getattr(state, "memory", None), getattr(state, "valid", None)
        if not (type(state) is Window and isinstance(memory, Tensor) and isinstance(valid, Tensor)  # the common case
                and memory.shape[1:] == (self.memory_length, *self.record_shape) and memory.dtype == dtype
                and valid.shape == (n_envs, self.memory_length)):
            self.check_state(state, n_envs, dtype, segment=axes == 3)  # the message, or a segment's shared windows

    def check_state(self, state: object, n_envs: int, dtype: torch.dtype, segment: bool) -> None:
        """`ValueError` unless `state` is a `Window` (a `segment` also takes `SharedWindows`) of `n_envs` envs whose
        windows have this backbone's `memory_length`, `record_shape` and parameter `dtype`; attributes only."""
        kinds = (Window, SharedWindows) if segment else (Window,)
        if state is None:
            raise ValueError("state is None; expected initial_state(n_envs) or the state the last call returned")
        if not isinstance(state, kinds):
            raise ValueError(f"state is a {type(state).__name__}; expected a {' or '.join(k.__name__ for k in kinds)}: "
                             "initial_state(n_envs) or the state the last call returned (a dict of arrays only at "
                             "predict's boundary: Window.from_dict)")
        shared = isinstance(state, SharedWindows)
        memory = state.records if shared else state.memory
        if not isinstance(memory, Tensor) or not isinstance(state.valid, Tensor):
            raise ValueError(f"state is a {type(state).__name__} of {type(memory).__name__}; expected tensors "
                             "(initial_state(n_envs))")
        record, slots = (memory.shape[1:], state.valid.shape[1:]) if shared else (memory.shape[2:], memory.shape[1:2])
        if record != self.record_shape or slots != (self.memory_length,) or memory.dtype != dtype or (
                not shared and state.valid.shape != memory.shape[:2]):
            raise ValueError(f"state is not this backbone's: its memory is a {memory.dtype} tensor of shape "
                             f"{tuple(memory.shape)}; {type(self).__name__} keeps windows of {self.memory_length} "
                             f"record(s) of shape {self.record_shape} in {dtype}, [B, {self.memory_length}, "
                             f"{', '.join(map(str, self.record_shape))}] (its initial_state(n_envs))")
        if state.valid.shape[0] != n_envs:
            raise ValueError(f"state holds the memory of {state.valid.shape[0]} env(s), x {n_envs}; expected "
                             "initial_state(B) or the state the last step of these envs returned")

    def invalidate_caches(self) -> None:
        """Forget what was computed from the parameters (none here); learners call it after each optimiser step."""

    def _like(self) -> Tensor:
        """A parameter whose device and dtype the state follows: the first one, whose place is found once and read
        afresh each call (`.to` and `load_state_dict(assign=True)` may replace it)."""
        module, name = self.__dict__.get("_like_place") or self._find_like()
        return module._parameters[name]

    def _find_like(self) -> tuple[nn.Module, str]:
        """Where the first parameter sits, kept outside nn.Module's registries (no submodule, no state)."""
        place = self.__dict__["_like_place"] = next(
            (module, name) for module in self.modules() for name, p in module._parameters.items() if p is not None)
        return place

    def initial_state(self, n_envs: int) -> Window:
        """The state of `n_envs` new episodes (`ConfigError` unless `n_envs` is an integer >= 0)."""
        Range(0, integer=True).check("n_envs", n_envs)
        like = self._like()
        return empty_window(n_envs, self.memory_length, self.record_shape, device=like.device, dtype=like.dtype)

    def step(self, x: Tensor, state: Window, episode_start: Tensor) -> tuple[Tensor, Window]:
        """One time step for a batch of envs: the windows of envs whose episode starts are reset,
        the step reads its window (`_read`), and its record is pushed."""
        self.check_inputs(x, state, episode_start, 2)
        valid = reset_window(state.valid, as_bool(episode_start))
        y, record = self._read(x, state, valid)
        return y, advance_window(state.memory, valid, record)

    def _read(self, x: Tensor, state: Window, valid: Tensor) -> tuple[Tensor, Tensor]:
        """Process step `x` `[B, D]` with the window `state.memory`: the output and the step's record."""
        raise NotImplementedError(f"{type(self).__name__} implements neither _read nor step")

    @abstractmethod
    def forward_sequence(self, x: Tensor, state: State, episode_starts: Tensor, final_state: bool = True
                         ) -> Sequence:
        """A time-major segment `[T, B, D]` starting from `state`. `final_state=False` (the learners' update)
        lets a backbone skip the state after the segment (the Transformers then return `None` for it)."""

    def segment_state(self, state: State) -> State:
        """A stored state as `forward_sequence` takes it: windows `[N, M, *record]` rebuilt from records."""
        return as_windows(state)

    def forward(self, x: Tensor, state: State, episode_starts: Tensor) -> Sequence:
        return self.forward_sequence(x, state, episode_starts)

    def extra_repr(self) -> str:
        return f"output_dim={self.output_dim}, memory_length={self.memory_length}"

