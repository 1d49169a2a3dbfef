"""An environment that breaks gymnasium's API (observations of another shape, the old four-tuple `step`, a `reset`
without info, a reward that is no real number, a `terminated` that is no bool, `reset` or `step` raising) is
refused in one line before a run directory exists; a break that shows only later (at an episode's end, after some
steps) ends training with one line naming the env, the step and the break, also from Python; the Python API
refuses such an env, and a space no memory policy takes, with a `ConfigError` before SB3 sees it; a folder path
starting with `~`, which no shell expands there, is refused rather than made as a folder named `~`."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

import train_rl
from agents import VMPO, MemoryPPO
from envs import make_vec_env
from envs.conformance import EnvBreakError, api_problem, step_problem
from envs.rules import ConfigError

MODULE = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces

    class Good(gym.Env):
        observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = spaces.Discrete(2)

        def _obs(self):
            return np.zeros(3, np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            return self._obs(), 0.0, self.t >= 5, False, {}

    class WrongShape(Good):
        def _obs(self):
            return np.zeros(5, np.float32)

    class ResetRaises(Good):
        def reset(self, *, seed=None, options=None):
            raise RuntimeError("no reset today")

    class ResetWithoutInfo(Good):
        def reset(self, *, seed=None, options=None):
            return self._obs()

    class FourTupleStep(Good):
        def step(self, action):
            return self._obs(), 0.0, True, {}

    class StepRaises(Good):
        def step(self, action):
            raise RuntimeError("no step today")

    class ArrayReward(Good):
        def step(self, action):
            obs, _, terminated, truncated, info = super().step(action)
            return obs, np.array([1.0]), terminated, truncated, info

    class TextTerminated(Good):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, "yes" if terminated else "no", truncated, info

    class TextSuccess(Good):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated, truncated, {"is_success": "yes"} if terminated else info

    class LateArrayReward(Good):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, np.ones(2) if self.t == 3 else reward, terminated, truncated, info

    class EpisodeCount(Good):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated, truncated, {"episode": self.t}

    class StepRaisesLater(Good):
        def step(self, action):
            if self.t == 3:
                raise KeyError("lost the goal")
            return super().step(action)

    class FailsAfterACheckpoint(Good):
        steps = 0  # over every copy and episode

        def step(self, action):
            FailsAfterACheckpoint.steps += 1
            if FailsAfterACheckpoint.steps > 100:
                raise RuntimeError("the simulator died")
            return super().step(action)

    class UnboundedActions(Good):
        action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)

    class TupleObservations(Good):
        observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))

        def _obs(self):
            return (0, 0)

    if "conformance_envs-Good" not in gym.registry:  # the folder name of the entry point conformance_envs:Good
        gym.register("conformance_envs-Good", entry_point=Good)
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "conformance_envs.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("conformance_envs", None)


@pytest.mark.parametrize(("name", "expected"), [
    ("WrongShape", "reset's observation has shape (5,), its space (3,)"),
    ("ResetRaises", "reset raised RuntimeError: no reset today"),
    ("ResetWithoutInfo", "reset returned no (observation, info) pair"),
    ("FourTupleStep", "step returned 4 values"),
    ("StepRaises", "step raised RuntimeError: no step today"),
    ("ArrayReward", "step's reward is an array of shape (1,) (ndarray); expected a real number"),
    ("TextTerminated", "step's terminated is 'no' (str); expected a bool"),
    ("EpisodeCount", "step's info['episode'] is 1 (int); SB3 reads a finished episode's statistics there"),
])
def test_an_env_that_breaks_the_api_is_refused_before_the_run_exists(user_module, tmp_path, capsys, name, expected):
    log_dir = tmp_path / "runs"
    code = train_rl.main(["--env", f"conformance_envs:{name}", "-n", "64", "--n-envs", "2", "--backbone", "mlp",
                          "--log-dir", str(log_dir)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"env='conformance_envs:{name}': breaks gymnasium's API: {expected}" in err, err
    assert not log_dir.exists()


@pytest.mark.parametrize(("name", "expected"), [
    ("TextSuccess", "breaks gymnasium's API at step 5 of an episode: step's info['is_success'] is 'yes' (str); "
                    "expected a bool"),
    ("LateArrayReward", "breaks gymnasium's API at step 3 of an episode: step's reward is an array of shape (2,)"),
    ("StepRaisesLater", "failed at step 4 of an episode: step raised KeyError: 'lost the goal'"),
])
def test_a_break_during_training_ends_it_in_one_line(user_module, tmp_path, capsys, name, expected):
    code = train_rl.main(["--env", f"conformance_envs:{name}", "-n", "64", "--n-envs", "2", "--backbone", "mlp",
                          "--log-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"error: env='conformance_envs:{name}' {expected}" in err, err
    assert "no checkpoint was saved before it" in err, err
    assert (tmp_path / "runs" / f"conformance_envs-{name}__ppo-mlp__0" / "config.yaml").is_file()  # the run stays


def test_a_break_after_a_checkpoint_keeps_the_run_and_its_checkpoint(user_module, tmp_path, capsys):
    """The run directory of a new run that an env ends after it trained keeps its checkpoints, which the message
    names and `--resume` continues from (mutation caught: the directory removed as a refused run's)."""
    argv = ["--env", "conformance_envs:FailsAfterACheckpoint", "-n", "256", "--n-envs", "2", "--backbone", "mlp",
            "--checkpoint-freq", "64", "--eval-freq", "0", "-p", "ppo.n_steps=32", "ppo.batch_size=64",
            "--log-dir", str(tmp_path / "runs")]
    assert train_rl.main(argv) == 2
    err = capsys.readouterr().err
    run = tmp_path / "runs" / "conformance_envs-FailsAfterACheckpoint__ppo-mlp__0"
    assert f"the last checkpoint before it is '{run}/checkpoints/model_64_steps.zip' (step 64)" in err, err
    assert (run / "checkpoints" / "model_64_steps.zip").is_file()


def test_a_copy_whose_process_ends_ends_training_in_one_line(user_module, tmp_path, capfd):
    """With `--vec-env subproc`, a copy's env that raises ends its process with the error's one line, and training
    then ends with exit 2 and one line of its own, not tracebacks of the copy and of a broken pipe; the run stays."""
    code = train_rl.main(["--env", "conformance_envs:StepRaisesLater", "-n", "64", "--n-envs", "2", "--backbone",
                          "mlp", "--vec-env", "subproc", "--log-dir", str(tmp_path / "runs")])
    err = capfd.readouterr().err
    *copies, last = err.strip().splitlines()
    assert code == 2 and last.startswith("error: vec_env='subproc': a copy's process ended in a step"), err
    assert "Traceback" not in err and copies and all(
        line == "error: env='conformance_envs:StepRaisesLater' failed at step 4 of an episode: step raised KeyError: "
                "'lost the goal'" for line in copies), err
    assert (tmp_path / "runs" / "conformance_envs-StepRaisesLater__ppo-mlp__0" / "config.yaml").is_file()


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_the_python_api_names_a_break_during_learning(user_module, learner) -> None:
    import conformance_envs

    model = learner("MemoryPolicy", conformance_envs.StepRaisesLater(), n_steps=16, batch_size=16, seed=0,
                    policy_kwargs={"backbone": "mlp"})
    with pytest.raises(EnvBreakError, match=r"^env='StepRaisesLater' failed at step 4 of an episode: step raised "
                                            r"KeyError") as raised:
        model.learn(16)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value.__cause__, KeyError)


