"""The id registry and the MiniGrid / POPGym / Memory Gym adapters, and SB3 end to end."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import VecMonitor

import envs
from envs.adapters import SuccessInfo
from envs.vec_env import BatchedVecEnv, SeededDummyVecEnv

POPGYM_EASY = [f"popgym-{name}Easy-v0" for name in (
    "Autoencode", "Battleship", "Concentration", "CountRecall", "HigherLower", "MineSweeper", "MultiarmedBandit",
    "NoisyPositionOnlyCartPole", "NoisyPositionOnlyPendulum", "PositionOnlyCartPole", "PositionOnlyPendulum",
    "RepeatFirst", "RepeatPrevious", "VelocityOnlyCartpole")]


def test_unknown_id_names_the_closest_ids_and_the_forms_of_a_spec() -> None:
    with pytest.raises(ValueError) as error:
        envs.make_vec_env("TMase-v0", 2)
    message = str(error.value)
    assert "'TMase-v0'" in message and "Did you mean TMaze-v0" in message and "\n" not in message
    for expected in [*envs.ENV_IDS, "MiniGrid-MemoryS11-v0", "popgym-<Task><Easy|Medium|Hard>-v0", "CartPole-v1",
                     "--gym-packages", "module.path:EnvClass", "list envs"]:
        assert expected in message
    with pytest.raises(ValueError, match="Did you mean MiniGrid-MemoryS9-v0"):
        envs.make_vec_env("MiniGrid-MemoryS9-v1", 1)
    with pytest.raises(ValueError, match="Unknown env id"):
        envs.make_env("MiniGrid-NoSuchTask-v0")


@pytest.mark.parametrize(("env_id", "bad", "valid"), [
    ("TMaze-v0", "lenght", "length"),
    ("RepeatPrevious-v0", "K", "k"),
    ("MiniGrid-MemoryS7-v0", "agent_view", "agent_view_size"),
    ("popgym-RepeatPreviousEasy-v0", "num_deck", "num_decks"),
])
def test_unknown_kwarg_is_named_with_the_valid_ones(env_id: str, bad: str, valid: str) -> None:
    with pytest.raises(TypeError) as error:
        envs.make_vec_env(env_id, 1, **{bad: 1})
    message = str(error.value)
    assert f"'{bad}'" in message and f"did you mean '{valid}'" in message
    assert all(name in message for name in envs.env_kwargs(env_id))


def test_listing_and_kwargs() -> None:
    assert envs.list_env_ids("engram") == list(envs.ENV_IDS)
    assert "MiniGrid-MemoryS9-v0" in envs.list_env_ids("minigrid")
    assert len(envs.list_env_ids("popgym")) == 42
    assert envs.env_family("popgym-CountRecallHard-v0") == "popgym"
    assert envs.env_kwargs("TMaze-v0") == ["length", "penalty", "max_episode_steps", "render_mode"]
    assert envs.env_kwargs("popgym-CountRecallMedium-v0") == ["prev_action", "max_episode_steps"]
    assert gym.make("engram/TMaze-v0", length=5).unwrapped.task.length == 5
    with pytest.raises(ValueError, match="families"):
        envs.list_env_ids("atari")


@pytest.mark.skipif(importlib.util.find_spec("memory_gym") is not None, reason="memory-gym is installed")
def test_memory_gym_absent_says_how_to_install() -> None:
    with pytest.raises(ImportError) as error:
        envs.make_vec_env("MysteryPath-Grid-v0", 1)
    assert "pip install --no-deps memory-gym==1.0.2" in str(error.value) and "pygame-ce" in str(error.value)


def _episode_ends(venv: Any, steps: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    ends = []
    venv.reset()
    for _ in range(steps):
        _, _, dones, infos = venv.step(rng.integers(0, venv.action_space.n, venv.num_envs))
        ends += [info for info, done in zip(infos, dones, strict=True) if done]
    return ends


def test_minigrid_symbolic_is_a_flat_one_hot_vector() -> None:
    venv = envs.make_vec_env("MiniGrid-MemoryS7-v0", 2, seed=0)
    assert isinstance(venv.venv, SeededDummyVecEnv)
    space = venv.observation_space
    assert space.dtype == np.float32 and space.shape == (7 * 7 * 20,) and not is_image_space(space)
    obs = venv.reset()
    assert space.contains(obs[0])
    per_cell = obs.reshape(2, 49, 20)
    assert np.array_equal(per_cell.sum(axis=2), np.full((2, 49), 3.0)), "object, colour and state one-hots"
    ends = _episode_ends(venv, 500)
    assert ends and all(isinstance(info["is_success"], bool) for info in ends)
    assert all("episode" in info for info in ends)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MiniGrid's own checker warnings (wrapped env) are not ours
        gymnasium_check_env(envs.make_env("MiniGrid-MemoryS7-v0"), skip_render_check=True)


def test_minigrid_rgb_reproduces_cleanrl_setup() -> None:
    venv = envs.make_vec_env("MiniGrid-MemoryS9-v0", 2, seed=0, obs="rgb", agent_view_size=3, tile_size=28,
                             max_episode_steps=96)
    space = venv.observation_space
    assert space.shape == (84, 84, 3) and space.dtype == np.uint8 and is_image_space(space)
    assert envs.make_env("MiniGrid-MemoryS7-v0", obs="rgb").observation_space.shape == (84, 84, 3)  # 7 x 12
    ends = _episode_ends(venv, 200)
    timeouts = [info for info in ends if info["TimeLimit.truncated"]]
    assert all(info["episode"]["l"] == 96 and not info["is_success"] for info in timeouts)
    assert all(info["episode"]["l"] <= 96 for info in ends)


def test_minigrid_navigation_actions_are_turn_left_turn_right_and_forward() -> None:
    full = envs.make_env("MiniGrid-MemoryS7-v0")
    navigation = envs.make_env("MiniGrid-MemoryS7-v0", actions="navigation")
    assert navigation.action_space == gym.spaces.Discrete(3) and full.action_space == gym.spaces.Discrete(7)
    for env in (full, navigation):
        env.reset(seed=3)
    start = tuple(full.unwrapped.agent_pos)
    visited = set()
    for action in [0, 0, 2, 1, 1, 2, 2, 0]:  # turn around, walk back, ...: the same indices in both sets
        np.testing.assert_array_equal(full.step(action)[0], navigation.step(action)[0])
        assert tuple(full.unwrapped.agent_pos) == tuple(navigation.unwrapped.agent_pos)
        visited.add(tuple(full.unwrapped.agent_pos))
    assert visited - {start}, "the walk must move the agent, or forward is not tested"
    with pytest.raises(ValueError, match="actions must be one of \\('all', 'navigation'\\), got 'move'"):
        envs.make_env("MiniGrid-MemoryS7-v0", actions="move")


def test_minigrid_seeding_is_reproducible() -> None:
    def rollout(seed: int) -> np.ndarray:
        venv = envs.make_vec_env("MiniGrid-MemoryS7-v0", 2, seed=seed)
        frames = [venv.reset()]
        for action in [2, 2, 0, 2, 1, 2]:
            frames.append(venv.step(np.array([action, action]))[0])
        return np.stack(frames)

    np.testing.assert_array_equal(rollout(1), rollout(1))
    assert not np.array_equal(rollout(1), rollout(2))


class _Scripted(gym.Env):
    """Ends its episode at the first step with the given reward / termination."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(1)

    def __init__(self, reward: float, terminated: bool) -> None:
        self.outcome = reward, terminated

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict]:
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
        reward, terminated = self.outcome
        return 0, reward, terminated, not terminated, {}


