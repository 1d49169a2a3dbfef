"""Does an environment keep gymnasium's API, and do its episodes end? Probes of a copy, before a run is made.

An env that returns observations of another shape than its space, the old four-tuple `step`, a `reset` without
its info dict, or that raises in `reset` or its first `step`, would fail inside the vectorised env after the run
directory exists. `api_problem` names the first such break in one line, so that a command can refuse the env
before it writes anything. Values outside a Box's bounds are not a break (many envs leave them loose, and SB3
trains on them).

An env without a time limit ends an episode only in a terminal state; `endless_problem` plays each action of a
`Discrete` action space over and over and names one under which no episode ends, as a policy that settles on one
action would play it. `check_render_mode` refuses a render mode the env does not list, which gymnasium only warns of.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.rules import ConfigError, shown

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv


ENDING_STEPS = 1_000
"""steps in which a repeated action must end an episode (`endless_problem`)"""


def endless_problem(venv: VecEnv, steps: int = ENDING_STEPS) -> str | None:
    """Why the episodes of the VecEnv `venv` are not shown to end, or `None` where every one of its copies, repeating
    any one action of its `Discrete` action space from a reset, ends an episode within `steps` steps (the copies
    are stepped, and left where the last probe stopped). Another kind of action space is not tried: its episodes
    are not shown to end."""
    space = venv.action_space
    if not isinstance(space, spaces.Discrete):
        return f"its {type(space).__name__} actions are not tried one by one, as a Discrete space's are"
    for action in range(int(space.start), int(space.start + space.n)):
        venv.reset()
        ended = np.zeros(venv.num_envs, dtype=bool)
        for _ in range(steps):
            ended |= np.asarray(venv.step(np.full(venv.num_envs, action))[2], dtype=bool)
            if ended.all():
                break
        else:
            return f"repeating action {action} ended no episode within {steps:,} steps"
    return None


def check_render_mode(mode: Any, modes: Any, key: str = "env_kwargs.render_mode") -> None:
    """`ConfigError` naming `key` where `mode` is neither `None` nor one of `modes`, an env's
    `metadata["render_modes"]` (`None` before the env is made: then only a mode that is no string is refused)."""
    if mode is None or (modes is None and isinstance(mode, str)):
        return
    if modes is None:
        raise ConfigError(f"{key}={shown(mode)}: expected one of the env's render modes (a string), or no render mode")
    if mode not in modes:
        raise ConfigError(f"{key}={shown(mode)}: expected one of the env's render modes, "
                          f"{', '.join(map(str, modes)) or '(none)'} (or no render mode)")


def shape_problem(space: gym.Space, value: Any, where: str = "observation") -> str | None:
    """Why `value` cannot be an element of `space` by its structure (keys, shape), or `None`."""
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            keys = sorted(value) if isinstance(value, dict) else type(value).__name__
            return f"{where} is {keys}, the space's keys are {sorted(space.spaces)}"
        for key, sub in space.spaces.items():
            if (problem := shape_problem(sub, value[key], f"{where}[{key!r}]")) is not None:
                return problem
        return None
    if space.shape is not None and np.shape(value) != space.shape:
        return f"{where} has shape {np.shape(value)}, its space {space.shape}"
    return None


def _call(what: str, fn: Any) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except Exception as error:  # the env's own failure, named with its type and first line
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return None, f"{what} raised {type(error).__name__}" + (f": {first}" if first else "")


def api_problem(env: gym.Env, seed: int | None = None) -> str | None:
    """The first break of gymnasium's API in one `reset(seed=seed)` and one `step` of a sampled action, or `None`.
    The env's warnings are silenced here: the run's own copies give them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _api_problem(env, seed)


def _api_problem(env: gym.Env, seed: int | None) -> str | None:
    result, problem = _call("reset", lambda: env.reset(seed=seed))
    if problem is not None:
        return problem
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        return "reset returned no (observation, info) pair (gymnasium's reset returns both)"
    if (problem := shape_problem(env.observation_space, result[0], "reset's observation")) is not None:
        return problem
    result, problem = _call("step", lambda: env.step(env.action_space.sample()))
    if problem is not None:
        return problem
    if not (isinstance(result, tuple) and len(result) == 5):
        size = len(result) if isinstance(result, tuple) else type(result).__name__
        return (f"step returned {size} values; gymnasium's step returns 5 (observation, reward, terminated, "
                "truncated, info)")
    return shape_problem(env.observation_space, result[0], "step's observation")
