"""Does an environment keep gymnasium's API, and do its episodes end? Probes of a copy, and a guard on every step.

An env that returns observations of another shape than its space, the old four-tuple `step`, a `reset` without
its info dict, a reward that is no real number (an array of shape (1,), a string), a `terminated`, `truncated` or
`info["is_success"]` that is neither a bool nor 0 or 1, or that raises in `reset` or `step`, would fail inside the
vectorised env, or be read wrongly (`np.bool_("no")` is true). `api_problem` names the first such break of one
`reset` and one `step` in one line, so that a command can refuse the env before it writes anything; `Conformant`
checks every later `reset` and `step` alike and raises `EnvBreakError` naming the env, the step of its episode and
the break. Values outside a Box's bounds are not a break (many envs leave them loose, and SB3 trains on them).

An env without a time limit ends an episode only in a terminal state; `endless_problem` plays each action of a
`Discrete` action space over and over and names one under which no episode ends, as a policy that settles on one
action would play it. `check_render_mode` refuses a render mode the env does not list, which gymnasium only warns of.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
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
    if space.shape is not None and getattr(value, "shape", None) != space.shape and np.shape(value) != space.shape:
        return f"{where} has shape {np.shape(value)}, its space {space.shape}"
    return None


def _described(value: Any) -> str:
    if np.ndim(value) > 0:
        return f"an array of shape {np.shape(value)} ({type(value).__name__})"
    return f"{shown(value)} ({type(value).__name__})"


REALS = (bool, int, float, np.bool_, np.integer, np.floating)
"""the types of a real number an env returns as a scalar, checked first: each step checks several"""


def _is_real(value: Any) -> bool:
    return isinstance(value, REALS) or (np.ndim(value) == 0 and np.asarray(value).dtype.kind in "biuf")


def _is_flag(value: Any) -> bool:
    return isinstance(value, bool | np.bool_) or (_is_real(value) and value in (0, 1))


def reset_problem(space: gym.Space, result: Any) -> str | None:
    """Why `result`, what an env's `reset` returned, breaks gymnasium's API, or `None`."""
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        return "reset returned no (observation, info) pair (gymnasium's reset returns both)"
    return shape_problem(space, result[0], "reset's observation")


def step_problem(space: gym.Space, result: Any) -> str | None:
    """Why `result`, what an env's `step` returned, breaks gymnasium's API, or `None`: five values, an observation
    of the space's structure, a real reward, `terminated` and `truncated` each a bool (or 0 or 1), an info dict
    whose `is_success`, where given, is a bool (or 0 or 1), and whose `episode`, where given, holds an episode's
    statistics as SB3 reads them (`{"r": return, "l": length, ...}`, as gymnasium's `RecordEpisodeStatistics`)."""
    if not (isinstance(result, tuple) and len(result) == 5):
        size = len(result) if isinstance(result, tuple) else type(result).__name__
        return (f"step returned {size} values; gymnasium's step returns 5 (observation, reward, terminated, "
                "truncated, info)")
    observation, reward, terminated, truncated, info = result
    if (problem := shape_problem(space, observation, "step's observation")) is not None:
        return problem
    if not _is_real(reward):
        return f"step's reward is {_described(reward)}; expected a real number (a float or an int)"
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not _is_flag(flag):
            return f"step's {name} is {_described(flag)}; expected a bool"
    if not isinstance(info, dict):
        return f"step's info is {_described(info)}; expected a dict"
    if not info:
        return None
    if info.get("is_success") is not None and not _is_flag(info["is_success"]):
        return f"step's info['is_success'] is {_described(info['is_success'])}; expected a bool"
    episode = info.get("episode")
    if episode is not None and not (isinstance(episode, dict) and _is_real(episode.get("r"))
                                    and _is_real(episode.get("l"))):
        return (f"step's info['episode'] is {_described(episode)}; SB3 reads a finished episode's statistics there, "
                "expected a dict of its return 'r' and length 'l' (or no such key)")
    return None


class EnvBreakError(ConfigError):
    """An env broke gymnasium's API in a `reset` or `step` (`Conformant`); `problem` is the break alone."""

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


class Conformant(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Checks every `reset` and `step` of an env against gymnasium's API (`reset_problem`, `step_problem`), and
    raises `EnvBreakError` naming the env `name`, the step of the episode and the break, or the exception the env
    raised itself (chained to it)."""

    def __init__(self, env: gym.Env, name: str) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, name=name)
        gym.Wrapper.__init__(self, env)
        self.name = name
        self.t = 0
        self.space = env.observation_space  # read once: a wrapper's property walks the stack at each read

    def reset(self, **kwargs: Any) -> Any:
        self.t = 0
        return self._checked("reset", reset_problem, lambda: self.env.reset(**kwargs))

    def step(self, action: Any) -> Any:
        self.t += 1
        return self._checked("step", step_problem, lambda: self.env.step(action))

    def _checked(self, what: str, problem_of: Callable[[gym.Space, Any], str | None], call: Callable[[], Any]) -> Any:
        try:
            result = call()
        except EnvBreakError:
            raise
        except Exception as error:  # the env's own failure, named with its type and first line
            raise self._break("failed", _raised(what, error)) from error
        if (problem := problem_of(self.space, result)) is not None:
            raise self._break("breaks gymnasium's API", problem)
        return result

    def _break(self, what: str, problem: str) -> EnvBreakError:
        where = "its reset" if self.t == 0 else f"step {self.t} of an episode"
        return EnvBreakError(f"env={shown(self.name)} {what} at {where}: {problem}", problem)


class EndsItsProcess(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """A copy in a process of its own (SB3's SubprocVecEnv): an `EnvBreakError` of its `reset` or `step` ends the
    process with the error's one line, `error: ...` on stderr, rather than a traceback; the main process names
    the copy that ended."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def reset(self, **kwargs: Any) -> Any:
        try:
            return self.env.reset(**kwargs)
        except EnvBreakError as error:
            raise SystemExit(f"error: {error}") from None

    def step(self, action: Any) -> Any:
        try:
            return self.env.step(action)
        except EnvBreakError as error:
            raise SystemExit(f"error: {error}") from None


def _raised(what: str, error: Exception) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{what} raised {type(error).__name__}" + (f": {first}" if first else "")


def _call(what: str, fn: Any) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except EnvBreakError as error:  # a `Conformant` env's own check
        return None, error.problem
    except Exception as error:  # the env's own failure
        return None, _raised(what, error)


def api_problem(env: gym.Env, seed: int | None = None) -> str | None:
    """The first break of gymnasium's API in one `reset(seed=seed)` and one `step` of a sampled action, or `None`.
    The env's warnings are silenced here: the run's own copies give them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _api_problem(env, seed)


def _api_problem(env: gym.Env, seed: int | None) -> str | None:
    result, problem = _call("reset", lambda: env.reset(seed=seed))
    if problem is not None or (problem := reset_problem(env.observation_space, result)) is not None:
        return problem
    result, problem = _call("step", lambda: env.step(env.action_space.sample()))
    return problem if problem is not None else step_problem(env.observation_space, result)
