"""Episode memory as a sliding window of per-step records.

Every backbone's state is a `Window`, its tensors with the env axis first:

- `memory`: `[B, M, *record]`, the records of the last `M` steps, oldest first. A
  record is what one time step leaves behind for the future: the per-layer inputs of a
  Transformer-XL (`[L, D]`), the `(h, c)` carry of an LSTM (window of one), the raw
  features of a frame stack.
- `valid`: `[B, M]` bool, which slots belong to the episode of the most recent step.
- `clock` (backbones with episode-time encodings only): `[B]` int, the episode time the next step
  has if it continues the episode (`episode_clock`).
- `cache`: values derived from `memory` with the current parameters (`KeyValueCache`, attention keys
  and values). They only speed up `step`; learners drop them when they store a state (`strip_cache`) and
  backbones rebuild them when missing or stale.

Which slots a step sees follows one rule (`in_window`): valid, same episode, at most
`M` steps back. A step is processed in three moves, shared by every backbone
(`policies.backbone.MemoryBackbone.step`): episode starts invalidate the window
(`reset_window`), the step reads the valid slots, and its record is pushed
(`advance_window`). Training rebuilds the window before any step of a stored rollout
from the window at the rollout start plus the per-step records (`gather_windows`), or hands
each distinct record once with the slots that point at it (`SharedWindows`): no per-step
copies of the window are ever stored.

A state becomes a dict of arrays only at SB3's `predict` boundary (`Window.as_dict`, `Window.from_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor

SHARED_RECORDS_MIN = 6.0
"""the fewest window slots per distinct record at which `shared_windows` hands shared records; with fewer,
projecting every window costs less than gathering the projected records (`benchmarks/results/update_cost.md`)"""


class KeyValueCache(NamedTuple):
    """Attention keys and values of every window slot, per depth `[B, H, M, d_head]`, computed with the
    parameters of `generation` (`WindowTransformer.invalidate_caches` starts a new one)."""

    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]
    generation: int


class Window(NamedTuple):
    """One backbone's episode memory for a batch of envs (the module docstring gives the fields)."""

    memory: Tensor
    valid: Tensor
    clock: Tensor | None = None
    cache: KeyValueCache | None = None

    def rows(self, index: Tensor) -> Window:
        """The state of the envs `index`."""
        cache = None if self.cache is None else KeyValueCache(
            tuple(k[index] for k in self.cache.keys), tuple(v[index] for v in self.cache.values), self.cache.generation)
        return Window(self.memory[index], self.valid[index], None if self.clock is None else self.clock[index],
                      cache)

    def as_dict(self, convert: Callable[[Tensor], object] = lambda t: t) -> dict[str, object]:
        """The state at SB3's `predict` boundary: `memory`, `valid`, `clock` when kept, and the cache as
        `cache_keys_<n>`, `cache_values_<n>` and `cache_generation` `[B]`, each passed through `convert`."""
        entries = {"memory": self.memory, "valid": self.valid}
        if self.clock is not None:
            entries["clock"] = self.clock
        if self.cache is not None:
            for n, (k, v) in enumerate(zip(self.cache.keys, self.cache.values, strict=True)):
                entries[f"cache_keys_{n}"], entries[f"cache_values_{n}"] = k, v
            entries["cache_generation"] = self.valid.new_full(self.valid.shape[:1], self.cache.generation,
                                                             dtype=torch.long)
        return {name: convert(value) for name, value in entries.items()}

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any], lift: Callable[[Any], Tensor] = lambda t: t) -> Window:
        """The state `as_dict` gave, each array passed through `lift` (the inverse of its `convert`); a cache whose
        envs hold different generations, or that lacks the keys or the values of a depth, is dropped, to be rebuilt.
        The generations are compared as given, so a NumPy state is checked without a tensor operation."""
        cache = None
        generation = entries.get("cache_generation")
        depths = sum(1 for name in entries if name.startswith("cache_keys_"))
        complete = all(f"cache_keys_{n}" in entries and f"cache_values_{n}" in entries for n in range(depths)) and \
            depths == sum(1 for name in entries if name.startswith("cache_values_"))
        if complete and generation is not None and len(generation) and bool((generation == generation[0]).all()):
            cache = KeyValueCache(tuple(lift(entries[f"cache_keys_{n}"]) for n in range(depths)),
                                  tuple(lift(entries[f"cache_values_{n}"]) for n in range(depths)),
                                  int(generation[0]))
        clock = entries.get("clock")
        return cls(lift(entries["memory"]), lift(entries["valid"]), None if clock is None else lift(clock), cache)


