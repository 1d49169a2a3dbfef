"""engram's tasks check their own arguments, whichever door builds them (`gymnasium.make`, the class, `make_env`,
`make_vec_env`, the torch twin): a bad one is the same `ConfigError` naming it (docs/environments.md). The torch
VecEnv refuses actions outside the action space as the numpy one does."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.rules import ConfigError
from envs.torch_tasks import TORCH_TASKS

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("TMaze-v0", {"length": "5"}, "length='5': expected an integer >= 1"),
    ("TMaze-v0", {"length": 2.5}, "length=2.5: expected an integer >= 1"),
    ("TMaze-v0", {"length": True}, "length=True: expected an integer >= 1"),
    ("TMaze-v0", {"length": 0}, "length=0: expected an integer >= 1"),
    ("TMaze-v0", {"penalty": float("nan")}, "penalty=nan: expected a number <= 0"),
    ("TMaze-v0", {"penalty": float("-inf")}, "penalty=-inf: expected a number <= 0"),
    ("TMazeActive-v0", {"penalty": 0.5}, "penalty=0.5: expected a number <= 0"),
    ("TMaze-v0", {"max_episode_steps": 2.5}, "max_episode_steps=2.5: expected an integer >= 1"),
    ("TMaze-v0", {"max_episode_steps": True}, "max_episode_steps=True: expected an integer >= 1"),
    ("TMaze-v0", {"max_episode_steps": -3}, "max_episode_steps=-3: expected an integer >= 1"),
    ("RepeatPrevious-v0", {"k": 2.5}, "k=2.5: expected an integer >= 1"),
    ("RepeatPrevious-v0", {"k": 0}, "k=0: expected an integer >= 1"),
    ("RepeatPrevious-v0", {"n_symbols": "4"}, "n_symbols='4': expected an integer >= 2"),
    ("RepeatPrevious-v0", {"k": 10, "length": 10}, "length=10: expected an integer >= 11"),
    ("RepeatFirst-v0", {"length": 0}, "length=0: expected an integer >= 2"),
    ("RepeatFirst-v0", {"n_symbols": 1}, "n_symbols=1: expected an integer >= 2"),
    ("CountRecall-v0", {"max_count": 2.5}, "max_count=2.5: expected an integer >= 1"),
    ("CountRecall-v0", {"max_count": 0}, "max_count=0: expected an integer >= 1"),
    ("CountRecall-v0", {"length": 1}, "length=1: expected an integer >= 2"),
    ("MemoryChain-v0", {"num_bits": 2.5}, "num_bits=2.5: expected an integer >= 1"),
    ("MemoryChain-v0", {"num_bits": 0}, "num_bits=0: expected an integer >= 1"),
    ("MemoryChain-v0", {"length": 2.5}, "length=2.5: expected an integer >= 1"),
    ("MemoryChain-v0", {"length": -1}, "length=-1: expected an integer >= 1"),
]
IDS = [f"{env_id}-{'-'.join(f'{k}={v}' for k, v in kwargs.items())}" for env_id, kwargs, _ in BAD]


def _refusal(build: Any) -> str:
    with pytest.raises(ConfigError) as error:
        build()
    assert isinstance(error.value, ValueError) and "\n" not in str(error.value)
    return str(error.value)


@pytest.mark.parametrize(("env_id", "kwargs", "message"), BAD, ids=IDS)
def test_every_door_refuses_a_bad_argument_alike(env_id: str, kwargs: dict[str, Any], message: str) -> None:
    if "max_episode_steps" not in kwargs:  # gymnasium.make takes that one for its own TimeLimit
        assert _refusal(lambda: gym.make(f"engram/{env_id}", **kwargs)).startswith(message)
    assert _refusal(lambda: envs.ENV_IDS[env_id].as_env(**kwargs)).startswith(message)
    assert _refusal(lambda: envs.ENV_IDS[env_id](n_copies=2, **kwargs)).startswith(message)
    assert _refusal(lambda: TORCH_TASKS[env_id](2, **kwargs)).startswith(message)
    named = f"env_kwargs.{message.split(': ')[0]}: expected"  # the factories may refuse a type before the task does
    assert _refusal(lambda: envs.make_env(env_id, **kwargs)).startswith(named)
    for vec_env in ("dummy", "torch"):
        made = _refusal(lambda vec_env=vec_env: envs.make_vec_env(env_id, 2, vec_env=vec_env, **kwargs))
        assert made.startswith(named), made


@pytest.mark.parametrize("env_id", list(TORCH_TASKS))
def test_good_arguments_still_build(env_id: str) -> None:
    kwargs = {"max_episode_steps": np.int64(3)}
    assert envs.ENV_IDS[env_id](n_copies=1, **kwargs).max_episode_steps == 3
    assert TORCH_TASKS[env_id](1, **kwargs).max_episode_steps == 3
    env = gym.make(f"engram/{env_id}")
    env.reset(seed=0)
    env.close()


def test_a_time_limit_truncates_at_its_step() -> None:
    venv = envs.make_vec_env("TMaze-v0", 1, 0, length=10, max_episode_steps=3)
    venv.reset()
    dones = [bool(venv.step(np.array([0]))[2][0]) for _ in range(3)]
    assert dones == [False, False, True]


@pytest.mark.parametrize("actions", [[7, 0], [-1, 0], [0, 0, 0], [0.5, 3.0], [np.nan, 0], None, ["a", "b"]],
                         ids=repr)
@pytest.mark.parametrize("vec_env", ["dummy", "torch"])
def test_the_vec_envs_refuse_actions_outside_the_space(actions: Any, vec_env: str) -> None:
    """Whole numbers in [0, n), one per copy, as gymnasium's `Discrete.contains` takes them (0.5 is not 0)."""
    venv = envs.make_vec_env("TMaze-v0", 2, 0, vec_env=vec_env, length=2)
    venv.reset()
    with pytest.raises(ValueError, match=r"^actions must be 2 whole number\(s\) in \[0, 4\), one per copy, got "):
        venv.step(actions if actions is None else np.array(actions))
    venv.step(np.array([0.0, 3.0]))  # whole floats are actions; a refused step leaves the env usable
    with pytest.raises(ValueError, match=r"^actions must be 1 whole number"):
        gym.make("engram/TMaze-v0", length=2).unwrapped.step(2.5)
