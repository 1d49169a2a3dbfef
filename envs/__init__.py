"""Memory-heavy environments for engram: numpy-batched tasks as SB3 VecEnvs, plus adapters.

`make_vec_env(env_id, n_envs, seed, **env_kwargs)` is the entry point for training, for any env spec
(engram's tasks, any gymnasium id, an entry point `module.path:EnvClass`; see `envs.registry`);
`make_env` gives one gymnasium env (for checkers, docs and debugging); `list_env_ids`
and `env_kwargs` describe what is available; `envs.wrappers` holds the `env_wrapper` machinery.
Bad arguments are refused with `envs.rules.ConfigError` (`EnvKwargsError` for an unknown keyword,
`ImportPathError` for an import path that names nothing), each one line naming the argument and what is valid.
Importing `envs` does not import torch;
`BatchedVecEnv` (an SB3 class, so SB3 and torch come with it) is loaded on first use.
"""

from typing import Any

from envs.batched import BatchedTask, CopyStreams, SingleCopyEnv, copy_seeds
from envs.count_recall import CountRecall
from envs.imports import ImportPathError
from envs.memory_chain import MemoryChain
from envs.registry import (
    ENV_IDS,
    FAMILIES,
    VEC_ENVS,
    EnvFactory,
    EnvKwargsError,
    env_family,
    env_kwargs,
    list_env_ids,
    make_env,
    make_vec_env,
)
from envs.repeat import RepeatFirst, RepeatPrevious
from envs.scored import ScoredAnswerTask
from envs.tmaze import ActiveTMaze, PassiveTMaze, TMaze
from envs.wrappers import MaskObservation, MaskVelocity

__all__ = [
    "ENV_IDS",
    "FAMILIES",
    "VEC_ENVS",
    "ActiveTMaze",
    "BatchedTask",
    "BatchedVecEnv",
    "CopyStreams",
    "CountRecall",
    "EnvFactory",
    "EnvKwargsError",
    "ImportPathError",
    "MaskObservation",
    "MaskVelocity",
    "MemoryChain",
    "PassiveTMaze",
    "RepeatFirst",
    "RepeatPrevious",
    "ScoredAnswerTask",
    "SingleCopyEnv",
    "TMaze",
    "copy_seeds",
    "env_family",
    "env_kwargs",
    "list_env_ids",
    "make_env",
    "make_vec_env",
]


def __getattr__(name: str) -> Any:
    if name == "BatchedVecEnv":
        from envs.vec_env import BatchedVecEnv

        return BatchedVecEnv
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