class SharedWindows(NamedTuple):
    """The windows of `N` stored segments with every distinct record once: slot `m` of window `n` holds
    `records[slots[n, m]]` (`records` `[R, *record]`, `slots` and `valid` `[N, M]`); `clock` as `Window`'s."""

    records: Tensor
    slots: Tensor
    valid: Tensor
    clock: Tensor | None = None


State = Window | SharedWindows


def empty_window(n_envs: int, memory_length: int, record_shape: tuple[int, ...], *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Window:
    """A window with no valid slot: the state of `n_envs` fresh episodes."""
    return Window(torch.zeros(n_envs, memory_length, *record_shape, device=device, dtype=dtype),
                  torch.zeros(n_envs, memory_length, dtype=torch.bool, device=device))


def in_window(key_valid: Tensor, key_episode: Tensor, query_episode: Tensor, distance: Tensor,
              memory_length: int) -> Tensor:
    """A query sees a key when it is valid, in the query's episode and `0..memory_length` steps back."""
    return key_valid & (key_episode == query_episode) & (distance >= 0) & (distance <= memory_length)


def as_bool(flags: Tensor) -> Tensor:
    """Episode-start flags of any dtype as bool."""
    return flags if flags.dtype == torch.bool else flags != 0


def reset_window(valid: Tensor, episode_start: Tensor) -> Tensor:
    """Invalidate every slot of the envs whose episode starts now. `episode_start`: `[B]`."""
    return valid & ~episode_start.bool().view(-1, 1)


def advance_window(memory: Tensor, valid: Tensor, record: Tensor) -> Window:
    """The window after a step: the oldest slot of `memory` `[B, M, *record]` dropped and the step's `record`
    `[B, *record]` appended as a valid slot; `valid` `[B, M]` is the window the step read (already reset at
    episode starts)."""
    if memory.shape[1] == 0:
        return Window(memory, valid)
    return Window(torch.cat([memory[:, 1:], record.unsqueeze(1).to(memory.dtype)], dim=1),
                  torch.cat([valid[:, 1:], valid.new_ones(valid.shape[0], 1)], dim=1))


def strip_cache(state: Window) -> Window:
    """The state without derived caches: what a learner stores."""
    return state._replace(cache=None)


def episode_ids(episode_starts: Tensor) -> Tensor:
    """Index `[B, T]` of each step's episode, counted from the segment start (0 for the running one)."""
    return episode_starts.long().cumsum(dim=1)


def episode_clock(clock: Tensor, episode_starts: Tensor) -> Tensor:
    """The episode time of every step of a segment: 0 at an episode start, else one more than the step
    before; `clock` `[B]` is the time the segment's first step has if it continues its episode (the
    state's `clock`). `episode_starts`: `[B, T]`; returns `[B, T]` int."""
    steps = torch.arange(episode_starts.shape[1], device=episode_starts.device)
    last_start = torch.where(episode_starts.bool(), steps, -1).cummax(dim=1).values
    return torch.where(last_start >= 0, steps - last_start, clock.view(-1, 1) + steps)


class WindowHistory(NamedTuple):
    """The window at a segment's start followed by every record of the segment.

    `memory`: `[B, M + T, *record]`; `valid`: `[B, M + T]` (the start window's validity,
    then `True`); `episode`: `[B, M + T]` episode counter (0 on the start window, then the
    running count of episode starts). Any window inside the segment is a slice of it.
    """

    memory: Tensor
    valid: Tensor
    episode: Tensor


def window_history(memory: Tensor, valid: Tensor, records: Tensor, episode_starts: Tensor) -> WindowHistory:
    """Concatenate the start window `[B, M, *record]` and the records `[B, T, *record]`."""
    B, T = episode_starts.shape
    episode = episode_ids(episode_starts)
    return WindowHistory(memory=torch.cat([memory, records.to(memory.dtype)], dim=1),
                         valid=torch.cat([valid, valid.new_ones(B, T)], dim=1),
                         episode=torch.cat([episode.new_zeros(B, valid.shape[1]), episode], dim=1))


def window_slots(history: WindowHistory, env: Tensor, t: Tensor, memory_length: int) -> tuple[Tensor, Tensor]:
    """Where the window entering step `t[n]` of env `env[n]` lies in the history.

    Returns `(slots, valid)`, both `[N, M]`: `slots` indexes the history's records flattened
    over `(env, time)`, `valid` is the state *before* that step's episode start is applied,
    exactly what `step` received. A slot is valid when its record was valid and no episode started
    after it, up to and including step `t - 1`. `t` ranges over `0..T` (`T` gives the state
    after the segment).
    """
    times = t.unsqueeze(1) + torch.arange(memory_length, device=t.device)  # [N, M] history indices
    rows = env.unsqueeze(1)
    last = history.episode[env, (memory_length + t - 1).clamp(min=0)]  # episode of step t-1
    last = torch.where(t > 0, last, torch.zeros_like(last))
    distance = (memory_length + t).unsqueeze(1) - times  # from step t to each slot: M, ..., 1
    valid = in_window(history.valid[rows, times], history.episode[rows, times], last.unsqueeze(1), distance,
                      memory_length)
    return rows * history.valid.shape[1] + times, valid


def gather_windows(history: WindowHistory, env: Tensor, t: Tensor, memory_length: int) -> tuple[Tensor, Tensor]:
    """The window entering step `t[n]` of env `env[n]`, rebuilt by index (`window_slots`):
    `(memory, valid)` of shapes `[N, M, *record]` and `[N, M]`."""
    slots, valid = window_slots(history, env, t, memory_length)
    return history.memory.flatten(0, 1)[slots], valid


def shared_windows(history: WindowHistory, env: Tensor, t: Tensor, memory_length: int,
                   clock: Tensor | None = None) -> State:
    """The windows of `gather_windows` as `SharedWindows`, every distinct record once; the plain windows
    (`Window`) when fewer than `SHARED_RECORDS_MIN` slots share each distinct record."""
    slots, valid = window_slots(history, env, t, memory_length)
    records = history.memory.flatten(0, 1)
    distinct, inverse = torch.unique(slots, return_inverse=True)
    if slots.numel() < SHARED_RECORDS_MIN * distinct.numel():
        return Window(records[slots], valid, clock)
    return SharedWindows(records[distinct], inverse, valid, clock)


def windows(state: State) -> Tensor:
    """The windows `[N, M, *record]` of a state, rebuilt from shared records when it holds them."""
    return state.memory if isinstance(state, Window) else state.records[state.slots]


def as_windows(state: State) -> Window:
    """A stored state as plain windows, rebuilt from shared records when it holds them."""
    return state if isinstance(state, Window) else Window(windows(state), state.valid, state.clock)


def window_before(memory: Tensor, valid: Tensor, records: Tensor, episode_starts: Tensor,
                  t: Tensor) -> tuple[Tensor, Tensor]:
    """The windows entering steps `t` `[N]` of a segment, for every env: `[B, N, M, *record]`
    and `[B, N, M]`. `records`: `[B, T, *record]`; `episode_starts`: `[B, T]`."""
    B, M = valid.shape
    N = t.shape[0]
    history = window_history(memory, valid, records, episode_starts)
    env = torch.arange(B, device=t.device).repeat_interleave(N)
    windows, window_valid = gather_windows(history, env, t.repeat(B), M)
    return windows.view(B, N, *windows.shape[1:]), window_valid.view(B, N, M)


def key_distances(n_queries: int, n_keys: int, device: torch.device) -> Tensor:
    """`[T, K]` distances from query `i` of the segment to key `j` of `[memory; segment]`:
    `(K - T) + i - j` (negative for keys in the future, which the mask hides)."""
    queries = torch.arange(n_queries, device=device).view(-1, 1) + (n_keys - n_queries)
    return queries - torch.arange(n_keys, device=device).view(1, -1)


def key_times(clock: Tensor, n_keys: int) -> Tensor:
    """`[B, T, K]` episode time `t − d` of each key of `[memory; segment]`, `d` steps before its query."""
    return clock.unsqueeze(-1) - key_distances(clock.shape[1], n_keys, clock.device)


def root_length(max_distance: int) -> int:
    """`⌈√M⌉` (at least 1) for a window of `M = max_distance` steps: the Sparse Transformer's `l ≈ √n`."""
    return max(1, math.ceil(math.sqrt(max_distance)))


def attention_mask(valid: Tensor, episode_starts: Tensor, memory_length: int) -> Tensor:
    """Which keys of `[memory; segment]` each query may attend to: `[B, T, M_state + T]` bool.

    Query `i` sees the last `memory_length` steps of its own episode, plus itself (so no row is
    fully masked). `valid`: `[B, M_state]` memory validity; `episode_starts`: `[B, T]`.
    """
    B, M_state = valid.shape
    T = episode_starts.shape[1]
    device = valid.device
    episode = episode_ids(episode_starts)  # [B, T]
    query_time = torch.arange(T, device=device) + M_state  # absolute index of each query
    key_time = torch.arange(M_state + T, device=device)
    distance = query_time.view(T, 1) - key_time.view(1, -1)  # [T, M_state+T]
    key_episode = torch.cat([episode.new_zeros(B, M_state), episode], dim=1)  # [B, M_state+T]
    key_valid = torch.cat([valid, valid.new_ones(B, T)], dim=1)
    return in_window(key_valid.unsqueeze(1), key_episode.unsqueeze(1), episode.unsqueeze(2), distance.unsqueeze(0),
                     memory_length)
