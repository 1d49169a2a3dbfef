"""Env ids and the two factories: `make_vec_env` (SB3 VecEnv, for training) and `make_env` (one gymnasium env).

Families of ids:

* ``engram``: this package's numpy-batched tasks (`ENV_IDS`); `make_vec_env` returns the
  batched `BatchedVecEnv`. They are also registered with gymnasium as ``engram/<id>``.
* ``minigrid``: any ``MiniGrid-*`` id (MiniGrid-Memory* for memory), via `make_minigrid`.
* ``popgym``: any ``popgym-*`` id, via `make_popgym`.
* ``memory_gym``: Memory Gym ids, only if the optional package is installed.

Gymnasium families are vectorised with SB3's DummyVecEnv. Every `make_vec_env` result is
wrapped in SB3's ``VecMonitor``, and copy i of a run seeded s uses ``copy_seeds(s, n)[i]``.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from envs.adapters import MEMORY_GYM_IDS, import_memory_gym, make_memory_gym, make_minigrid, make_popgym
from envs.batched import BatchedTask
from envs.count_recall import CountRecall
from envs.memory_chain import MemoryChain
from envs.repeat import RepeatFirst, RepeatPrevious
from envs.tmaze import ActiveTMaze, PassiveTMaze

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecMonitor

ENV_IDS: dict[str, type[BatchedTask]] = {
    "TMaze-v0": PassiveTMaze,
    "TMazeActive-v0": ActiveTMaze,
    "RepeatFirst-v0": RepeatFirst,
    "RepeatPrevious-v0": RepeatPrevious,
    "CountRecall-v0": CountRecall,
    "MemoryChain-v0": MemoryChain,
}
"""engram's own ids and their numpy-batched task classes."""

GYM_NAMESPACE = "engram"
FAMILIES: tuple[str, ...] = ("engram", "minigrid", "popgym", "memory_gym")



def _register_with_gymnasium() -> None:
    """``gym.make("engram/TMaze-v0", length=...)`` gives the single-copy view."""
    for env_id, task in ENV_IDS.items():
        gym.register(f"{GYM_NAMESPACE}/{env_id}", entry_point=task.as_env)


_register_with_gymnasium()


def _gym_ids(prefix: str) -> list[str]:
    if prefix == "MiniGrid-":
        import minigrid  # noqa: F401
    else:
        import popgym  # noqa: F401
    return sorted(env_id for env_id in gym.registry if env_id.startswith(prefix))


def list_env_ids(family: str | None = None) -> list[str]:
    """All ids `make_vec_env` accepts, or those of one family (``engram``, ``minigrid``, ``popgym``, ``memory_gym``)."""
    lists = {
        "engram": lambda: list(ENV_IDS),
        "minigrid": lambda: _gym_ids("MiniGrid-"),
        "popgym": lambda: _gym_ids("popgym-"),
        "memory_gym": lambda: list(MEMORY_GYM_IDS),
    }
    if family is None:
        return [env_id for name in FAMILIES for env_id in lists[name]()]
    if family not in lists:
        raise ValueError(f"unknown family {family!r}; families: {', '.join(FAMILIES)}")
    return lists[family]()


def _unknown_id_message(env_id: str) -> str:
    """One line: the unknown id, the closest known ones, and the ids of every family."""
    popgym_tasks = sorted({i.removeprefix("popgym-").removesuffix("-v0").removesuffix("Easy").removesuffix(
        "Medium").removesuffix("Hard") for i in list_env_ids("popgym")})
    memory_ids = [i for i in list_env_ids("minigrid") if i.startswith("MiniGrid-Memory")]
    close = difflib.get_close_matches(env_id, list_env_ids(), n=3)
    return "; ".join([
        f"Unknown env id {env_id!r}." + (f" Did you mean {', '.join(close)}?" if close else "")
        + f" Available env ids, by family: engram (numpy-batched VecEnv): {', '.join(ENV_IDS)}",
        f"minigrid (gymnasium + DummyVecEnv): any MiniGrid-* id ({len(list_env_ids('minigrid'))}), "
        f"memory tasks: {', '.join(memory_ids)}",
        f"popgym (gymnasium + DummyVecEnv): popgym-<Task><Easy|Medium|Hard>-v0, Task in {', '.join(popgym_tasks)}",
        f"memory_gym (optional extra): {', '.join(MEMORY_GYM_IDS)}",
        "envs.list_env_ids() lists them all",
    ])


