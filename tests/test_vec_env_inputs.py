"""`make_vec_env` and `make_env` refuse what the command line refuses: a render mode the env does not list, and a
gymnasium id registered without a time limit, whose episodes may never end, unless the caller gives it one."""

from __future__ import annotations

import warnings

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
