"""The numpy-batched core shared by every engram task, and its single-copy gymnasium view.

A *core* (`BatchedTask`) holds the state of `n_copies` independent copies of one task in
arrays whose first axis is the copy. It steps all copies with a handful of array operations
and owns everything the tasks have in common: per-copy random streams, the step counter,
termination at the task's fixed horizon, the optional time limit (truncation) and the
success flag. A task subclass only says how an episode begins, how one action changes the
state and what the agent observes.

Two fronts sit on a core:

* `SingleCopyEnv` (here): a plain `gymnasium.Env` over a core with one copy, so that
  gymnasium's and SB3's env checkers run on every task;
* `envs.vec_env.BatchedVecEnv`: an SB3 `VecEnv` over a core with n copies. It lives in
  its own module because importing SB3 imports torch, and this module must not.

Determinism contract: copy i draws its randomness only from its own stream, and every
operation on copy i reads only copy i's state, so a core with n copies and n one-copy cores
seeded with the same per-copy seeds produce bitwise-identical trajectories.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.rules import ConfigError, Range, shown

COUNT = Range(1, integer=True)
"""the rule of a task's counts (lengths, bits, copies)"""
TIME_LIMIT = Range(1, integer=True, optional=True)
"""the rule of `max_episode_steps` (None: no time limit)"""

Index = np.ndarray | slice
"""Which copies an operation applies to: an integer index array, or ``slice(None)`` for all."""

ALL: slice = slice(None)

# SplitMix64 constants (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", 2014).
_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijective avalanche of 64-bit words (uint64 arrays wrap silently)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


def check_seed(seed: Any, key: str = "seed") -> None:
    """`ConfigError` naming `key` unless `seed` is an integer >= 0 or `None` (fresh entropy)."""
    if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0):
        raise ConfigError(f"{key}={shown(seed)}: expected an integer >= 0 (or None for fresh entropy)")


def check_core(n_copies: int, max_episode_steps: int | None) -> None:
    """`ConfigError` naming `n_copies` or `max_episode_steps` where a core (numpy or torch) cannot take it."""
    COUNT.check("n_copies", n_copies)
    TIME_LIMIT.check("max_episode_steps", max_episode_steps)


def copy_seeds(seed: int | None, n_copies: int) -> list[int]:
    """Copy i's seed: the first word of `SeedSequence(seed, spawn_key=(i,))` (independent of `n_copies`,
    and no stream shared by runs of nearby seeds, unlike `seed + i`); `seed=None` draws fresh entropy."""
    check_seed(seed)
    Range(0, integer=True).check("n_copies", n_copies)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy)
    return [int(np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(1, np.uint64)[0]) for i in range(n_copies)]


class CopyStreams:
    """One SplitMix64 random stream per copy, advanced with array operations.

    A draw for a set of copies advances only those copies' states, so what copy i draws never
    depends on the other copies or on how many there are. An int seed is expanded through
    `numpy.random.SeedSequence`; `None` draws fresh entropy.
    """

    def __init__(self, n_copies: int) -> None:
        self.state = np.zeros(n_copies, dtype=np.uint64)
        self.seed(np.arange(n_copies), [None] * n_copies)

    def seed(self, idx: np.ndarray, seeds: Sequence[int | None]) -> None:
        """Restart the streams of copies `idx` from `seeds` (one per copy)."""
        for i, seed in zip(idx, seeds, strict=True):
            self.state[i] = np.random.SeedSequence(seed).generate_state(1, np.uint64)[0]

    def _words(self, idx: Index, size: int | None) -> np.ndarray:
        start = self.state[idx]
        if size is None:
            new = start + _GOLDEN_GAMMA
            self.state[idx] = new
            return _mix64(new)
        states = start[:, None] + _GOLDEN_GAMMA * np.arange(1, size + 1, dtype=np.uint64)
        self.state[idx] = states[:, -1]
        return _mix64(states)

    def integers(self, idx: Index, high: int, size: int | None = None) -> np.ndarray:
        """Uniform ints in `[0, high)` for copies `idx`, `(k,)` or `(k, size)`: Lemire's multiply-shift of the
        top 32 bits (bias below `high / 2**32`)."""
        if not 1 <= high < 2**32:
            raise ValueError(f"high must be in [1, 2**32), got {high}")
        words = self._words(idx, size)
        return (((words >> np.uint64(32)) * np.uint64(high)) >> np.uint64(32)).astype(np.int64)


def discrete_actions(actions: Any, n: int, count: int) -> np.ndarray:
    """`count` actions of a `Discrete(n)` space, one per copy, as int64: whole numbers in `[0, n)` (of an integer or
    float dtype, as gymnasium's `contains` takes them); a `ValueError` saying what they are otherwise."""
    given = np.asarray(actions)
    numeric = given.dtype.kind in "biu" or (given.dtype.kind == "f" and bool(np.all(np.mod(given, 1) == 0)))
    if given.size != count or not numeric or given.min() < 0 or given.max() >= n:
        raise ValueError(f"actions must be {count} whole number(s) in [0, {n}), one per copy, got "
                         f"{shown(actions)}")
    return given.astype(np.int64).reshape(count)