def env_family(env_id: str) -> str:
    """The family of ``env_id``; ``ValueError`` listing the available ids if it is unknown."""
    if env_id in ENV_IDS:
        return "engram"
    if env_id.startswith("MiniGrid-") and env_id in list_env_ids("minigrid"):
        return "minigrid"
    if env_id.startswith("popgym-") and env_id in list_env_ids("popgym"):
        return "popgym"
    if env_id in MEMORY_GYM_IDS:
        return "memory_gym"
    raise ValueError(_unknown_id_message(env_id))


def _named_parameters(fn: Callable[..., Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword-passable parameters of ``fn`` and their defaults (``None`` for those without one)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: None if p.default is inspect.Parameter.empty else p.default
            for p in inspect.signature(fn).parameters.values() if p.kind in kinds and p.name not in skip}


def kwarg_defaults(env_id: str) -> dict[str, Any]:
    """The keyword arguments `make_env` / `make_vec_env` accept for ``env_id``, with their defaults."""
    family = env_family(env_id)
    if family == "engram":
        return {**_named_parameters(ENV_IDS[env_id], skip=("n_copies",)), "render_mode": None}
    if family == "minigrid":
        return _named_parameters(make_minigrid, skip=("env_id",))
    if family == "memory_gym":
        import_memory_gym(env_id)
        factory: Callable[..., Any] = make_memory_gym
    else:
        factory = make_popgym
    entry_point = load_env_creator(gym.spec(env_id).entry_point)
    return {**_named_parameters(factory, skip=("env_id",)), **_named_parameters(entry_point, skip=("render_mode",))}


def env_kwargs(env_id: str) -> list[str]:
    """The keyword arguments `make_env` / `make_vec_env` accept for ``env_id``."""
    return list(kwarg_defaults(env_id))


def check_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """``TypeError`` naming every keyword argument ``env_id`` does not take, with the closest valid one."""
    valid = env_kwargs(env_id)
    unknown = [name for name in kwargs if name not in valid]
    if unknown:
        hints = []
        by_lower = {name.lower(): name for name in valid}
        for name in unknown:
            close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {by_lower[close[0]]!r}?)" if close else ""))
        raise TypeError(f"{env_id} got unexpected keyword argument(s) {', '.join(hints)}; "
                        f"valid keyword arguments: {', '.join(valid) or '(none)'}")


def make_env(env_id: str, **env_kwargs: Any) -> gym.Env:
    """One gymnasium env: the single-copy view (`SingleCopyEnv`) of an engram task, or an adapted gymnasium env.

    Raises ``ValueError`` for an unknown id and ``TypeError`` for an unknown keyword argument.
    """
    family = env_family(env_id)
    check_kwargs(env_id, env_kwargs)
    if family == "engram":
        # Built directly rather than by gym.make, which would take max_episode_steps for its own TimeLimit.
        env = ENV_IDS[env_id].as_env(**env_kwargs)
        env.spec = dataclasses.replace(gym.spec(f"{GYM_NAMESPACE}/{env_id}"), kwargs=dict(env_kwargs))
        return env
    factory = {"minigrid": make_minigrid, "popgym": make_popgym, "memory_gym": make_memory_gym}[family]
    return factory(env_id, **env_kwargs)


def make_vec_env(env_id: str, n_envs: int = 1, seed: int | None = None, **env_kwargs: Any) -> VecMonitor:
    """An SB3 VecEnv of ``n_envs`` copies of ``env_id``, wrapped in ``VecMonitor``.

    engram ids give the numpy-batched `BatchedVecEnv`; gymnasium ids a DummyVecEnv of
    `make_env` envs. With ``seed``, copy i is seeded with ``copy_seeds(seed, n_envs)[i]`` at
    the first reset (SB3 semantics; ``venv.seed(s)`` re-seeds at the next reset).
    """
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    family = env_family(env_id)
    check_kwargs(env_id, env_kwargs)
    from stable_baselines3.common.vec_env import VecEnv, VecMonitor

    from envs.vec_env import BatchedVecEnv, SeededDummyVecEnv

    venv: VecEnv
    if family == "engram":
        render_mode = env_kwargs.pop("render_mode", None)
        venv = BatchedVecEnv(ENV_IDS[env_id](n_copies=n_envs, **env_kwargs), render_mode=render_mode)
    else:
        venv = SeededDummyVecEnv([partial(make_env, env_id, **env_kwargs) for _ in range(n_envs)])
    if seed is not None:
        venv.seed(seed)
    return VecMonitor(venv)
