"""Adapters that turn third-party memory benchmarks into SB3-friendly gymnasium envs.

* MiniGrid (`MiniGrid-*` ids, e.g. MiniGrid-MemoryS7-v0): a flat one-hot *symbolic* view
  by default, or the `rgb` egocentric image; `info["is_success"]` at episode end.
* POPGym (`popgym-*` ids): Discrete / MultiDiscrete / Tuple observations become one flat
  float32 vector of one-hots; the previous action is appended where POPGym says the task
  needs it.
* Memory Gym (optional; pins gymnasium 0.29 so it is never a requirement): imported lazily.

The third-party packages are imported inside the factories, so importing this module costs
nothing and never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.rules import ConfigError

MINIGRID_OBS_MODES: tuple[str, ...] = ("symbolic", "rgb")
# MiniGrid's action sets: all seven (left, right, forward, pickup, drop, toggle, done) or the three
# that move the agent, as in the PPO-TrXL / recurrent-PPO MiniGrid-Memory baselines of Pleines et al.
MINIGRID_ACTION_SETS: dict[str, tuple[int, ...]] = {"all": tuple(range(7)), "navigation": (0, 1, 2)}
MEMORY_GYM_IDS: tuple[str, ...] = (
    "MortarMayhem-v0", "MortarMayhem-Grid-v0", "MortarMayhemB-v0", "MortarMayhemB-Grid-v0",
    "MysteryPath-v0", "MysteryPath-Grid-v0", "SearingSpotlights-v0",
    "Endless-MortarMayhem-v0", "Endless-MysteryPath-v0", "Endless-SearingSpotlights-v0",
)
MEMORY_GYM_INSTALL = (
    "Memory Gym is an optional extra: it pins gymnasium==0.29, so install it without its "
    "dependencies: `pip install --no-deps memory-gym==1.0.2` and `pip install pygame-ce`."
)

Encoder = Callable[[Any], np.ndarray]


def flat_encoding(space: spaces.Space, role: str = "observation_space") -> tuple[spaces.Box, Encoder]:
    """A flat float32 Box for `space` and the function that encodes its elements.

    Box: flattened; Discrete: one-hot; MultiDiscrete: one one-hot per component,
    concatenated; MultiBinary: 0/1 floats; Tuple and Dict (nested too): the encodings of their parts, concatenated.
    Any other space is a `ConfigError` naming `role` (the argument that holds it).
    """
    if isinstance(space, spaces.Box):
        box = spaces.Box(space.low.reshape(-1).astype(np.float32), space.high.reshape(-1).astype(np.float32),
                         dtype=np.float32)
        return box, lambda x: np.asarray(x, dtype=np.float32).reshape(-1)
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)

        def encode_discrete(x: Any) -> np.ndarray:
            out = np.zeros(n, dtype=np.float32)
            out[int(x) - start] = 1.0
            return out

        return spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32), encode_discrete
    if isinstance(space, spaces.MultiDiscrete):
        nvec, start = space.nvec.reshape(-1), space.start.reshape(-1)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])

        def encode_multi(x: Any) -> np.ndarray:
            out = np.zeros(int(nvec.sum()), dtype=np.float32)
            out[offsets + np.asarray(x).reshape(-1) - start] = 1.0
            return out

        return spaces.Box(0.0, 1.0, shape=(int(nvec.sum()),), dtype=np.float32), encode_multi
    if isinstance(space, spaces.MultiBinary):
        size = int(np.prod(space.shape))
        return (spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32),
                lambda x: np.asarray(x, dtype=np.float32).reshape(-1))
    if isinstance(space, spaces.Tuple | spaces.Dict):
        keys = list(space.spaces) if isinstance(space, spaces.Dict) else list(range(len(space.spaces)))
        parts = [flat_encoding(space.spaces[key], role) for key in keys]
        box = spaces.Box(np.concatenate([b.low for b, _ in parts]), np.concatenate([b.high for b, _ in parts]),
                         dtype=np.float32)
        return box, lambda x: np.concatenate([enc(x[key]) for key, (_, enc) in zip(keys, parts, strict=True)])
    raise ConfigError(f"{role}={space}: no flat encoding for it; valid spaces: Box, Discrete, MultiDiscrete, "
                      "MultiBinary, and Tuple or Dict of them")


class FlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Observations as one flat float32 vector (see `flat_encoding`): one-hots for discrete parts."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        self.observation_space, self._encode = flat_encoding(env.observation_space)

    def observation(self, observation: Any) -> np.ndarray:
        return self._encode(observation)


class PreviousActionObservation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Appends the encoded previous action and a first-step flag to a flat observation.

    POPGym's `PreviousAction` + `Antialias` wrappers in one: tasks such as
    MultiarmedBandit, Battleship or MineSweeper are only solvable if the agent sees what
    it did. On reset the action part is zero and the flag is 1.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        obs_box = env.observation_space
        if not isinstance(obs_box, spaces.Box) or len(obs_box.shape) != 1:
            raise ConfigError(f"observation_space={obs_box}: PreviousActionObservation appends to a flat Box "
                              "observation; flatten it first with envs.adapters.FlatObservation")
        action_box, self._encode_action = flat_encoding(env.action_space, "action_space")
        self._no_action = np.zeros(action_box.shape, dtype=np.float32)
        self.observation_space = spaces.Box(
            np.concatenate([obs_box.low, action_box.low, [0.0]]).astype(np.float32),
            np.concatenate([obs_box.high, action_box.high, [1.0]]).astype(np.float32),
            dtype=np.float32,
        )

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return np.concatenate([obs, self._no_action, [1.0]]).astype(np.float32), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs = np.concatenate([obs, self._encode_action(action), [0.0]]).astype(np.float32)
        return obs, reward, terminated, truncated, info


class SymbolicView(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """MiniGrid's egocentric view as a flat float32 vector of one-hots.

    Each of the V x V cells of `obs["image"]` holds (object, colour, state) indices; each is
    one-hot encoded (11 + 6 + 3 = 20 values per cell), giving `V * V * 20` floats. Being
    flat and float32, SB3 does not mistake it for pixels (`is_image_space`), which would
    divide it by 255 and send it to a CNN. The agent's direction and mission are dropped,
    as with `ImgObsWrapper`.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

        sizes = np.array([len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)])
        self._offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._cell_width = int(sizes.sum())
        self._cells = int(np.prod(env.observation_space["image"].shape[:2]))
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self._cells * self._cell_width,), dtype=np.float32)

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        hot = observation["image"].reshape(self._cells, 3).astype(np.int64) + self._offsets
        out = np.zeros((self._cells, self._cell_width), dtype=np.float32)
        np.put_along_axis(out, hot, 1.0, axis=1)
        return out.reshape(-1)