class BatchedTask(ABC):
    """A memory task whose n copies live in numpy arrays (the *core*).

    Every engram task has a fixed horizon: an episode terminates after exactly
    `episode_length` actions. `max_episode_steps` (optional) adds a time limit that
    truncates earlier, as gymnasium's `TimeLimit` would. `elapsed[i]` counts the actions
    taken in copy i's current episode.

    Subclasses define the spaces, the documented constants (`episode_length`,
    `memory_distance`, `optimal_return`, `memoryless_return`), `observe`,
    `render_text` and the hooks `_begin`, `_transition` and `_success`; and a static
    `check_arguments`, which refuses their own arguments with `ConfigError` (the torch twins call it too).
    """

    observation_space: spaces.Box
    action_space: spaces.Discrete

    def __init__(self, n_copies: int, max_episode_steps: int | None = None) -> None:
        check_core(n_copies, max_episode_steps)
        self.n_copies = n_copies
        self.max_episode_steps = max_episode_steps
        self.rng = CopyStreams(n_copies)
        self.elapsed = np.zeros(n_copies, dtype=np.int64)

    # ---- documented constants -------------------------------------------------------------
    @property
    @abstractmethod
    def episode_length(self) -> int:
        """Actions per episode (the fixed horizon, as a function of the horizon parameter)."""

    @property
    @abstractmethod
    def memory_distance(self) -> int:
        """Steps between the observation that must be remembered and the action that needs it."""

    @property
    @abstractmethod
    def optimal_return(self) -> float:
        """Expected return of an optimal policy with memory."""

    @property
    @abstractmethod
    def memoryless_return(self) -> float:
        """Expected return of the best policy that sees only the current observation."""

    # ---- task hooks ---------------------------------------------------------------------
    @abstractmethod
    def _begin(self, idx: np.ndarray) -> None:
        """Sample the hidden state of a new episode for copies `idx`."""

    @abstractmethod
    def observe(self, idx: Index = ALL) -> np.ndarray:
        """Current observations of copies `idx` (all by default): a fresh float32 array `(k, obs_dim)`."""

    @abstractmethod
    def _transition(self, actions: np.ndarray, final: np.ndarray) -> np.ndarray:
        """Apply one action per copy (`elapsed` already counts it); return the rewards.

        `final[i]` is True when this action ends copy i's episode (fixed horizon).
        """

    @abstractmethod
    def _success(self) -> np.ndarray:
        """Per-copy bool: did the episode that has just terminated succeed?"""

    @abstractmethod
    def render_text(self, i: int) -> str:
        """A text picture of copy i, hidden state included."""

    # ---- shared machinery ---------------------------------------------------------------
    def seed(self, idx: np.ndarray, seeds: Sequence[int | None]) -> None:
        """Restart the random streams of copies `idx`; takes effect from their next reset."""
        self.rng.seed(idx, seeds)

    def reset(self, idx: np.ndarray) -> None:
        """Start new episodes in copies `idx`."""
        self.elapsed[idx] = 0
        self._begin(idx)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Apply one action per copy; return `(reward, terminated, truncated, success)`.

        `reward` is float32, the rest bool; `success` is True only where an episode
        terminated successfully (a truncated episode never counts as a success).
        """
        actions = discrete_actions(actions, self.action_space.n, self.n_copies)
        self.elapsed += 1
        terminated = self.elapsed >= self.episode_length
        reward = self._transition(actions, terminated).astype(np.float32, copy=False)
        if self.max_episode_steps is None:
            truncated = np.zeros(self.n_copies, dtype=bool)
        else:
            truncated = ~terminated & (self.elapsed >= self.max_episode_steps)
        return reward, terminated, truncated, terminated & self._success()

    def render_rgb(self, i: int, cell: int = 16) -> np.ndarray:
        """Copy i's observation as a strip of grey cells, black at its low bound and white at its high."""
        low, high = self.observation_space.low, self.observation_space.high
        level = (self.observe(np.array([i]))[0] - low) / (high - low)
        strip = np.repeat(np.round(255 * level).astype(np.uint8), cell)
        return np.tile(strip[None, :, None], (cell, 1, 3))

    @classmethod
    def as_env(cls, render_mode: str | None = None, **task_kwargs: Any) -> SingleCopyEnv:
        """The single-copy gymnasium view of this task (the `engram/<id>` gymnasium entry point)."""
        return SingleCopyEnv(cls(n_copies=1, **task_kwargs), render_mode=render_mode)


RENDER_MODES: tuple[str, ...] = ("ansi", "rgb_array")


class SingleCopyEnv(gym.Env[np.ndarray, np.int64]):
    """A gymnasium `Env` over a one-copy `BatchedTask`.

    It runs the same code as the batched env, so the two give identical trajectories for the
    same per-copy seed and actions. `reset(seed=s)` restarts the copy's stream from `s`
    (and, per the gymnasium contract, also seeds `self.np_random`, which the task itself
    does not use). `info["is_success"]` is set on the step that ends an episode.
    Render modes: `"ansi"` (text) and `"rgb_array"`.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": list(RENDER_MODES), "render_fps": 4}

    def __init__(self, task: BatchedTask, render_mode: str | None = None) -> None:
        if task.n_copies != 1:
            raise ValueError(f"SingleCopyEnv needs a task with one copy, got {task.n_copies}")
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES} or None, got {render_mode!r}")
        self.task = task
        self.render_mode = render_mode
        self.observation_space = task.observation_space
        self.action_space = task.action_space
        self._copy = np.zeros(1, dtype=np.int64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.task.seed(self._copy, [seed])
        self.task.reset(self._copy)
        return self.task.observe()[0], {}

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, terminated, truncated, success = self.task.step(np.asarray(action))
        info: dict[str, Any] = {}
        if terminated[0] or truncated[0]:
            info["is_success"] = bool(success[0])
        return self.task.observe()[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return self.task.render_text(0)
        if self.render_mode == "rgb_array":
            return self.task.render_rgb(0)
        return None
