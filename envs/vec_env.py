"""SB3 `VecEnv` fronts: the numpy-batched env over a `BatchedTask`, and Dummy/SubprocVecEnv with engram seeding.

This is the only module of `envs` that imports Stable-Baselines3 (which imports torch);
`envs` loads it lazily, from `envs.registry.make_vec_env`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

from envs.batched import RENDER_MODES, BatchedTask, copy_seeds
from envs.conformance import EnvBreakError
from envs.rules import ConfigError, shown


class CopySeeding:
    """`VecEnv.seed` with engram's per-copy seeds: copy i gets `copy_seeds(seed, n)[i]`.

    As in SB3, the seeds are stored and applied at the next `reset()`. Unlike SB3's
    `seed + i`, runs seeded 0, 1, 2, ... share no copy stream.
    """

    num_envs: int
    _seeds: list[int | None]

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        self._seeds = list(copy_seeds(seed, self.num_envs))
        return self._seeds


class SeededDummyVecEnv(CopySeeding, DummyVecEnv):
    """SB3's `DummyVecEnv` seeded like the batched envs: gymnasium envs and entry points, in this process."""


class SeededSubprocVecEnv(CopySeeding, SubprocVecEnv):
    """SB3's `SubprocVecEnv` seeded like the batched envs: one process per copy (`vec_env="subproc"`). A copy whose
    process ends (its env raised: the process prints why) is an `EnvBreakError` here, not a broken pipe."""

    def step_wait(self) -> VecEnvStepReturn:
        with self._copies_alive("a step"):
            return super().step_wait()

    def reset(self) -> Any:
        with self._copies_alive("a reset"):
            return super().reset()

    @contextlib.contextmanager
    def _copies_alive(self, what: str) -> Iterator[None]:
        try:
            yield
        except (EOFError, ConnectionError) as error:
            self.closed = True  # its pipes are broken: `close` has nothing to tell the processes
            problem = f"a copy's process ended in {what} (the copy's error is printed above)"
            raise EnvBreakError(f"vec_env='subproc': {problem}", problem) from error


class BatchedVecEnv(CopySeeding, VecEnv):
    """SB3 `VecEnv` that steps all n copies of a `BatchedTask` with array operations.

    SB3 semantics: a copy whose episode ends is reset in the same step; its info then holds
    `terminal_observation` (the last observation of the finished episode),
    `TimeLimit.truncated` and `is_success`; the infos of the other copies are empty
    dicts. Rewards are float32, dones bool. `seed()` seeds are applied at the next reset.
    `get_attr`/`set_attr` read and write attributes of the core (per-copy arrays are
    split per copy); `env_method(name)` calls the core's `name(i, ...)` for each copy i
    (e.g. `render_text`, `render_rgb`). `render()` draws copy 0 as text (`"ansi"`)
    or an RGB array.
    """

    def __init__(self, task: BatchedTask, render_mode: str | None = None) -> None:
        if not isinstance(task, BatchedTask):
            raise ConfigError(f"task={shown(task)}: expected a BatchedTask, such as RepeatFirst(n_copies=4); the "
                              "VecEnv of an id is envs.make_vec_env(id, n_envs)")
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES} or None, got {render_mode!r}")
        self.task = task
        self.render_mode = render_mode
        self._actions = np.zeros(task.n_copies, dtype=np.int64)
        super().__init__(task.n_copies, task.observation_space, task.action_space)
        self.metadata = {"render_modes": list(RENDER_MODES)}

    def reset(self) -> np.ndarray:
        seeded = [i for i, s in enumerate(self._seeds) if s is not None]
        if seeded:
            self.task.seed(np.array(seeded), [self._seeds[i] for i in seeded])
        self.task.reset(np.arange(self.num_envs))
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return self.task.observe()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        reward, terminated, truncated, success = self.task.step(self._actions)
        obs = self.task.observe()
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            ended = np.flatnonzero(dones)
            final_obs = obs[ended]
            for row, i in enumerate(ended):
                infos[i] = {
                    "terminal_observation": final_obs[row],
                    "TimeLimit.truncated": bool(truncated[i]),
                    "is_success": bool(success[i]),
                }
            self.task.reset(ended)
            obs[ended] = self.task.observe(ended)
        return obs, reward, dones, infos

    def close(self) -> None:
        """Nothing to release: the state is numpy arrays."""

    def _per_copy(self, value: Any, indices: list[int]) -> list[Any]:
        if isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == self.num_envs:
            return [value[i] for i in indices]
        return [value for _ in indices]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Attribute of the core (or, failing that, of this VecEnv, e.g. `render_mode`) per copy."""
        target = self.task if hasattr(self.task, attr_name) else self
        return self._per_copy(getattr(target, attr_name), list(self._get_indices(indices)))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set a core attribute: per-copy arrays element-wise, shared parameters only for all copies."""
        copies = list(self._get_indices(indices))
        current = getattr(self.task, attr_name)
        if isinstance(current, np.ndarray) and current.ndim >= 1 and current.shape[0] == self.num_envs:
            current[copies] = value
        elif sorted(copies) == list(range(self.num_envs)):
            setattr(self.task, attr_name, value)
        else:
            raise ValueError(f"{attr_name!r} is shared by all copies; it cannot be set for a subset")

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        method = getattr(self.task, method_name)
        return [method(i, *method_args, **method_kwargs) for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [self.task.render_rgb(i) for i in range(self.num_envs)]

    def render(self, mode: str | None = None) -> np.ndarray | str | None:
        """Copy 0 as text (`"ansi"`) or as an RGB array (`"rgb_array"`)."""
        mode = mode or self.render_mode
        if mode == "ansi":
            return self.task.render_text(0)
        if mode == "rgb_array":
            return self.task.render_rgb(0)
        warnings.warn(f"render mode {mode!r} is not supported; use one of {RENDER_MODES}", stacklevel=2)
        return None


class EpisodeMonitor(VecMonitor):
    """SB3's `VecMonitor` (episode returns and lengths in `info["episode"]`) that keeps the reset infos of the
    VecEnv it wraps, as SB3's own `make_vec_env` (a `DummyVecEnv` of `Monitor`s) shows them in `reset_infos`."""

    def reset(self) -> Any:
        observations = super().reset()
        self.reset_infos = self.venv.reset_infos
        return observations