@pytest.mark.parametrize(("reward", "terminated", "success"), [(0.7, True, True), (0.0, True, False),
                                                                (0.0, False, False)])
def test_success_info(reward: float, terminated: bool, success: bool) -> None:
    env = SuccessInfo(_Scripted(reward, terminated))
    env.reset()
    assert env.step(0)[4]["is_success"] is success


@pytest.mark.filterwarnings("ignore:.*share an object")  # POPGym CountRecall reuses its info dict
@pytest.mark.parametrize("env_id", POPGYM_EASY)
def test_popgym_observations_become_flat_float32(env_id: str) -> None:
    env = envs.make_env(env_id)
    raw = gym.make(env_id)
    space = env.observation_space
    assert isinstance(space, gym.spaces.Box) and space.dtype == np.float32 and len(space.shape) == 1
    obs, _ = env.reset(seed=0)
    assert space.contains(obs)
    if raw.unwrapped.obs_requires_prev_action:
        assert obs[-1] == 1.0, "first-step flag"
        obs = env.step(env.action_space.sample())[0]
        assert obs[-1] == 0.0
    for _ in range(5):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert space.contains(obs)
        if terminated or truncated:
            env.reset()


def test_popgym_one_hot_encoding_and_kwargs() -> None:
    env = envs.make_env("popgym-CountRecallEasy-v0")  # MultiDiscrete([2, 2]) -> 4 one-hot values
    obs, _ = env.reset(seed=0)
    raw = gym.make("popgym-CountRecallEasy-v0")
    raw_obs, _ = raw.reset(seed=0)
    expected = np.zeros(4, dtype=np.float32)
    expected[[raw_obs[0], 2 + raw_obs[1]]] = 1.0
    np.testing.assert_array_equal(obs, expected)
    assert envs.make_env("popgym-RepeatPreviousEasy-v0", k=2).unwrapped.k == 2
    bandit = envs.make_env("popgym-MultiarmedBanditEasy-v0", prev_action=False)
    assert bandit.observation_space.shape == (2,)
    assert envs.make_env("popgym-MultiarmedBanditEasy-v0").observation_space.shape == (2 + 10 + 1,)


