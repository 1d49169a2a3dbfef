"""Wrappers a run applies to each environment copy (`env_wrapper`), and two that make a POMDP of an MDP.

A run's `env_wrapper` is written as in rl-zoo3's hyper-parameter files: one import path, a one-key mapping
`{path: {keyword: value}}`, or a list of them, applied in order to every copy::

    env_wrapper:
      - envs.wrappers.MaskVelocity
      - gymnasium.wrappers.TimeLimit: {max_episode_steps: 200}

`MaskVelocity` drops the velocities of the classic-control tasks, so that they must be inferred from
a memory of positions (the "no velocity" POMDPs of Meng et al. 2021 and of rl-zoo3's `*NoVel` tasks);
`MaskObservation` drops any chosen entries.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.imports import ImportPathError, cause, load_object
from envs.rules import ConfigError, short, shown


class WrapperSpec(NamedTuple):
    """One wrapper: its import path and keyword arguments."""

    path: str
    kwargs: dict[str, Any]


class EnvWrapperError(ConfigError):
    """An `env_wrapper` entry that is malformed, does not import, or fails on the env; names the entry."""


def parse_env_wrapper(value: Any) -> list[WrapperSpec]:
    """The wrappers `value` names (`None`, a path, `{path: kwargs}`, or a list or tuple of those), in order."""
    if value is None:
        return []
    items = list(value) if isinstance(value, list | tuple) else [value]
    specs = []
    for item in items:
        if isinstance(item, str) and item:
            specs.append(WrapperSpec(item, {}))
        elif isinstance(item, dict) and len(item) == 1:
            (path, kwargs), = item.items()
            if not isinstance(path, str) or not (kwargs is None or isinstance(kwargs, dict)):
                raise EnvWrapperError(f"env_wrapper entry {item!r}: expected {{import.path: {{keyword: value}}}}")
            specs.append(WrapperSpec(path, dict(kwargs or {})))
        else:
            raise EnvWrapperError(f"env_wrapper entry {item!r}: expected an import path such as "
                                  "envs.wrappers.MaskVelocity, or a one-key mapping {import.path: {keyword: value}}")
    return specs


def apply_wrappers(env: gym.Env, specs: Sequence[WrapperSpec]) -> gym.Env:
    """`env` wrapped by each of `specs` in turn; `EnvWrapperError` naming the one that fails."""
    for spec in specs:
        try:
            wrapper = load_object(spec.path)
        except ImportPathError as error:
            raise EnvWrapperError(f"env_wrapper {shown(spec.path)}: {error}") from None
        if not callable(wrapper) or isinstance(wrapper, type) and not issubclass(wrapper, gym.Wrapper):
            kind = f"the class {wrapper.__name__}" if isinstance(wrapper, type) else f"a {type(wrapper).__name__}"
            raise EnvWrapperError(f"env_wrapper {shown(spec.path)} is {kind}, not a gymnasium.Wrapper subclass or a "
                                  "function of the env")
        try:
            wrapped = wrapper(env, **spec.kwargs)
        except Exception as error:  # the wrapper's own refusal of this env or of its keywords
            raise EnvWrapperError(f"env_wrapper {shown(spec.path)} fails on {_env_name(env)} "
                                  f"({short(cause(error), 200)})") from None
        if not isinstance(wrapped, gym.Env):
            raise EnvWrapperError(f"env_wrapper {shown(spec.path)} returned a {type(wrapped).__name__}, not a "
                                  "gymnasium env")
        env = wrapped
    return env


def _env_name(env: gym.Env) -> str:
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


class MaskObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """A flat Box observation without the entries at indices `drop`."""

    def __init__(self, env: gym.Env, drop: Sequence[int]) -> None:
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskObservation needs a flat Box observation, got {space}")
        size = space.shape[0]
        if not isinstance(drop, list | tuple) or not drop or not all(_is_index(i, size) for i in drop):
            raise ConfigError(f"drop={shown(drop)}: expected a non-empty list of indices in [0, {size})")
        gym.utils.RecordConstructorArgs.__init__(self, drop=list(drop))
        super().__init__(env)
        self.keep = np.setdiff1d(np.arange(size), np.asarray(drop) % size)
        self.observation_space = spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def _is_index(value: Any, size: int) -> bool:
    """Whether `value` is an integer index of a vector of `size` entries (negative ones count from the end)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and -size <= value < size


VELOCITIES: dict[str, tuple[int, ...]] = {
    "CartPoleEnv": (1, 3),  # x, ẋ, θ, θ̇
    "PendulumEnv": (2,),  # cos θ, sin θ, θ̇
    "MountainCarEnv": (1,),  # x, ẋ
    "Continuous_MountainCarEnv": (1,),
    "AcrobotEnv": (4, 5),  # cos θ1, sin θ1, cos θ2, sin θ2, θ̇1, θ̇2
    "LunarLander": (2, 3, 5),  # x, y, ẋ, ẏ, angle, angular velocity, legs (discrete and continuous)
}
"""the velocity entries of gymnasium's classic-control (and Box2D lander) observations, by the task's class"""


class MaskVelocity(MaskObservation):
    """A classic-control task without its velocities (`VELOCITIES`): the agent must infer them from
    the positions it remembers. The task is known by its class (or a subclass), however it was made."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)  # first: its own (empty) arguments are the ones recorded
        name = next((cls.__name__ for cls in type(env.unwrapped).__mro__
                     if cls.__name__ in VELOCITIES and cls.__module__.startswith("gymnasium.envs.")), None)
        if name is None:
            raise ValueError(f"MaskVelocity knows the velocities of gymnasium's {', '.join(VELOCITIES)}, not of "
                             f"{_env_name(env)}; use envs.wrappers.MaskObservation with drop: [indices]")
        super().__init__(env, VELOCITIES[name])
