"""The memory contract every backbone implements (docs/design.md, "The memory contract")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

from torch import Tensor, nn

from envs.rules import Range
from policies.window import State, Window, advance_window, as_bool, as_windows, empty_window, reset_window

Aux = dict[str, Tensor]


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
        `input_dim`, episode starts no tensor of one flag per step and env, or no state."""
        if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() != axes or not x.numel():
            given = (f"a {x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor)
                     else type(x).__name__)
            wanted = "[B, D] (one step of B envs)" if axes == 2 else "[T, B, D] (T steps of B envs)"
            raise ValueError(f"x is {given}; expected a float tensor {wanted}, not empty")
        if self.input_dim is not None and x.shape[-1] != self.input_dim:
            raise ValueError(f"x has width {x.shape[-1]} (shape {tuple(x.shape)}); this backbone takes inputs of "
                             f"width {self.input_dim}")
        if not isinstance(episode_starts, Tensor) or episode_starts.shape != x.shape[:-1]:
            given = (f"of shape {tuple(episode_starts.shape)}" if isinstance(episode_starts, Tensor)
                     else f"of type {type(episode_starts).__name__}")
            raise ValueError(f"episode starts are {given}; expected a tensor of one flag per step and env, "
                             f"{tuple(x.shape[:-1])}")
        if state is None:
            raise ValueError("state is None; expected initial_state(n_envs) or the state the last call returned")
        valid = getattr(state, "valid", None)
        if axes == 2 and isinstance(valid, Tensor) and valid.shape[:1] != x.shape[:1]:
            raise ValueError(f"state holds the memory of {valid.shape[0]} env(s), x {x.shape[0]}; expected "
                             "initial_state(B) or the state the last step of these envs returned")

    def invalidate_caches(self) -> None:
        """Forget what was computed from the parameters (none here); learners call it after each optimiser step."""

    def _like(self) -> Tensor:
        """A parameter whose device and dtype the state follows."""
        return next(self.parameters())

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

