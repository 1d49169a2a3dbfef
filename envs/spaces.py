"""The observation spaces SB3 takes (its VecEnvs hold them, its preprocessing encodes them): a `Box`, `Discrete`,
`MultiDiscrete` or `MultiBinary`, or a `Dict` of them; any other is named with the wrapper that adapts it."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs.rules import short

OBSERVATION_PARTS = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""the observation spaces SB3's preprocessing takes, alone or as the values of a Dict"""
FLATTEN = "flatten it with env_wrapper: envs.adapters.FlatObservation"


def _observation_problem(space: spaces.Space) -> str | None:
    if isinstance(space, spaces.Dict):
        return f"is a Dict inside a Dict, which SB3 does not take; {FLATTEN}"
    if isinstance(space, spaces.Tuple):
        return f"is a Tuple, which SB3 does not take; {FLATTEN}"
    if not isinstance(space, OBSERVATION_PARTS):
        mission = " (a MiniGrid or BabyAI mission: minigrid.wrappers.FlatObsWrapper encodes it with the image)" \
            if any(kind.__name__ == "MissionSpace" for kind in type(space).__mro__) else ""
        return ("is not one SB3 takes (Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of them); encode it as "
                f"one with a gymnasium.ObservationWrapper{mission}")
    if isinstance(space, spaces.Box) and space.shape == ():
        return f"has shape (), which SB3 cannot flatten; {FLATTEN}"
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary) and 0 in space.shape:
        return f"has shape {space.shape}, holding no value to observe; expected at least one"
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete) and np.any(space.start != 0):
        return f"starts at {space.start}, and SB3 one-hot encodes from 0; {FLATTEN}"
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim > 1:
        return f"has shape {space.shape}, and SB3 one-hot encodes a flat vector; {FLATTEN}"
    return None


def observation_space_problem(space: spaces.Space) -> str | None:
    """Why SB3 cannot take observations of `space` (`its observation space ...`, naming a Dict's key), or `None`."""
    if isinstance(space, spaces.Dict) and not space.spaces:
        return "its observation space Dict() holds no value to observe; expected at least one key"
    for key, part in space.spaces.items() if isinstance(space, spaces.Dict) else [(None, space)]:
        if (problem := _observation_problem(part)) is not None:
            where = "observation space" if key is None else f"observation {key!r}"
            return f"its {where} {short(str(part))} {problem}"
    return None