class SuccessInfo(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Puts `info["is_success"]` (terminated with a positive reward) on the step that ends an episode."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {**info, "is_success": bool(terminated and float(reward) > 0.0)}
        return obs, reward, terminated, truncated, info


class ActionSubset(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """`Discrete(len(actions))` whose action `i` is the wrapped env's `actions[i]`."""

    def __init__(self, env: gym.Env, actions: tuple[int, ...]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, actions=actions)
        super().__init__(env)
        self._actions = np.asarray(actions, dtype=np.int64)
        self.action_space = spaces.Discrete(len(actions))

    def action(self, action: Any) -> int:
        return int(self._actions[int(action)])


def _time_limit(env: gym.Env, max_episode_steps: int | None) -> gym.Env:
    return env if max_episode_steps is None else gym.wrappers.TimeLimit(env, max_episode_steps)


def make_minigrid(env_id: str, obs: str = "symbolic", agent_view_size: int = 7, tile_size: int | None = None,
                  max_episode_steps: int | None = None, actions: str = "all",
                  render_mode: str | None = None, **env_kwargs: Any) -> gym.Env:
    """A MiniGrid env for SB3; `env_kwargs` go to the MiniGrid class (e.g. `max_steps`, `size`, `agent_start_pos`).

    `obs="symbolic"` (default): `SymbolicView`, `agent_view_size**2 * 20` float32.
    `obs="rgb"`: the egocentric RGB image (`RGBImgPartialObsWrapper` + `ImgObsWrapper`),
    uint8 `(V * tile_size, V * tile_size, 3)`; `tile_size` defaults to `84 // V`, i.e.
    84 x 84 for V = 3 or 7. `max_episode_steps` adds a `TimeLimit` on top of MiniGrid's
    own `max_steps` (5 S^2 for MemoryS<S>). CleanRL's PPO-TrXL set-up for MemoryS9 is
    `obs="rgb", agent_view_size=3, tile_size=28, max_episode_steps=96`. `actions` names a
    set of `MINIGRID_ACTION_SETS`: `"navigation"` keeps turn left, turn right and forward (the
    action space of Pleines et al.'s MiniGrid-Memory baselines; CleanRL keeps all seven).
    """
    import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
    from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

    if not (isinstance(agent_view_size, int) and agent_view_size >= 3 and agent_view_size % 2):
        raise ValueError(f"agent_view_size={agent_view_size!r}: expected an odd integer >= 3 (MiniGrid centres the "
                         "agent in its view)")
    if obs not in MINIGRID_OBS_MODES:
        raise ValueError(f"obs must be one of {MINIGRID_OBS_MODES}, got {obs!r}")
    if actions not in MINIGRID_ACTION_SETS:
        raise ValueError(f"actions must be one of {tuple(MINIGRID_ACTION_SETS)}, got {actions!r}")
    tile_size = 84 // agent_view_size if tile_size is None else tile_size
    env = gym.make(env_id, agent_view_size=agent_view_size, tile_size=tile_size, render_mode=render_mode,
                   **env_kwargs)
    env = ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=tile_size)) if obs == "rgb" else SymbolicView(env)
    if actions != "all":
        env = ActionSubset(env, MINIGRID_ACTION_SETS[actions])
    return SuccessInfo(_time_limit(env, max_episode_steps))