def test_popgym_vec_env_seeding() -> None:
    def rollout(seed: int) -> np.ndarray:
        venv = envs.make_vec_env("popgym-RepeatPreviousEasy-v0", 3, seed=seed)
        frames = [venv.reset()]
        frames += [venv.step(np.zeros(3, dtype=np.int64))[0] for _ in range(10)]
        return np.stack(frames)

    np.testing.assert_array_equal(rollout(4), rollout(4))
    assert not np.array_equal(rollout(4), rollout(5))


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("TMaze-v0", {"length": 3}),
    ("MiniGrid-MemoryS7-v0", {"max_episode_steps": 16}),
    ("popgym-RepeatFirstEasy-v0", {}),
])
def test_sb3_ppo_learns_a_few_steps_and_monitors_episodes(env_id: str, kwargs: dict[str, int]) -> None:
    from stable_baselines3 import PPO

    venv = envs.make_vec_env(env_id, 4, seed=0, **kwargs)
    assert isinstance(venv, VecMonitor)
    assert isinstance(venv.venv, BatchedVecEnv) == (env_id in envs.ENV_IDS)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256)
    assert len(model.ep_info_buffer) > 0
    if env_id != "popgym-RepeatFirstEasy-v0":  # POPGym defines no success
        assert len(model.ep_success_buffer) > 0


def test_a_minigrid_wrapper_on_an_adapted_id_names_the_entry_point_to_use():
    """MiniGrid's own wrappers expect its Dict observation, which engram's adapter has already encoded: the
    refusal says so and names the env class to give as an entry point instead."""
    from envs import make_env
    from envs.wrappers import EnvWrapperError

    with pytest.raises(EnvWrapperError, match=r"fails on MiniGrid-Empty-5x5-v0 .*engram's MiniGrid adapter encodes "
                                              r"the observation .*--env minigrid.envs:EmptyEnv$"):
        make_env("MiniGrid-Empty-5x5-v0", env_wrapper="minigrid.wrappers.ImgObsWrapper")


def test_a_minigrid_tasks_own_keywords_reach_it_and_a_misspelt_one_is_named() -> None:
    env = envs.make_env("MiniGrid-Empty-5x5-v0", max_steps=20, agent_start_pos=(2, 2), highlight=False)
    assert (env.unwrapped.max_steps, env.unwrapped.agent_start_pos, env.unwrapped.highlight) == (20, (2, 2), False)
    env.close()
    with pytest.raises(TypeError, match="'max_step' \\(did you mean 'max_steps'\\?\\)"):
        envs.make_env("MiniGrid-MemoryS9-v0", max_step=20)
