"""Contract tests for the numpy-batched tasks: env checkers, SB3 VecEnv semantics, seeding, batched == single."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import VecMonitor

import envs
from envs.tmaze import LEFT, RIGHT
from envs.vec_env import BatchedVecEnv

# Small horizons keep every test fast; each id of the registry must appear here.
TASK_KWARGS: dict[str, dict[str, int]] = {
    "TMaze-v0": {"length": 4},
    "TMazeActive-v0": {"length": 4},
    "RepeatFirst-v0": {"length": 5},
    "RepeatPrevious-v0": {"k": 2, "length": 6},
    "CountRecall-v0": {"length": 5},
    "MemoryChain-v0": {"length": 3, "num_bits": 2},
}
TASK_IDS = list(TASK_KWARGS)


def test_every_engram_id_is_covered() -> None:
    assert set(TASK_KWARGS) == set(envs.ENV_IDS)


def _batched(env_id: str, n: int, seed: int | None, **extra: int) -> BatchedVecEnv:
    venv = envs.make_vec_env(env_id, n, seed=seed, **TASK_KWARGS[env_id], **extra)
    assert isinstance(venv, VecMonitor)
    assert isinstance(venv.venv, BatchedVecEnv)
    return venv.venv


def _single(env_id: str, **extra: int) -> envs.SingleCopyEnv:
    env = envs.make_env(env_id, **TASK_KWARGS[env_id], **extra)
    return env.unwrapped


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_gymnasium_check_env(env_id: str) -> None:
    env = _single(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        gymnasium_check_env(env)  # includes the declared render modes (the env has a spec)


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_sb3_check_env(env_id: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_check_env(_single(env_id), warn=True)


def _random_actions(venv: BatchedVecEnv, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, venv.action_space.n, size=(steps, venv.num_envs))


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_batched_equals_single_copies_with_sb3_autoreset(env_id: str) -> None:
    """n single-copy envs seeded with the per-copy seeds, reset by hand, give the batched trajectories.

    Checks SB3 semantics on the way: the observation returned with ``done`` is the first one
    of the next episode, ``terminal_observation`` is the last one of the finished episode,
    and only finished copies have non-empty infos.
    """
    n, seed = 3, 11
    venv = _batched(env_id, n, seed)
    singles = [_single(env_id) for _ in range(n)]
    obs = venv.reset()
    expected = np.stack([env.reset(seed=s)[0] for env, s in zip(singles, envs.copy_seeds(seed, n), strict=True)])
    np.testing.assert_array_equal(obs, expected)
    episodes = 0
    for actions in _random_actions(venv, 4 * venv.task.episode_length):
        obs, rewards, dones, infos = venv.step(actions)
        assert obs.dtype == np.float32 and rewards.dtype == np.float32 and dones.dtype == bool
        for i, env in enumerate(singles):
            single_obs, reward, terminated, truncated, info = env.step(actions[i])
            assert rewards[i] == np.float32(reward)
            assert dones[i] == (terminated or truncated)
            if dones[i]:
                episodes += 1
                np.testing.assert_array_equal(infos[i]["terminal_observation"], single_obs)
                assert infos[i]["TimeLimit.truncated"] == truncated
                assert infos[i]["is_success"] == info["is_success"]
                single_obs = env.reset()[0]  # the auto-reset observation
            else:
                assert infos[i] == {}
            np.testing.assert_array_equal(obs[i], single_obs)
    assert episodes >= 3 * n


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_time_limit_truncates(env_id: str) -> None:
    venv = _batched(env_id, 2, seed=0, max_episode_steps=2)
    assert venv.task.episode_length > 2
    venv.reset()
    _, _, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
    assert not dones.any()
    _, _, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
    assert dones.all()
    assert all(info["TimeLimit.truncated"] and not info["is_success"] for info in infos)

    untimed = _batched(env_id, 2, seed=0)
    untimed.reset()
    for t in range(untimed.task.episode_length):
        _, _, dones, infos = untimed.step(np.zeros(2, dtype=np.int64))
        assert dones.all() == (t == untimed.task.episode_length - 1)
    assert not any(info["TimeLimit.truncated"] for info in infos)

    single = _single(env_id, max_episode_steps=2)
    single.reset(seed=0)
    assert single.step(0)[3] is False
    assert single.step(0)[2:4] == (False, True)


def _trajectory(env_id: str, n: int, seed: int, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observations ``(n, steps + 1, d)``, rewards and dones ``(n, steps)``, the same action in every copy."""
    venv = _batched(env_id, n, seed)
    observations, rewards, dones = [venv.reset()], [], []
    for action in _random_actions(venv, steps, seed=3)[:, 0]:
        obs, reward, done, _ = venv.step(np.full(n, action))
        observations.append(obs)
        rewards.append(reward)
        dones.append(done)
    return np.stack(observations, axis=1), np.stack(rewards, axis=1), np.stack(dones, axis=1)


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_seeding(env_id: str) -> None:
    steps = 40 * envs.ENV_IDS[env_id](1, **TASK_KWARGS[env_id]).episode_length
    first = _trajectory(env_id, 8, seed=5, steps=steps)
    again = _trajectory(env_id, 8, seed=5, steps=steps)
    other = _trajectory(env_id, 8, seed=6, steps=steps)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])
    distinct = {first[0][i].tobytes() + first[1][i].tobytes() for i in range(8)}
    assert len(distinct) == 8, "copies of one env must follow different random streams"


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_a_copy_draws_only_from_its_own_stream(env_id: str) -> None:
    """Resetting one copy of a core leaves the other copies' random streams untouched."""
    task = envs.ENV_IDS[env_id](3, **TASK_KWARGS[env_id])
    task.reset(np.arange(3))
    before = task.rng.state.copy()
    task.reset(np.array([1]))
    assert task.rng.state[0] == before[0] and task.rng.state[2] == before[2]
    assert task.rng.state[1] != before[1]


