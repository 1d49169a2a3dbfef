"""A user's environment reaches every command: a registered gymnasium id (``--gym-packages``), an entry point
``module:Class`` or ``module:make_fn``, wrappers from the command line or a config, every observation and action
space SB3 supports, SubprocVecEnv; and a bad env spec exits 2 with one line, with nothing created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

import envs
import train_rl
from envs.wrappers import MaskVelocity, parse_env_wrapper
from experiments.config import RunConfig

REPO = Path(__file__).resolve().parents[1]
USER_MODULE = textwrap.dedent('''
    """A user's POMDPs: the cue of the first step must be answered at the last, through any space."""
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces

    OBSERVATIONS = {
        "box": lambda n: spaces.Box(0.0, 1.0, (3,), np.float32),
        "image": lambda n: spaces.Box(0, 255, (36, 36, 3), np.uint8),
        "dict": lambda n: spaces.Dict({"cue": spaces.Box(0.0, 1.0, (2,), np.float32), "clock": spaces.Discrete(n + 1)}),
        "discrete": lambda n: spaces.Discrete(3),
        "multidiscrete": lambda n: spaces.MultiDiscrete([3, n + 1]),
        "multibinary": lambda n: spaces.MultiBinary(3),
        "scalar": lambda n: spaces.Box(0.0, 1.0, (), np.float32),
        "shifted": lambda n: spaces.Discrete(3, start=-1),
        "nested": lambda n: spaces.Dict({"inner": spaces.Dict({"cue": spaces.Discrete(3)}),
                                         "clock": spaces.Discrete(n + 2)}),
        "string": lambda n: spaces.Text(4),
        "tiny": lambda n: spaces.Box(0, 255, (7, 7, 3), np.uint8),
        "empty": lambda n: spaces.Box(0.0, 1.0, (0,), np.float32),
        "emptydict": lambda n: spaces.Dict({}),
    }
    ACTIONS = {"discrete": spaces.Discrete(2), "box": spaces.Box(-1.0, 1.0, (1,), np.float32),
               "multidiscrete": spaces.MultiDiscrete([2, 2]), "multibinary": spaces.MultiBinary(2),
               "shifted": spaces.Discrete(2, start=1), "unbounded": spaces.Box(-np.inf, np.inf, (1,), np.float32),
               "float16": spaces.Box(-1.0, 1.0, (1,), np.float16), "int8": spaces.Discrete(2, dtype=np.int8),
               "multidiscrete8": spaces.MultiDiscrete([2, 2], dtype=np.int8)}


    class Cue(gym.Env):
        """Step 0 shows cue c in {0, 1}; step ``length`` asks for it; the answer is rewarded 1 if it is c."""

        def __init__(self, length=3, obs="box", action="discrete"):
            self.length, self.obs, self.action = length, obs, action
            self.observation_space = OBSERVATIONS[obs](length)
            self.action_space = ACTIONS[action]

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t, self.cue = 0, int(self.np_random.integers(2))
            return self._observe(), {"cue": self.cue}

        def _observe(self):
            shown = self.cue + 1 if self.t == 0 else 0  # 0: nothing, 1 or 2: the cue
            if self.obs == "box":
                return np.array([shown == 1, shown == 2, self.t == self.length], np.float32)
            if self.obs == "image":
                image = np.zeros((36, 36, 3), np.uint8)
                image[..., 0], image[..., 1] = 255 * (shown == 1), 255 * (shown == 2)
                return image
            if self.obs == "dict":
                return {"cue": np.array([shown == 1, shown == 2], np.float32), "clock": self.t}
            if self.obs == "discrete":
                return shown
            if self.obs == "scalar":
                return np.array(shown / 2, np.float32)
            if self.obs == "shifted":
                return shown - 1
            if self.obs == "nested":
                return {"inner": {"cue": shown}, "clock": self.t}
            if self.obs == "multidiscrete":
                return np.array([shown, self.t])
            if self.obs == "emptydict":
                return {}
            if self.obs == "tiny":
                return np.full((7, 7, 3), 127 * shown, np.uint8)
            return np.array([shown == 1, shown == 2, self.t == self.length], np.int8)

        def _answer(self, action):
            if self.action == "box":
                return int(np.asarray(action).reshape(-1)[0] > 0)
            return int(np.asarray(action).reshape(-1)[0])

        def step(self, action):
            self.t += 1
            if self.t <= self.length:
                return self._observe(), 0.0, False, False, {}
            success = self._answer(action) == self.cue
            return self._observe(), float(success), True, False, {"is_success": success}


    def make_cue(length=3):
        return Cue(length)


    class TextCue(Cue):
        """Cue drawn as text, its only render mode."""

        metadata = {"render_modes": ["ansi"]}

        def __init__(self, length=3, render_mode=None):
            super().__init__(length)
            self.render_mode = render_mode

        def render(self):
            return f"step {self.t}, cue {self.cue}"


    class NaNCue(Cue):
        """Cue whose reward at step ``at`` is NaN."""

        def __init__(self, length=3, at=2):
            super().__init__(length)
            self.at = at

        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, float("nan") if self.t == self.at else reward, terminated, truncated, info


    class StrictCue(Cue):
        """Cue that asserts each action is in its action space, dtype included, as gymnasium's `contains` says."""

        def step(self, action):
            assert self.action_space.contains(action), f"{action!r} not in {self.action_space}"
            return super().step(action)


    class FarCue(Cue):
        """Cue whose float64 observations hold a value beyond float32's range."""

        observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float64)

        def _observe(self):
            return np.array([1e300, 0.0, 0.0])


    class NaNViewCue(Cue):
        """Cue whose observation at step 1 holds a NaN."""

        def _observe(self):
            observation = super()._observe()
            return np.full_like(observation, np.nan) if self.t == 1 else observation


    gym.register("UserCue-v0", entry_point=Cue, max_episode_steps=20)