def make_popgym(env_id: str, prev_action: bool | None = None, max_episode_steps: int | None = None,
                **env_kwargs: Any) -> gym.Env:
    """A POPGym env with a flat float32 observation (`FlatObservation`).

    `prev_action=None` appends the previous action (`PreviousActionObservation`) exactly
    where POPGym marks the task with `obs_requires_prev_action`; True/False force it.
    `env_kwargs` go to the POPGym class (e.g. `k` and `num_decks` for RepeatPrevious).
    """
    import popgym  # noqa: F401  (registers the popgym-* ids)

    if not (prev_action is None or isinstance(prev_action, bool)):
        raise TypeError(f"prev_action={prev_action!r}: expected true, false or null (POPGym's own choice)")
    env: gym.Env = gym.make(env_id, **env_kwargs)
    needs_action = env.unwrapped.obs_requires_prev_action if prev_action is None else prev_action
    env = FlatObservation(env)
    if needs_action:
        env = PreviousActionObservation(env)
    return _time_limit(env, max_episode_steps)


def import_memory_gym(env_id: str) -> None:
    """Import `memory_gym` (registering its ids) or explain how to install it."""
    try:
        import memory_gym  # noqa: F401
    except ImportError as error:
        raise ImportError(f"{env_id} needs the optional package memory-gym. {MEMORY_GYM_INSTALL}") from error


def make_memory_gym(env_id: str, max_episode_steps: int | None = None, render_mode: str | None = None,
                    **env_kwargs: Any) -> gym.Env:
    """A Memory Gym env (84 x 84 RGB, or a Dict for MortarMayhemB), unchanged apart from the time limit."""
    import_memory_gym(env_id)
    return _time_limit(gym.make(env_id, render_mode=render_mode, **env_kwargs), max_episode_steps)
