"""`make_vec_env` and `make_env` refuse what the command line refuses: a render mode the env does not list, a
gymnasium id registered without a time limit, whose episodes may never end, unless the caller gives it one, and
observations no SB3 VecEnv holds."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.rules import ConfigError

FLAT = "envs.adapters.FlatObservation"


@pytest.mark.parametrize("make", [lambda **kw: envs.make_vec_env("CartPole-v1", 2, **kw),
                                  lambda **kw: envs.make_vec_env("CartPole-v1", 1, vec_env="subproc", **kw),
                                  lambda **kw: envs.make_env("CartPole-v1", **kw)])
def test_a_render_mode_the_env_does_not_list_is_refused_naming_its_modes(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused by name, not after gymnasium's warning
        with pytest.raises(ConfigError, match=r"^env_kwargs.render_mode='foo': expected one of the env's render "
                                              r"modes, human, rgb_array \(or no render mode\)$"):
            make(render_mode="foo")
    with pytest.raises(ConfigError, match=r"^env_kwargs.render_mode=3: expected one of the env's render modes"):
        make(render_mode=3)
    make(render_mode="rgb_array").close()


def test_a_render_mode_is_checked_for_every_family_that_takes_one():
    with pytest.raises(ConfigError, match=r"^env_kwargs.render_mode='ansi': expected one of the env's render modes, "
                                          r"human, rgb_array"):
        envs.make_vec_env("MiniGrid-MemoryS7-v0", 1, render_mode="ansi")
    with pytest.raises(ConfigError, match=r"^env_kwargs.render_mode='human': expected one of the env's render modes, "
                                          r"ansi, rgb_array"):
        envs.make_vec_env("TMaze-v0", 1, render_mode="human")  # before the batched env is made


@pytest.mark.parametrize("env_id", ["CliffWalking-v1", "CliffWalkingSlippery-v1"])
def test_an_id_without_a_time_limit_is_refused_unless_given_one(env_id):
    with pytest.raises(ConfigError, match=rf"^env='{env_id}' has no time limit .* set one with env_kwargs "
                                          r"max_episode_steps=N \(--env-kwargs max_episode_steps=N\) or a "
                                          r"gymnasium.wrappers.TimeLimit env_wrapper$"):
        envs.make_vec_env(env_id, 2, 0)
    envs.make_vec_env(env_id, 2, 0, max_episode_steps=50).close()
    envs.make_vec_env(env_id, 1, env_wrapper={"gymnasium.wrappers.TimeLimit": {"max_episode_steps": 9}}).close()


def test_an_id_without_a_time_limit_whose_episodes_end_is_made_and_seeded_as_asked():
    """Blackjack has no time limit but ends every hand: it is made, its copies seeded as if never probed."""
    first, second = (envs.make_vec_env("Blackjack-v1", 3, 7, env_wrapper=FLAT) for _ in range(2))
    assert np.array_equal(first.reset(), second.reset())
    first.close()
    second.close()


OBSERVATIONS = {"text": gym.spaces.Text(5), "sequence": gym.spaces.Sequence(gym.spaces.Discrete(2)),
                "nested": gym.spaces.Dict({"n": gym.spaces.Dict({"c": gym.spaces.Box(0, 1, (2,))})})}


class Observing(gym.Env):
    """An env whose observation space is `OBSERVATIONS[kind]`."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, kind: str = "text") -> None:
        self.observation_space = OBSERVATIONS[kind]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[object, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: int) -> tuple[object, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, True, False, {}


@pytest.mark.parametrize("vec_env", ["dummy", "subproc"])
@pytest.mark.parametrize(("kind", "named"), [("text", "its observation space Text"),
                                             ("sequence", "its observation space Sequence"),
                                             ("nested", "its observation 'n' Dict")])
def test_an_observation_space_no_vec_env_holds_is_refused_naming_it(kind, named, vec_env):
    """A `ConfigError` naming the env and its space, with either VecEnv, as the learners name it; once flattened
    by the wrapper the message names, the same env is made."""
    with pytest.raises(ConfigError, match=rf"^env='tests.test_vec_env_inputs:Observing': {named}"):
        envs.make_vec_env("tests.test_vec_env_inputs:Observing", 2, vec_env=vec_env, kind=kind)
    if kind == "nested":  # flattened, it is one
        envs.make_vec_env("tests.test_vec_env_inputs:Observing", 2, kind=kind, env_wrapper=FLAT).close()


def test_a_batched_vec_env_of_an_id_names_make_vec_env():
    with pytest.raises(ConfigError, match=r"^task=.TMaze-v0.: expected a BatchedTask, .*make_vec_env\(id, n_envs\)"):
        envs.BatchedVecEnv("TMaze-v0")
    assert envs.BatchedVecEnv(envs.RepeatFirst(n_copies=3)).num_envs == 3