''')
SMALL = ["--n-envs", "2", "--eval-freq", "0", "--n-eval-episodes", "2", "--checkpoint-freq", "0",
         "-p", "ppo.n_steps=8", "ppo.batch_size=16", "ppo.n_epochs=1", "ppo.segment_length=4", "n_eval_envs=2",
         "gtrxl.memory_length=4", "gtrxl.d_model=8", "gtrxl.n_heads=2"]
SPACES = [(obs, "discrete") for obs in ("box", "image", "dict", "discrete", "multidiscrete", "multibinary")] + [
    ("box", action) for action in ("box", "multidiscrete", "multibinary")]


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding the user's module ``user_pomdp.py``, which is imported from there."""
    (tmp_path / "user_pomdp.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("user_pomdp", None)
    for env_id in [i for i in gym.registry if i == "UserCue-v0"]:
        del gym.registry[env_id]


def engram(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``train_rl.py argv`` in a new process, run from ``cwd`` as a user runs it."""
    return subprocess.run([sys.executable, str(REPO / "train_rl.py"), *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_registered_id_trains_and_evaluates_from_the_command_line(user_dir: Path) -> None:
    trained = engram("--env", "UserCue-v0", "--gym-packages", "user_pomdp", "-n", "64", "--log-dir", "runs",
                     *SMALL, cwd=user_dir)
    assert trained.returncode == 0, trained.stderr
    run = user_dir / "runs" / "UserCue-v0__ppo-gtrxl__0"
    assert (run / "model.zip").is_file()
    assert yaml.safe_load((run / "config.yaml").read_text())["gym_packages"] == ["user_pomdp"]
    scored = engram("evaluate", str(run), "--episodes", "3", cwd=user_dir)  # the run's packages are imported again
    assert scored.returncode == 0, scored.stderr
    assert "3 episodes per policy" in scored.stdout


@pytest.mark.parametrize("spec", ["user_pomdp:Cue", "user_pomdp:make_cue", "user_pomdp:UserCue-v0"])
def test_entry_points_and_gymnasium_module_form_train(user_dir: Path, spec: str) -> None:
    assert train_rl.main(["--env", spec, "--env-kwargs", "length=2", "-n", "32", "--log-dir", "runs", *SMALL]) == 0
    summary = json.loads((user_dir / "runs" / f"{spec.replace(':', '-')}__ppo-gtrxl__0" / "summary.json").read_text())
    assert summary["env"] == spec and summary["env_steps"] == 32


@pytest.mark.slow  # long: run by make test-slow
def test_every_space_trains_evaluates_and_reports_through_a_study_file(user_dir: Path) -> None:
    tasks = [{"env": "user_pomdp:Cue", "env_kwargs": {"obs": obs, "action": action, "length": 2}}
             for obs, action in SPACES]
    tasks[1]["policy"] = {"features_extractor_kwargs": {"features_dim": 16}}  # the image's NatureCNN, made small
    study = {"name": "spaces", "settings": {"total_timesteps": 32, "n_envs": 2, "eval_freq": 16,
                                            "n_eval_episodes": 2, "n_eval_envs": 2, "checkpoint_freq": 0,
                                            "ppo": {"n_steps": 8, "batch_size": 16, "n_epochs": 1,
                                                    "segment_length": 4},
                                            "lstm": {"hidden_size": 8}},
             "tasks": tasks, "backbones": ["lstm"], "seeds": [0]}
    (user_dir / "spaces.yaml").write_text(yaml.safe_dump(study))
    ran = engram("study", "spaces.yaml", "--workers", "1", "--log-dir", "runs", "--reps", "20", cwd=user_dir)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = (user_dir / "runs" / "spaces" / "report.md").read_text()
    assert all(f"obs={obs}" in report for obs, _ in SPACES)
    summaries = sorted((user_dir / "runs" / "spaces").glob("*/*/summary.json"))
    assert len(summaries) == len(SPACES)
    image_run = next(path.parent for path in summaries if "obs_image" in str(path))
    scored = engram("evaluate", str(image_run), "--episodes", "2", "--stochastic", cwd=user_dir)
    assert scored.returncode == 0, scored.stderr


def test_a_wrapper_from_a_config_file_changes_what_the_policy_sees(tmp_path: Path) -> None:
    config = {"env": "CartPole-v1", "total_timesteps": 32,
              "env_wrapper": ["envs.wrappers.MaskVelocity", {"gymnasium.wrappers.TimeLimit": {"max_episode_steps": 7}}]}
    (tmp_path / "masked.yaml").write_text(yaml.safe_dump(config))
    assert train_rl.main(["--config", str(tmp_path / "masked.yaml"), "--log-dir", str(tmp_path), *SMALL]) == 0
    run = tmp_path / "CartPole-v1__ppo-gtrxl__0"
    from agents import MemoryPPO

    assert MemoryPPO.load(run / "model.zip").observation_space.shape == (2,)  # x and θ, no velocities
    assert json.loads((run / "summary.json").read_text())["final_mean_return"] <= 7  # the time limit held


def test_wrappers_given_as_one_list_argument_are_the_wrappers_of_separate_ones(tmp_path: Path) -> None:
    """rl-zoo3 writes `env_wrapper` as a list: the flag takes it in one argument too, in training and evaluation."""
    wrappers = "[envs.wrappers.MaskVelocity, {gymnasium.wrappers.TimeLimit: {max_episode_steps: 7}}]"
    assert train_rl.main(["--env", "CartPole-v1", "--env-wrapper", wrappers, "-n", "32", "--log-dir", str(tmp_path),
                          *SMALL]) == 0
    run = tmp_path / "CartPole-v1__ppo-gtrxl__0"
    assert yaml.safe_load((run / "config.yaml").read_text())["env_wrapper"] == [
        "envs.wrappers.MaskVelocity", {"gymnasium.wrappers.TimeLimit": {"max_episode_steps": 7}}]
    assert train_rl.main(["evaluate", str(run), "--episodes", "1", "--env-wrapper", wrappers]) == 0


def test_tune_searches_a_user_env(user_dir: Path) -> None:
    tuned = engram("tune", "--env", "UserCue-v0", "--gym-packages", "user_pomdp", "-n", "32", "--trials", "1",
                   "--tune-seeds", "1", "--log-dir", "runs", "--eval-freq", "16", "--n-eval-episodes", "2",
                   "--space", str(REPO / "configs" / "tune" / "ppo.yaml"),
                   "-p", "n_envs=2", "ppo.n_steps=8", "ppo.batch_size=16", "ppo.segment_length=4", "ppo.n_epochs=1",
                   "gtrxl.d_model=8", "n_eval_envs=2", cwd=user_dir)
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "1 trials (1 complete)" in tuned.stdout


def test_list_envs_shows_the_ids_a_package_registers(user_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train_rl.main(["list", "envs", "--gym-packages", "user_pomdp"]) == 0
    listed = capsys.readouterr().out
    assert "UserCue-v0" in listed and "gymnasium (user_pomdp)" in listed and "CartPole-v1" in listed


@pytest.mark.parametrize(("argv", "expected"), [
    (["--env", "CartPol-v1"], "env='CartPol-v1': Unknown env id 'CartPol-v1': gymnasium's registry does not hold it. "
                              "Did you mean CartPole-v1"),
    (["--env", "UserCue-v0"], "env='UserCue-v0': Unknown env id"),  # its module was not named
    (["--env", "no_such_module:Env"], "env='no_such_module:Env': module 'no_such_module' does not import "
                                      "(ModuleNotFoundError: No module named 'no_such_module')"),
    (["--env", "broken_module:Env"], "module 'broken_module' does not import (ZeroDivisionError: division by zero)"),
    (["--env", "user_pomdp:Nothing"], "module 'user_pomdp' has no attribute 'Nothing', and gymnasium's registry "
                                      "holds no id 'Nothing'"),
    (["--env", "collections:OrderedDict"], "'collections:OrderedDict' is the class OrderedDict, which is not a "
                                           "gymnasium.Env subclass"),
    (["--env", "user_pomdp:OBSERVATIONS"], "'user_pomdp:OBSERVATIONS' is a dict, not an env class or a function"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "lenght=3"], "user_pomdp:Cue got unexpected keyword argument(s) "
                                                               "'lenght' (did you mean 'length'?)"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "length=abc"], "env_kwargs.length='abc': expected a number"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=text"], "env='user_pomdp:Cue' with env_kwargs obs='text' does "
                                                               "not build (KeyError: 'text')"),
    (["--gym-packages", "no_such_package"], "gym_packages=['no_such_package']: module 'no_such_package' does not "
                                            "import (ModuleNotFoundError"),
    (["--env-wrapper", "no_such.Wrapper"], "env_wrapper 'no_such.Wrapper': module 'no_such' does not import"),
    (["--env-wrapper", "envs.wrappers.Nothing"], "env_wrapper 'envs.wrappers.Nothing': module 'envs.wrappers' has "
                                                 "no attribute 'Nothing'"),
    (["--env-wrapper", "envs.wrappers.MaskVelocity"],
     "env_wrapper 'envs.wrappers.MaskVelocity' fails on engram/TMaze-v0 (ValueError: MaskVelocity knows"),
    (["--env-wrapper", "{a: 1, b: 2}"], "env_wrapper=[{'a': 1, 'b': 2}]: env_wrapper entry {'a': 1, 'b': 2}"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=text", "--env-wrapper", "[1]"], "env_wrapper=[1]: "),
    (["--env", "CartPole"], "env='CartPole': Unknown env id 'CartPole': gymnasium's registry does not hold it "
                            "without a version, only as CartPole-v0, CartPole-v1: name one"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=scalar"],
     "env='user_pomdp:Cue': its observation space Box(0.0, 1.0, (), float32) has shape (), which SB3 cannot flatten; "
     "flatten it with env_wrapper: envs.adapters.FlatObservation"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=shifted"], "Discrete(3, start=-1) starts at -1, and SB3 one-hot"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=nested"], "its observation 'inner' Dict('cue': Discrete(3)) is "
                                                                 "a Dict inside a Dict"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=string"], "is not one SB3 takes (Box, Discrete, MultiDiscrete"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=tiny"], "does not fit the features extractor NatureCNN"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=empty"], "has shape (0,), holding no value to observe; "
                                                                "expected at least one"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "obs=emptydict"], "env='user_pomdp:Cue': its observation space "
                                                                    "Dict() holds no value to observe"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "action=shifted"],
     "its action space Discrete(2, start=1) starts at 1, and the policy's actions start at 0"),
    (["--env", "user_pomdp:Cue", "--env-kwargs", "action=unbounded"], "has an unbounded low or high"),
])
def test_a_bad_env_spec_exits_2_with_one_line_and_creates_nothing(user_dir: Path, argv: list[str], expected: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (user_dir / "broken_module.py").write_text("1 / 0\n")
    assert train_rl.main([*argv, "-n", "32", "--log-dir", "runs", *SMALL]) == 2
    error = capsys.readouterr().err
    assert expected in error, error
    assert error.count("\n") == 1 and "Traceback" not in error
    assert not (user_dir / "runs").exists()


@pytest.mark.parametrize("command", [["study", "study.yaml"], ["tune", "--space", str(REPO / "configs/tune/ppo.yaml")],
                                     ["train"]])
def test_every_command_refuses_a_bad_spec_before_creating_anything(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"tasks": [{"env": "TMaze-v0"}, {"env": "CartPol-v1"}]}))
    options = ["--log-dir", "runs"] + (["--env", "CartPol-v1"] if command[0] != "study" else [])
    refused = engram(*command, *options, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "Unknown env id 'CartPol-v1'" in refused.stderr and "Traceback" not in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_evaluate_on_another_env_is_checked_against_the_model(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert train_rl.main(["--env", "CartPole-v1", "--env-wrapper", "envs.wrappers.MaskVelocity", "-n", "32",
                          "--log-dir", str(tmp_path), *SMALL]) == 0
    run = str(tmp_path / "CartPole-v1__ppo-gtrxl__0")
    capsys.readouterr()
    assert train_rl.main(["evaluate", run, "--env", "CartPol-v1"]) == 2
    assert "Unknown env id 'CartPol-v1'" in capsys.readouterr().err
    assert train_rl.main(["evaluate", run, "--env-wrapper"]) == 2  # without the mask: four numbers, not two
    assert "does not fit the model" in capsys.readouterr().err
    assert train_rl.main(["evaluate", run, "--episodes", "2", "--env", "CartPole-v1"]) == 0  # masked as the run was


def test_engram_tasks_with_wrappers_or_subprocesses_run_as_single_copies() -> None:
    batched = envs.make_vec_env("TMaze-v0", 3, seed=4, length=3)
    single = envs.make_vec_env("TMaze-v0", 3, seed=4, length=3,
                               env_wrapper="gymnasium.wrappers.RecordEpisodeStatistics")
    subproc = envs.make_vec_env("TMaze-v0", 3, seed=4, length=3, vec_env="subproc")
    try:
        assert type(batched.venv).__name__ == "BatchedVecEnv"
        assert type(single.venv).__name__ == "SeededDummyVecEnv"
        assert type(subproc.venv).__name__ == "SeededSubprocVecEnv"
        first = batched.reset()
        np.testing.assert_array_equal(single.reset(), first)  # the same copy seeds, whatever steps them
        np.testing.assert_array_equal(subproc.reset(), first)
    finally:
        subproc.close()


def test_parsed_wrappers_and_run_names() -> None:
    assert parse_env_wrapper(None) == []
    assert parse_env_wrapper("a.B") == [("a.B", {})]
    assert parse_env_wrapper(["a.B", {"c:D": {"k": 1}}]) == [("a.B", {}), ("c:D", {"k": 1})]
    config = RunConfig(env="my.pkg:Maze")
    assert config.run_name() == "my.pkg-Maze__ppo-gtrxl__0"
    masked = MaskVelocity(gym.make("Pendulum-v1"))
    assert masked.observation_space.shape == (2,) and masked.reset(seed=0)[0].shape == (2,)
    with pytest.raises(ValueError, match="MaskObservation with drop"):
        MaskVelocity(gym.make("FrozenLake-v1"))


def test_mask_velocity_knows_a_task_by_its_class_however_it_was_made() -> None:
    """A task built by hand or subclassed has no registered id; its class says which entries are velocities."""
    from gymnasium.envs.classic_control import AcrobotEnv, CartPoleEnv

    class Harder(CartPoleEnv):
        pass

    for env, kept in ((Harder(), [0, 2]), (CartPoleEnv(), [0, 2]), (AcrobotEnv(), [0, 1, 2, 3])):
        full, _ = env.reset(seed=0)
        masked = MaskVelocity(env)
        assert masked.keep.tolist() == kept and masked.observation(full).tolist() == full[kept].tolist()


def test_the_flattening_adapters_refuse_a_space_they_cannot_encode_by_name() -> None:
    from gymnasium import spaces

    from envs.adapters import FlatObservation, PreviousActionObservation

    class Spaces(gym.Env):
        def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
            self.observation_space, self.action_space = observation_space, action_space

    with pytest.raises(ValueError, match=r"^observation_space=Text\(.*no flat encoding.*valid spaces: Box"):
        FlatObservation(Spaces(spaces.Text(4), spaces.Discrete(2)))
    with pytest.raises(ValueError, match=r"^action_space=Text\(.*no flat encoding"):
        PreviousActionObservation(Spaces(spaces.Box(0, 1, (2,)), spaces.Text(4)))
    with pytest.raises(ValueError, match=r"^observation_space=Tuple\(Discrete\(2\)\): .*flatten it first"):
        PreviousActionObservation(Spaces(spaces.Tuple([spaces.Discrete(2)]), spaces.Discrete(2)))
    flat = PreviousActionObservation(FlatObservation(Spaces(spaces.Tuple([spaces.Discrete(2)]), spaces.Discrete(3))))
    assert flat.observation_space.shape == (2 + 3 + 1,)


@pytest.mark.parametrize("obs", ["scalar", "shifted", "nested"])
def test_flat_observation_adapts_the_observations_sb3_refuses(user_dir: Path, obs: str) -> None:
    """The remedy the refusal names works: the same env trains through `envs.adapters.FlatObservation`."""
    assert train_rl.main(["--env", "user_pomdp:Cue", "--env-kwargs", f"obs={obs}", "--env-wrapper",
                          "envs.adapters.FlatObservation", "-n", "32", "--log-dir", "runs", *SMALL]) == 0


def test_the_python_api_refuses_the_same_spaces_by_name(user_dir: Path) -> None:
    from agents import MemoryPPO

    user = __import__("user_pomdp")
    with pytest.raises(ValueError, match=r"its action space Discrete\(2, start=1\) starts at 1"):
        MemoryPPO("MemoryPolicy", user.Cue(action="shifted"))
    with pytest.raises(ValueError, match=r"its observation space Box\(0.0, 1.0, \(\), float32\) has shape \(\)"):
        MemoryPPO("MemoryPolicy", user.Cue(obs="scalar"))


def test_an_env_that_cannot_render_is_refused_before_scoring(user_dir: Path) -> None:
    """`evaluate --record` on an env whose constructor takes no `render_mode`: exit 2 and one line naming the env,
    before any episode is scored or any result written."""
    assert train_rl.main(["--env", "user_pomdp:Cue", "-n", "32", "--log-dir", "runs", *SMALL]) == 0
    run = user_dir / "runs" / "user_pomdp-Cue__ppo-gtrxl__0"
    refused = engram("evaluate", str(run), "--record", str(user_dir / "cue.gif"), cwd=user_dir)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("error: --record: env='user_pomdp:Cue' cannot render in 'rgb_array' mode")
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert not list(run.glob("evaluate_*.json")) and not (user_dir / "cue.gif").exists()


def test_render_shows_an_env_that_draws_only_text_and_refuses_one_that_draws_nothing(user_dir: Path,
                                                                                    capsys: pytest.CaptureFixture[str]
                                                                                    ) -> None:
    """`evaluate --render` shows an env in a render mode it lists: its text where it draws no window; an env that
    lists neither is refused with exit 2 and one line naming --render and the env's render modes."""
    for spec in ("user_pomdp:TextCue", "user_pomdp:Cue"):
        assert train_rl.main(["--env", spec, "-n", "32", "--log-dir", "runs", *SMALL]) == 0
    capsys.readouterr()
    shown = train_rl.main(["evaluate", "runs/user_pomdp-TextCue__ppo-gtrxl__0", "--episodes", "1", "--render",
                           "--fps", "1000"])
    out = capsys.readouterr().out
    assert shown == 0 and "step 0, cue " in out and "step 4, cue " in out, out
    refused = train_rl.main(["evaluate", "runs/user_pomdp-Cue__ppo-gtrxl__0", "--episodes", "1", "--render"])
    error = capsys.readouterr().err
    assert refused == 2 and error.count("\n") == 1, error
    assert error == ("error: --render: env='user_pomdp:Cue' has the render modes (none); expected one of human, ansi "
                     "(--record records rgb_array)\n")


def test_a_nan_reward_is_named_as_the_envs_not_as_a_non_finite_loss(user_dir: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert train_rl.main(["--env", "user_pomdp:NaNCue", "-n", "32", "--log-dir", "runs", *SMALL]) == 3
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "non-finite loss" not in error, error
    assert error.startswith("training stopped: non-finite reward (nan) from the env at timestep 4 (envs [0, 1]): "
                            "fix the env, or wrap it to clean its rewards"), error


@pytest.mark.parametrize("action", ["float16", "int8", "multidiscrete8"])
def test_actions_reach_the_env_in_the_dtype_of_its_action_space(user_dir: Path, action: str) -> None:
    """A float16 Box or an int8 Discrete holds only actions of its dtype (gymnasium's `contains`): training,
    `predict` and the evaluation send them so."""
    from agents import MemoryPPO

    assert train_rl.main(["--env", "user_pomdp:StrictCue", "--env-kwargs", f"action={action}", "-n", "32",
                          "--log-dir", "runs", *SMALL]) == 0
    model = MemoryPPO.load(next((user_dir / "runs").iterdir()) / "model.zip")
    env = __import__("user_pomdp").StrictCue(action=action)
    actions, _ = model.predict(env.reset(seed=0)[0])
    assert actions.dtype == env.action_space.dtype and env.action_space.contains(actions)


def test_observations_float32_cannot_hold_stop_training_in_one_line(user_dir: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert train_rl.main(["--env", "user_pomdp:FarCue", "-n", "32", "--log-dir", "runs", *SMALL]) == 3
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("training stopped: non-finite observation from the env at "
                                                       "timestep 0"), error
    assert "or a value float32 cannot hold" in error


def test_a_nan_observation_in_an_evaluation_or_a_replay_is_named_as_the_envs_in_one_line(
        user_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train_rl.main(["--env", "user_pomdp:Cue", "-n", "32", "--log-dir", "runs", *SMALL]) == 0
    run = str(user_dir / "runs" / "user_pomdp-Cue__ppo-gtrxl__0")
    capsys.readouterr()
    for command, begins in ((["evaluate", run, "--episodes", "2"], "error: evaluation: the env's observation"),
                            (["inspect", run, "--episodes", "1", "--out", "maps"], "error: the env's observation")):
        assert train_rl.main([*command, "--env", "user_pomdp:NaNViewCue"]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.startswith(begins) and "holds a NaN" in error, error
    assert not (user_dir / "maps").exists()


def test_toy_text_envs_get_their_actions_as_ints_when_played(tmp_path: Path) -> None:
    """FrozenLake indexes its transition table with the action: the single-copy loops of `evaluate --record` and
    `inspect` hand it a Python int, as SB3's DummyVecEnv does."""
    assert train_rl.main(["--env", "FrozenLake-v1", "-n", "32", "--log-dir", str(tmp_path), *SMALL]) == 0
    run = tmp_path / "FrozenLake-v1__ppo-gtrxl__0"
    recorded = engram("evaluate", str(run), "--episodes", "1", "--record", str(tmp_path / "lake.gif"), cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    inspected = engram("inspect", str(run), "--episodes", "1", "--max-steps", "4", cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stderr


def test_an_env_whose_episodes_never_end_stops_the_evaluation_with_one_line(user_dir: Path, monkeypatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """No time limit and no terminal state: the evaluation stops after `STALL_STEPS` steps of each copy with exit 2
    and one line naming the remedy, rather than running for ever."""
    import experiments.evaluation

    monkeypatch.setattr(experiments.evaluation, "STALL_STEPS", 20)
    assert train_rl.main(["--env", "user_pomdp:Cue", "--env-kwargs", "length=1000000000", "-n", "32",
                          "--log-dir", "runs", *SMALL]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no episode ended within 20 steps of each of 2 copies" in error, error


def test_make_vec_env_shows_the_reset_infos_as_sb3s_does(user_dir: Path) -> None:
    """SB3's `make_vec_env` shows what each copy's `reset` returned in `reset_infos`; so does engram's, through the
    episode monitor."""
    env = envs.make_vec_env("user_pomdp:Cue", 2, 0)
    env.reset()
    assert [sorted(info) for info in env.reset_infos] == [["cue"], ["cue"]]
