"""The observation and action spaces a memory policy takes: SB3's, with those it cannot take refused by name."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space

from envs.rules import ConfigError, short
from envs.spaces import observation_space_problem

ACTION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""the action spaces the learners take"""


class ExtractorMismatchError(ValueError):
    """The features extractor cannot take the observation space (an image smaller than `NatureCNN`'s kernels)."""


def _action_problem(space: spaces.Space) -> str | None:
    if not isinstance(space, ACTION_SPACES):
        return "is not one the learners take (Box, Discrete, MultiDiscrete or MultiBinary)"
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete) and np.any(space.start != 0):
        return (f"starts at {space.start}, and the policy's actions start at 0; shift them with a "
                "gymnasium.ActionWrapper")
    if isinstance(space, spaces.Box) and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        return "has an unbounded low or high; SB3 samples and clips Box actions within finite bounds"
    if isinstance(space, spaces.Box) and not np.issubdtype(space.dtype, np.floating):
        return (f"holds {space.dtype}, and the policy's Gaussian actions are real numbers; round them with a "
                "gymnasium.ActionWrapper whose action_space is a float Box, or make the space MultiDiscrete")
    if isinstance(space, spaces.MultiDiscrete | spaces.MultiBinary) and len(space.shape) > 1:
        return (f"has shape {space.shape}, and the policy's action distributions take a flat vector; flatten it with "
                "a gymnasium.ActionWrapper")
    return None


def check_spaces(observation_space: spaces.Space, action_space: spaces.Space) -> None:
    """Refuse spaces a memory policy cannot take: a `ValueError` naming the space (an observation's Dict key) and
    how to adapt the env."""
    if (problem := observation_space_problem(observation_space)) is not None:
        raise ValueError(problem)
    if (problem := _action_problem(action_space)) is not None:
        raise ValueError(f"its action space {short(str(action_space))} {problem}")


class ObservationError(ConfigError):
    """An observation `predict` cannot act on (not of the policy's space, a NaN): a `ValueError`."""


def observation_problem(observation: object, space: spaces.Space) -> str | None:
    """What makes `observation` (one env's or a batch's, as `predict` takes it) unusable for `space`, or `None`:
    an array for a Dict space or a dict for an array space, other keys than the space's, parts of different
    batch sizes, non-numeric values, a NaN or an infinity (also one a float32 space would make of a float64),
    or a value outside a Discrete, MultiDiscrete or MultiBinary space."""
    if isinstance(space, spaces.Dict) != isinstance(observation, dict):
        given = "a dict" if isinstance(observation, dict) else f"a {type(observation).__name__}"
        wanted = "a dict with the keys " + ", ".join(space.spaces) if isinstance(space, spaces.Dict) else "an array"
        return f"is {given}; expected {wanted} for the observation space {_named(space)}"
    if isinstance(space, spaces.Dict):
        assert isinstance(observation, dict)
        if set(observation) != set(space.spaces):
            return (f"has the keys {', '.join(map(str, observation)) or '(none)'}; expected "
                    f"{', '.join(space.spaces)}")
        parts = [(f"[{key!r}]", observation[key], space.spaces[key]) for key in space.spaces]
    else:
        parts = [("", observation, space)]
    batches = set()
    for where, value, part in parts:
        array = np.asarray(value)
        if (problem := _value_problem(array, part)) is not None:
            return f"{where} {problem}".lstrip()
        batches.add(array.size // max(1, int(np.prod(part.shape))))
    if len(batches) > 1:
        return f"holds parts of different batch sizes, {sorted(batches)}; expected one observation per env in each"
    return None


def _value_problem(array: np.ndarray, space: spaces.Space) -> str | None:
    if array.dtype.kind not in "biuf":
        return f"has dtype {array.dtype}; expected numbers for {_named(space)}"
    if (problem := _shape_problem(array.shape, space)) is not None:
        return problem
    if array.dtype.kind == "f":
        limit = np.finfo(space.dtype).max if isinstance(space, spaces.Box) and space.dtype.kind == "f" else np.inf
        if not (np.isfinite(array) & (np.abs(array) <= limit)).all():
            return f"holds a NaN or an infinity (or a value {space.dtype} cannot hold); expected finite numbers"
    bounds = {spaces.Discrete: lambda: (space.n, f"whole numbers in [0, {space.n})"),
              spaces.MultiDiscrete: lambda: (space.nvec, f"whole numbers in [0, nvec) per entry, nvec {space.nvec}"),
              spaces.MultiBinary: lambda: (2, "0 or 1")}
    if type(space) in bounds:
        high, wanted = bounds[type(space)]()
        try:
            inside = (array == np.round(array)) & (array >= 0) & (array < high)
        except ValueError:  # a shape that does not broadcast: SB3 names the shape
            return None
        if not inside.all():
            return f"holds values outside {_named(space)}; expected {wanted}"
    return None


def _shape_problem(shape: tuple[int, ...], space: spaces.Space) -> str | None:
    """Why an observation of `shape` is neither one env's nor a batch's of `space`, as SB3's `predict` tells them
    apart (an image's channels may also come last, which SB3 moves first), or `None`."""
    shapes = [space.shape]
    if is_image_space(space):
        shapes.append(space.shape[1:] + space.shape[:1])
    if any(shape == one or shape[1:] == one for one in shapes):
        return None
    wanted = " or ".join(f"{one} (one env's) or ({', '.join(['n_envs', *map(str, one)])}) (a batch)" for one in shapes)
    return f"has shape {shape}; expected {wanted} for {_named(space)}"


def _named(space: spaces.Space) -> str:
    """`space` in a few words: its class and shape."""
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
        return short(str(space))
    return f"{type(space).__name__} of shape {space.shape}" if space.shape is not None else type(space).__name__


def env_actions(actions: np.ndarray, space: spaces.Space) -> np.ndarray:
    """`actions` as `space` holds them, for the env: clipped into a Box, and of the space's dtype (a float16 Box, an
    int8 Discrete), which gymnasium's `contains` requires."""
    if isinstance(space, spaces.Box):
        actions = np.clip(actions, space.low, space.high)
    return actions if space.dtype is None or actions.dtype == space.dtype else actions.astype(space.dtype)
