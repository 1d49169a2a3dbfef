"""Bad input to the environment API (`envs`) and the environment options of the command line: a named error
(`ConfigError`) or exit status 2, with one line naming the argument, the value and what is valid, before
anything is built or written (docs/environments.md, docs/own-environment.md)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
import train_rl
from envs.imports import import_packages
from envs.registry import check_time_limit
from envs.rules import ConfigError
from envs.vec_env import SeededDummyVecEnv

SMALL = ["-n", "32", "--n-envs", "2", "--eval-freq", "0", "--n-eval-episodes", "2", "--checkpoint-freq", "0",
         "--backbone", "mlp", "-p", "ppo.n_steps=16", "ppo.batch_size=32", "n_eval_envs=1"]
"""a tiny run of any gymnasium env"""

BAD_CALLS: list[tuple[str, Callable[[], Any], str]] = [
    ("env_id int", lambda: envs.make_env(3), "env_id=3: expected a non-empty string"),
    ("env_id None", lambda: envs.make_vec_env(None), "env_id=None: expected a non-empty string"),
    ("env_id empty", lambda: envs.env_kwargs(""), "env_id='': expected a non-empty string"),
    ("env_family int", lambda: envs.env_family(7), "env_id=7: expected a non-empty string"),
    ("unknown id", lambda: envs.make_env("Nope-v0"), "Unknown env id 'Nope-v0'"),
    ("unknown id vec", lambda: envs.make_vec_env("TMase-v0", 2), "Did you mean TMaze-v0"),
    ("unknown family", lambda: envs.list_env_ids("atari"), "family='atari': expected one of the families engram"),
    ("family int", lambda: envs.list_env_ids(3), "family=3: expected one of the families"),
    ("n_envs 0", lambda: envs.make_vec_env("TMaze-v0", 0), "n_envs=0: expected an integer >= 1"),
    ("n_envs negative", lambda: envs.make_vec_env("CartPole-v1", -2), "n_envs=-2: expected an integer >= 1"),
    ("n_envs float", lambda: envs.make_vec_env("TMaze-v0", 1.5), "n_envs=1.5: expected an integer >= 1"),
    ("n_envs string", lambda: envs.make_vec_env("TMaze-v0", "2"), "n_envs='2': expected an integer >= 1"),
    ("seed negative", lambda: envs.make_vec_env("TMaze-v0", 1, -1), "seed=-1: expected an integer >= 0"),
    ("seed float", lambda: envs.make_vec_env("TMaze-v0", 1, 0.5), "seed=0.5: expected an integer >= 0"),
    ("seed bool", lambda: envs.make_vec_env("TMaze-v0", 1, True), "seed=True: expected an integer >= 0"),
    ("copy_seeds seed", lambda: envs.copy_seeds(-3, 2), "seed=-3: expected an integer >= 0"),
    ("copy_seeds n", lambda: envs.copy_seeds(0, "2"), "n_copies='2': expected an integer >= 0"),
    ("vec_env", lambda: envs.make_vec_env("TMaze-v0", 1, vec_env="gpu"),
     "vec_env='gpu': expected one of dummy, subproc, torch"),
    ("kwarg value", lambda: envs.make_vec_env("TMaze-v0", 1, length=0),
     "env_kwargs.length=0: expected an integer >= 1"),
    ("kwarg type", lambda: envs.make_env("TMaze-v0", length="ten"), "env_kwargs.length='ten': expected an integer"),
    ("kwarg type of a gymnasium id", lambda: envs.make_vec_env("CartPole-v1", 1, max_episode_steps=True),
     "env_kwargs.max_episode_steps=True: expected an integer"),
    ("kwarg type of a bool", lambda: envs.make_env("CartPole-v1", sutton_barto_reward=1),
     "env_kwargs.sutton_barto_reward=1: expected true or false"),
    ("kwarg type of a float", lambda: envs.make_env("Pendulum-v1", g="9.8"), "env_kwargs.g='9.8': expected a number"),
    ("kwarg infinite for a float", lambda: envs.make_env("Pendulum-v1", g=float("inf")),
     "env_kwargs.g=inf: expected a finite number"),
    ("kwarg NaN", lambda: envs.make_vec_env("TMaze-v0", 1, penalty=float("nan")),
     "env_kwargs.penalty=nan: expected a number, not NaN"),
    ("kwarg text an env would read as NaN", lambda: envs.make_vec_env("TMaze-v0", 1, penalty="-inf"),
     "env_kwargs.penalty='-inf': expected a finite number"),
    ("kwarg of an adapter", lambda: envs.make_vec_env("MiniGrid-MemoryS7-v0", 1, obs="x"),
     "env='MiniGrid-MemoryS7-v0' with env_kwargs obs='x' does not build (ValueError: obs must be one of"),
    ("time limit of gym.make", lambda: envs.make_env("FrozenLake-v1", max_episode_steps=0),
     "env_kwargs.max_episode_steps=0: expected an integer >= 1 (or null: the registered limit)"),
    ("no time limit of gym.make", lambda: envs.make_vec_env("Pendulum-v1", 1, max_episode_steps=-1),
     "env_kwargs.max_episode_steps=-1: expected an integer >= 1 (or null: the registered limit)"),
    ("kwarg annotated int", lambda: envs.make_env("MiniGrid-MemoryS7-v0", agent_view_size=2.5),
     "env_kwargs.agent_view_size=2.5: expected an integer"),
    ("kwarg an env sets itself", lambda: envs.make_env("MiniGrid-MemoryS7-v0", see_through_walls=True),
     "got unexpected keyword argument(s) 'see_through_walls'"),
    ("render mode of a task", lambda: envs.make_vec_env("TMaze-v0", 2, render_mode="human"),
     "env_kwargs.render_mode='human': expected one of the env's render modes, ansi, rgb_array (or no render mode)"),
    ("render mode of a task's copy", lambda: envs.make_env("RepeatFirst-v0", render_mode="rgb"),
     "env_kwargs.render_mode='rgb': expected one of the env's render modes, ansi, rgb_array (or no render mode)"),
    ("render mode of a gymnasium id", lambda: envs.make_vec_env("CartPole-v1", 2, render_mode="ansi"),
     "env_kwargs.render_mode='ansi': expected one of the env's render modes, human, rgb_array (or no render mode)"),
    ("entry point call", lambda: envs.make_env("math:sqrt"), "env='math:sqrt' with env_kwargs (no kwargs) does not"),
    ("entry point class", lambda: envs.make_env("collections:OrderedDict"), "is not a gymnasium.Env subclass"),
    ("entry point module", lambda: envs.make_env("no_such_module_xyz:Env"), "module 'no_such_module_xyz' does not"),
    ("torch twin", lambda: envs.make_vec_env("CartPole-v1", 1, vec_env="torch"), "has no torch implementation"),
    ("wrapper entry", lambda: envs.make_env("CartPole-v1", env_wrapper=3), "env_wrapper entry 3: expected"),
    ("wrapper fails", lambda: envs.make_env("TMaze-v0", env_wrapper="envs.wrappers.MaskVelocity"),
     "env_wrapper 'envs.wrappers.MaskVelocity' fails on engram/TMaze-v0"),
]


@pytest.mark.parametrize(("call", "message"), [case[1:] for case in BAD_CALLS], ids=[case[0] for case in BAD_CALLS])
def test_bad_arguments_are_a_config_error_naming_them(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        call()
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_an_unknown_keyword_is_a_config_error_and_a_type_error() -> None:
    for make in (envs.make_env, envs.make_vec_env):
        with pytest.raises(envs.EnvKwargsError) as error:
            make("TMaze-v0", lenght=3)
        assert isinstance(error.value, ConfigError) and isinstance(error.value, TypeError)
        assert str(error.value).startswith("env_kwargs: TMaze-v0 got unexpected keyword argument(s) 'lenght' "
                                           "(did you mean 'length'?); valid keyword arguments: length, penalty")


@pytest.mark.parametrize("call", [
    lambda: envs.make_env("CartPole-v1", gym_packages="math"),
    lambda: envs.make_vec_env("CartPole-v1", 1, gym_packages="math"),
    lambda: envs.EnvFactory("CartPole-v1", gym_packages="math")(),
    lambda: import_packages("math"),
], ids=["make_env", "make_vec_env", "EnvFactory", "import_packages"])
def test_a_bare_string_is_not_a_list_of_module_names(call: Callable[[], Any]) -> None:
    """Iterated, "math" would be the modules "m", "a", "t", "h"; it is refused as not a list."""
    with pytest.raises(ConfigError, match=r"^gym_packages='math': expected a list, each a non-empty string"):
        call()


@pytest.mark.parametrize(("packages", "message"), [
    (3, "gym_packages=3: expected a list"),
    ([3], "gym_packages[0]=3: expected a non-empty string (a module name), in gym_packages=[3]"),
    ([""], "gym_packages[0]='': expected a non-empty string"),
    (["no_such_module_xyz"], "gym_packages=['no_such_module_xyz']: module 'no_such_module_xyz' does not import"),
])
def test_gym_packages_are_checked_item_by_item(packages: Any, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        envs.make_vec_env("CartPole-v1", 1, gym_packages=packages)
    assert message in str(error.value)


def test_list_arguments_take_tuples_and_refuse_strings() -> None:
    assert envs.make_env("CartPole-v1", gym_packages=("math",)).observation_space.shape == (4,)
    masked = envs.make_env("CartPole-v1", env_wrapper=("envs.wrappers.MaskVelocity",))
    assert masked.observation_space.shape == (2,)
    assert envs.MaskObservation(gym.make("CartPole-v1"), drop=(0,)).observation_space.shape == (3,)
    for drop in ("1", 1, [], [9], [True], ["1"]):
        with pytest.raises(ConfigError, match=r"^drop=.*: expected a non-empty list of indices in \[0, 4\)$"):
            envs.MaskObservation(gym.make("CartPole-v1"), drop=drop)
    with pytest.raises(ConfigError, match=r"^drop='1': "):  # as the value was given, not ['1']
        envs.MaskObservation(gym.make("CartPole-v1"), drop="1")


@pytest.mark.parametrize("vec_env", ["dummy", "torch"])
@pytest.mark.parametrize(("device", "message"), [
    ("gpu", "device='gpu': expected auto, cpu, cuda, cuda:N or mps"),
    ("", "device='': expected auto, cpu, cuda, cuda:N or mps"),
    (None, "device=None: expected auto, cpu, cuda, cuda:N or mps"),
    (f"cuda:{torch.cuda.device_count()}", "device='cuda:"),  # one past the last this machine has
    (99, "device=99: "),
])
def test_a_device_this_machine_lacks_is_refused_by_name(vec_env: str, device: Any, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        envs.make_vec_env("TMaze-v0", 1, vec_env=vec_env, device=device)
    assert str(error.value).startswith(message), str(error.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_names_what_is_available() -> None:
    for device in ("cuda", "cuda:7", torch.device("cuda")):
        with pytest.raises(ConfigError, match="CUDA is not available on this machine; expected cpu, or auto"):
            envs.make_vec_env("TMaze-v0", 1, vec_env="torch", device=device)


def test_devices_this_machine_has_are_taken() -> None:
    for device in ("auto", "cpu", torch.device("cpu")):
        venv = envs.make_vec_env("TMaze-v0", 2, 0, vec_env="torch", device=device, length=3)
        assert venv.reset().device.type == ("cuda" if device == "auto" and torch.cuda.is_available() else "cpu")
        venv.close()


def test_a_copy_that_fails_in_a_subprocess_is_named_here() -> None:
    """SubprocVecEnv would report a copy failing in its process as a broken pipe; one copy is built here first."""
    with pytest.raises(ConfigError, match=r"^env='MiniGrid-MemoryS7-v0' with env_kwargs obs='x' does not build "
                                          r"\(ValueError: obs must be one of"):
        envs.make_vec_env("MiniGrid-MemoryS7-v0", 2, vec_env="subproc", obs="x")


def test_a_gymnasium_id_without_a_time_limit_is_refused_unless_given_one() -> None:
    message = (r"^env='CliffWalking-v1' has no time limit .* set one with env_kwargs max_episode_steps=N "
               r"\(--env-kwargs max_episode_steps=N\) or a gymnasium.wrappers.TimeLimit env_wrapper$")
    with pytest.raises(ConfigError, match=message):
        envs.make_vec_env("CliffWalking-v1", 2, 0)
    with pytest.raises(ConfigError, match=message):
        check_time_limit("CliffWalking-v1", SeededDummyVecEnv([lambda: gym.make("CliffWalking-v1")] * 2))
    check_time_limit("CliffWalking-v1", envs.make_vec_env("CliffWalking-v1", 2, 0, max_episode_steps=50))
    wrapped = envs.make_vec_env("CliffWalking-v1", 1, env_wrapper={"gymnasium.wrappers.TimeLimit":
                                                                   {"max_episode_steps": 9}})
    check_time_limit("CliffWalking-v1", wrapped)
    for env_id in ("CartPole-v1", "TMaze-v0", "MiniGrid-MemoryS7-v0", "popgym-RepeatPreviousEasy-v0"):
        check_time_limit(env_id, envs.make_vec_env(env_id, 1, 0))  # registered with one, or ending by themselves


@pytest.mark.parametrize("env_id", ["CliffWalking-v1", "CliffWalkingSlippery-v1"])
def test_training_an_env_without_a_time_limit_is_refused_before_it_starts(env_id: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Not after the training, when its final evaluation would never end: exit 2, one line, no run directory."""
    assert train_rl.main(["--env", env_id, "--log-dir", str(tmp_path / "runs"), *SMALL]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"error: env='{env_id}' has no time limit" in error, error
    assert "--env-kwargs max_episode_steps=N" in error
    assert not (tmp_path / "runs").exists()


def test_an_env_without_a_time_limit_whose_episodes_end_under_every_repeated_action_trains(tmp_path: Path) -> None:
    """Blackjack has no time limit, but every hand ends whatever is played: no action repeated plays for ever, as
    CliffWalking's first action (up, into the wall) does."""
    flat = "envs.adapters.FlatObservation"
    check_time_limit("Blackjack-v1", envs.make_vec_env("Blackjack-v1", 2, 0, env_wrapper=flat))
    with pytest.raises(ConfigError, match=r"not shown to end \(repeating action 0 ended no episode within 1,000 "):
        check_time_limit("CliffWalking-v1", envs.make_vec_env("CliffWalking-v1", 2, 0))
    argv = ["--env", "Blackjack-v1", "--env-wrapper", flat, "--log-dir", str(tmp_path), *SMALL]
    assert train_rl.main(argv) == 0
    assert len(list(tmp_path.glob("*/summary.json"))) == 1


def test_with_a_time_limit_it_trains_and_is_evaluated(tmp_path: Path) -> None:
    argv = ["--env", "CliffWalking-v1", "--env-kwargs", "max_episode_steps=20", "--log-dir", str(tmp_path), *SMALL]
    assert train_rl.main(argv) == 0
    assert len(list(tmp_path.glob("*/summary.json"))) == 1


def test_a_babyai_id_is_known_in_a_fresh_process_and_refused_for_its_mission_until_a_wrapper_encodes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MiniGrid registers the BabyAI-* ids too: they are imported for, not "unknown" (the id itself suggested)."""
    fresh = subprocess.run([sys.executable, "-c", "import envs; print(envs.env_family('BabyAI-GoToRedBall-v0'))"],
                           cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "gymnasium"
    assert train_rl.main(["--env", "BabyAI-GoToRedBall-v0", "--log-dir", str(tmp_path / "runs"), *SMALL]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "its observation 'mission' MissionSpace" in error
    assert "minigrid.wrappers.FlatObsWrapper encodes it" in error and not (tmp_path / "runs").exists()
    env = envs.make_vec_env("BabyAI-GoToRedBall-v0", 1, 0, env_wrapper="minigrid.wrappers.FlatObsWrapper")
    assert env.observation_space.shape is not None and len(env.observation_space.shape) == 1


class Sized(gym.Env):
    """An env whose int keyword `size` must be an int, as `range` needs."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, size: int = 3) -> None:
        self.cells = range(size)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        return 0, 0.0, True, False, {}


gym.register("SizedInt-v0", entry_point=Sized, max_episode_steps=5)


@pytest.mark.parametrize("value", [4.0, np.float32(4.0), np.int64(4)])
def test_a_whole_number_for_an_int_keyword_reaches_the_env_as_that_int(value: Any) -> None:
    env = envs.make_env("SizedInt-v0", size=value)
    venv = envs.make_vec_env("SizedInt-v0", n_envs=1, size=value)
    try:
        assert env.unwrapped.cells == venv.get_attr("cells")[0] == range(4)
    finally:
        env.close()
        venv.close()


def test_a_number_for_an_unannotated_int_keyword_and_no_time_limit_reach_the_env_as_gymnasium_takes_them() -> None:
    """An int default is no type (MountainCar's `goal_velocity=0` takes 0.1, as `gymnasium.make` does), and a null
    `max_episode_steps` is the registered limit."""
    car = envs.make_env("MountainCar-v0", goal_velocity=0.1)
    pole = envs.make_vec_env("CartPole-v1", 1, max_episode_steps=None)
    try:
        assert car.unwrapped.goal_velocity == 0.1 and pole.envs[0].spec.max_episode_steps == 500
    finally:
        car.close()
        pole.close()
    assert "see_through_walls" not in envs.env_kwargs("MiniGrid-MemoryS7-v0")  # the Memory task sets it itself
    assert "see_through_walls" in envs.env_kwargs("MiniGrid-DoorKey-5x5-v0")


def test_a_whole_number_for_an_int_keyword_trains_from_the_command_line(tmp_path: Path) -> None:
    assert train_rl.main(["train", "--env", "TMaze-v0", "--env-kwargs", "length=3.0", *SMALL,
                          "--log-dir", str(tmp_path)]) == 0
    assert train_rl.main(["train", "--env", "TMaze-v0", "--env-kwargs", "length=03", *SMALL,  # as -p seed=03 reads
                          "--log-dir", str(tmp_path / "zero")]) == 0
    assert train_rl.main(["train", "--env", "TMaze-v0", "--env-kwargs", "length=3.5", *SMALL,
                          "--log-dir", str(tmp_path / "refused")]) == 2
    assert not (tmp_path / "refused").exists()