@pytest.mark.parametrize("result", [
    (np.zeros(3, np.float32), np.float32(0.5), np.bool_(False), np.bool_(True), {}),
    (np.zeros(3, np.float32), 1, 0, 1, {"is_success": np.bool_(True)}),
    (np.zeros(3, np.float32), np.array(2.0), False, False, {"is_success": 1.0}),
    (np.zeros(3, np.float32), 0.0, True, False, {"is_success": None}),
    (np.zeros(3, np.float32), 0.0, True, False, {"episode": {"r": np.float32(1.0), "l": 5, "t": 0.1}}),
])
def test_numpy_scalars_and_zero_or_one_flags_keep_the_api(result) -> None:
    assert step_problem(spaces.Box(-1.0, 1.0, (3,), np.float32), result) is None


@pytest.mark.parametrize("wrapped", [False, True])
def test_the_copies_of_a_users_dummy_vec_env_are_checked_at_every_step(user_module, wrapped) -> None:
    """A `DummyVecEnv` the user builds (under a `VecEnvWrapper` too) has each copy checked as an env object is
    (mutation caught: a reward array in a copy's fourth step ended in numpy's `setting an array element with a
    sequence`, naming no env)."""
    import conformance_envs

    env = DummyVecEnv([conformance_envs.LateArrayReward] * 2)
    model = MemoryPPO("MemoryPolicy", VecNormalize(env) if wrapped else env, n_steps=16, batch_size=32, seed=0,
                      policy_kwargs={"backbone": "mlp"})
    with pytest.raises(EnvBreakError, match=r"^env='LateArrayReward' breaks gymnasium's API at step 3 of an episode: "
                                            r"step's reward is an array of shape \(2,\)"):
        model.learn(32)