def test_copy_seeds_are_independent_of_n_and_of_nearby_seeds() -> None:
    assert envs.copy_seeds(0, 4)[:2] == envs.copy_seeds(0, 2)
    assert not set(envs.copy_seeds(0, 16)) & set(envs.copy_seeds(1, 16))
    assert len(set(envs.copy_seeds(0, 16))) == 16


def test_vecenv_seed_applies_at_next_reset() -> None:
    venv = _batched("RepeatFirst-v0", 4, seed=None)
    reference = _batched("RepeatFirst-v0", 4, seed=9)
    actions = _random_actions(venv, 12)
    venv.reset()
    assert venv.seed(9) == envs.copy_seeds(9, 4)
    np.testing.assert_array_equal(venv.reset(), reference.reset())
    for a in actions:
        np.testing.assert_array_equal(venv.step(a)[0], reference.step(a)[0])
    assert venv._seeds == [None] * 4, "seeds are used once"


@pytest.mark.parametrize(("env_id", "path", "cue_shown"), [
    ("TMaze-v0", [LEFT, RIGHT, LEFT], [1, 0, 0, 0]),  # starts on the oracle; bumps, leaves, returns
    ("TMazeActive-v0", [LEFT, LEFT, RIGHT, LEFT], [0, 1, 0, 0, 0]),  # fetches the cue, bumps, leaves, returns
])
def test_tmaze_cue_is_shown_on_the_first_oracle_visit_only(env_id: str, path: list[int], cue_shown: list[int]) -> None:
    env = _single(env_id)
    obs, _ = env.reset(seed=0)
    seen = [obs] + [env.step(action)[0] for action in path]
    assert [o[1] for o in seen] == [env.task.goal[0] * shown for shown in cue_shown]


def test_attributes_methods_and_render() -> None:
    venv = _batched("TMaze-v0", 3, seed=1, render_mode="ansi")
    venv.reset()
    assert venv.get_attr("goal") == list(venv.task.goal)
    assert venv.get_attr("length", indices=[0, 2]) == [4, 4]
    assert venv.get_attr("render_mode") == ["ansi"] * 3
    assert venv.env_is_wrapped(VecMonitor) == [False] * 3
    venv.set_attr("goal", 1, indices=[1])
    assert venv.task.goal[1] == 1
    venv.set_attr("max_episode_steps", 3)
    assert venv.task.max_episode_steps == 3
    with pytest.raises(ValueError, match="shared"):
        venv.set_attr("penalty", 0.0, indices=[0])
    with pytest.raises(AttributeError):
        venv.get_attr("no_such_attribute")
    texts = venv.env_method("render_text", indices=[2])
    assert len(texts) == 1 and "A" in texts[0]
    assert venv.render() == venv.task.render_text(0)
    image = venv.render("rgb_array")
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert len(venv.get_images()) == 3


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_single_copy_render_modes(env_id: str) -> None:
    text_env = _single(env_id, render_mode="ansi")
    text_env.reset(seed=0)
    assert isinstance(text_env.render(), str) and text_env.render()
    rgb_env = _single(env_id, render_mode="rgb_array")
    rgb_env.reset(seed=0)
    image = rgb_env.render()
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3


def test_invalid_actions_and_parameters_are_rejected() -> None:
    venv = _batched("TMaze-v0", 2, seed=0)
    venv.reset()
    with pytest.raises(ValueError, match="actions"):
        venv.step(np.array([0, 4]))
    with pytest.raises(ValueError, match="actions"):
        venv.step(np.array([-1, 0]))
    with pytest.raises(ValueError, match="length"):
        envs.make_vec_env("TMaze-v0", 1, length=0)
    with pytest.raises(ValueError, match="k"):
        envs.make_vec_env("RepeatPrevious-v0", 1, k=4, length=4)
    with pytest.raises(ValueError, match="render_mode"):
        envs.make_vec_env("TMaze-v0", 1, render_mode="human")


def test_envs_package_does_not_import_torch() -> None:
    code = (
        "import sys, envs\n"
        "for env_id in ['TMaze-v0', 'MiniGrid-MemoryS7-v0', 'popgym-RepeatFirstEasy-v0']:\n"
        "    env = envs.make_env(env_id)\n"
        "    env.reset(seed=0)\n"
        "    env.step(env.action_space.sample())\n"
        "assert 'torch' not in sys.modules, 'envs imported torch'\n"
        "assert 'stable_baselines3' not in sys.modules, 'envs imported SB3 eagerly'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