def test_a_conforming_env_has_no_problem(user_module):
    import conformance_envs

    assert api_problem(conformance_envs.Good(), seed=0) is None


def test_dict_observations_are_checked_key_by_key() -> None:
    class DictEnv(gym.Env):
        observation_space = spaces.Dict({"a": spaces.Box(0, 1, (2,)), "b": spaces.Discrete(3)})
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return {"a": np.zeros(2, np.float32)}, {}

    assert api_problem(DictEnv()) == "reset's observation is ['a'], the space's keys are ['a', 'b']"


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_the_python_api_refuses_a_space_no_memory_policy_takes(user_module, learner) -> None:
    import conformance_envs

    with pytest.raises(ConfigError, match=r"^env: its action space Box\(-inf, inf"):
        learner("MemoryPolicy", conformance_envs.UnboundedActions())
    with pytest.raises(ConfigError, match=r"^env: its action space Box\(-inf, inf"):
        learner("MemoryPolicy", make_vec_env("conformance_envs:UnboundedActions", 2, seed=0))
    with pytest.raises(ConfigError, match=r"^env='conformance_envs:TupleObservations': its observation space Tuple"):
        learner("MemoryPolicy", "conformance_envs:TupleObservations")  # an env given by its spec is named by it


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
@pytest.mark.parametrize("given", ["id", "object"])
def test_the_python_api_refuses_an_env_that_breaks_the_api(user_module, learner, given) -> None:
    import conformance_envs

    env, named = (("conformance_envs:FourTupleStep", "env='conformance_envs:FourTupleStep'") if given == "id" else
                  (conformance_envs.FourTupleStep(), "env"))
    with pytest.raises(ConfigError, match=rf"^{named}: breaks gymnasium's API: step returned 4 values"):
        learner("MemoryPolicy", env, seed=0)


def test_two_env_specs_of_one_folder_name_are_named_as_such(user_module, tmp_path, capsys):
    """A run of `conformance_envs:Good` where `conformance_envs-Good` would put its run: refused naming both specs,
    not asking for --resume, which the other env would refuse; in a study, the two tasks are named."""
    tiny = ["-n", "64", "--n-envs", "2", "--backbone", "mlp", "--log-dir", str(tmp_path / "runs")]
    assert train_rl.main(["--env", "conformance_envs:Good", *tiny]) == 0
    capsys.readouterr()
    assert train_rl.main(["--env", "conformance_envs-Good", "--gym-packages", "conformance_envs", *tiny]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: run directory '{tmp_path / 'runs' / 'conformance_envs-Good__ppo-mlp__0'}' holds a run of "
        "env='conformance_envs:Good', whose folder name env='conformance_envs-Good' gives too; choose another "
        "--log-dir (a run directory is never overwritten)")
    study = tmp_path / "two.yaml"
    study.write_text("tasks:\n  - {env: 'conformance_envs:Good'}\n  - {env: conformance_envs-Good}\n"
                     "backbones: [mlp]\nseeds: [0]\nsettings: {total_timesteps: 64, n_envs: 2}\n"
                     "gym_packages: [conformance_envs]\n")
    assert train_rl.main(["study", str(study), "--log-dir", str(tmp_path / "studies")]) == 2
    assert ("the env specs 'conformance_envs-Good', 'conformance_envs:Good' give one folder name"
            in capsys.readouterr().err)


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_a_bad_seed_is_named_before_the_env_is_probed(learner) -> None:
    with pytest.raises(ConfigError, match=r"^seed='a': expected an integer in \[0, 4294967295\]"):
        learner("MemoryPolicy", "CartPole-v1", seed="a")


@pytest.mark.parametrize("path", ["~/runs", "~user/runs", "~"])
def test_a_folder_starting_with_a_tilde_is_refused_not_made(tmp_path, monkeypatch, capsys, path) -> None:
    monkeypatch.chdir(tmp_path)
    code = train_rl.main(["-n", "64", "--log-dir", path])
    err = capsys.readouterr().err
    assert code == 2 and f"log_dir='{path}': '~' is not expanded here" in err, err
    assert not (Path(tmp_path) / "~").exists() and not any(tmp_path.iterdir())
