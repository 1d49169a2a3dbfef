"""The Python API refuses what the command line refuses, by the same rules and with the same one-line `ConfigError`:
`experiments.training.train` on a configuration made by hand, `make_backbone` and the attention and position
catalogues, the learners' `batch_size` against the rollout, a saved model loaded with an env of other spaces, and
the hyper-parameter entry named where an invalid value came from it."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv

from agents import ALGOS, VMPO, MemoryPPO, NonFiniteError
from envs import make_vec_env
from envs.rules import ConfigError
from experiments.config import RunConfig, build_config, reread
from experiments.evaluation import evaluate
from experiments.replay import load_agent
from experiments.studies.study import Grid, run_study
from experiments.training import train
from experiments.validation import validate
from lm.workbench import build_lm_config, load_run, train_lm
from policies import ATTENTIONS, BACKBONES, POSITIONS, make_backbone

SMALL: dict[str, Any] = {"env": "TMaze-v0", "env_kwargs": {"length": 3}, "n_envs": 4, "n_eval_envs": 2,
                         "total_timesteps": 32, "eval_freq": 0, "checkpoint_freq": 0, "n_eval_episodes": 2,
                         "backbone": "mlp", "hyperparams": "none",
                         "options": {"ppo": {"n_steps": 16, "batch_size": 32, "segment_length": 4}}}
"""a small valid run made by hand (its ``log_dir`` is the test's)"""
LEARNER = {"n_steps": 16, "batch_size": 32, "segment_length": 4, "policy_kwargs": {"backbone": "mlp"}}
"""a small valid learner on two T-Maze copies (a rollout of 32 steps)"""


def small_config(tmp_path: Path, **changes: Any) -> RunConfig:
    return RunConfig(**{**SMALL, "log_dir": str(tmp_path / "runs"), **changes})


# -- train(RunConfig(...)): the command line's checks, before anything is made ------------------------------------

@pytest.mark.parametrize(("changes", "message"), [
    ({"n_envs": 0}, "n_envs=0: expected an integer >= 1"),
    ({"total_timesteps": -5}, "total_timesteps=-5: expected an integer >= 1"),
    ({"stop_when_solved": 2}, "stop_when_solved=2: expected 0 when eval_freq=0"),
    ({"backbone": "nope"}, "backbone='nope': expected one of trxl"),
    ({"options": {"ppo": {"gamma": 2.0}}}, "ppo.gamma=2.0: expected a number in [0, 1]"),
    ({"options": {"ppo": {"n_steps": 16, "batch_size": 256, "segment_length": 4}}},
     "ppo.batch_size=256: expected at most the rollout, ppo.n_steps=16 x n_envs=4 = 64 steps"),
    ({"options": {"ppo": {"bogus": 1}}}, "unknown option 'bogus' for ppo; valid options: learning_rate"),
    ({"options": {"bogus": {}}}, "options['bogus']: not a learner's or a backbone's name; valid names: ppo"),
    ({"options": {"ppo": 3}}, "'ppo' holds the options of ppo and must be a mapping, got 3"),
    ({"options": [1]}, "options=[1]: expected a mapping"),
    ({"policy": {"colour": 1}}, "unknown policy option 'colour'; valid options: net_arch"),
    ({"env_kwargs": None}, "env_kwargs=None: expected a mapping"),
    ({"env_kwargs": {"length": -1}}, "env_kwargs.length=-1: expected an integer >= 1"),
    ({"threads": -1}, "threads=-1: expected an integer >= 0"),
])
def test_train_refuses_a_hand_built_config_as_the_command_line_does(tmp_path, changes, message):
    config = small_config(tmp_path, **changes)
    with pytest.raises(ConfigError) as error:
        train(config)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("arguments", "message"), [
    ({"resume": "yes"}, "resume='yes': expected true or false"),
    ({"progress_bar": 1}, "progress_bar=1: expected true or false"),
    ({"verbose": 5}, "verbose=5: expected an integer in [0, 2]"),
    ({"extra_callback": print}, "extra_callback=<built-in function print>: expected an SB3 callback"),
])
def test_train_checks_its_other_arguments_before_anything_is_made(tmp_path, arguments, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        train(small_config(tmp_path), **arguments)
    assert not (tmp_path / "runs").exists()


def test_train_takes_no_other_object_than_a_run_config(tmp_path):
    with pytest.raises(ConfigError, match=r"^config=\{'env': 'TMaze-v0'\}: expected a RunConfig"):
        train({"env": "TMaze-v0"})  # type: ignore[arg-type]


def test_a_misspelt_setting_of_a_run_config_is_refused_not_ignored():
    config = RunConfig()
    with pytest.raises(ConfigError, match=r"^RunConfig.n_env: unknown setting 'n_env'; valid settings: algo, "):
        config.n_env = 4
    config.n_envs = 4
    assert config.n_envs == 4


def test_a_hand_built_config_holds_what_a_file_would():
    """Values a file writes as text (a schedule, a number) or numpy's numbers read as the file's would; the
    configuration made by hand is left as it was."""
    config = RunConfig(**{**SMALL, "n_envs": np.int64(4),
                          "options": {"ppo": {**SMALL["options"]["ppo"], "learning_rate": "lin_1e-3"}}})
    validate(config)
    read = reread(config)
    assert read.options["ppo"]["learning_rate"].start == 1e-3 and type(read.n_envs) is int
    assert config.options["ppo"]["learning_rate"] == "lin_1e-3"


# -- make_backbone and the catalogues: ConfigError naming the argument, the value and the choices ---------------

@pytest.mark.parametrize(("call", "parts"), [
    (lambda: make_backbone("gtrx", 4), ["name='gtrx'", "valid backbones: " + ", ".join(BACKBONES)]),
    (lambda: make_backbone(["gtrxl"], 4), ["name=['gtrxl']", "valid backbones: trxl"]),
    (lambda: make_backbone("gtrxl", 4, memory_len=8), ["memory_len=8", "'memory_len'", "valid options: d_model",
                                                       "memory_length"]),
    (lambda: make_backbone("lstm", 4, cell="gru"), ["cell='gru'", "fixed by backbone 'lstm' (cell='lstm')",
                                                    "valid options: hidden_size, n_layers"]),
    (lambda: make_backbone("gtrxl", 4, attention="local", attention_options={"window": 2}),
     ["attention_options={'window': 2}", "'window'", "valid options: local_window"]),
    (lambda: make_backbone("gtrxl", 4, position="rope", position_options={"base": 2}),
     ["position_options={'base': 2}", "'base'", "position 'rope'; valid options: none"]),
    (lambda: ATTENTIONS.build("nope", None, d_model=8, n_heads=2, d_head=4, max_distance=8),
     ["attention='nope'", "valid attentions: " + ", ".join(ATTENTIONS)]),
    (lambda: POSITIONS.options("nope"), ["position='nope'", "valid positions: " + ", ".join(POSITIONS)]),
])
def test_make_backbone_and_the_catalogues_refuse_with_a_config_error(call, parts):
    with pytest.raises(ConfigError) as error:
        call()
    assert all(part in str(error.value) for part in parts), str(error.value)


@pytest.mark.parametrize("registry", [ALGOS, BACKBONES, ATTENTIONS, POSITIONS], ids=lambda registry: registry.kind)
def test_a_registry_lookup_of_an_unknown_name_names_the_valid_ones(registry):
    with pytest.raises(KeyError) as error:  # a mapping's lookup, and a ConfigError as every bad name
        registry["nope"]
    assert isinstance(error.value, ConfigError)
    assert str(error.value) == (f"{registry.kind}='nope': unknown {registry.kind} 'nope'; valid {registry.kind}s: "
                                + ", ".join(registry))
    assert registry.get("nope") is None and "nope" not in registry


# -- batch_size at most the rollout: one rule, the same words in Python and on the command line ------------------

@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_a_learner_refuses_a_batch_larger_than_the_rollout_as_the_command_line_does(learner, tmp_path):
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    with pytest.raises(ConfigError) as error:
        learner("MemoryPolicy", env, **{**LEARNER, "batch_size": 64})
    assert str(error.value) == "batch_size=64: expected at most the rollout, n_steps=16 x n_envs=2 = 32 steps"
    algo = {MemoryPPO: "ppo", VMPO: "vmpo"}[learner]
    config = small_config(tmp_path, algo=algo, n_envs=2, options={algo: {**SMALL["options"]["ppo"], "batch_size": 64}})
    with pytest.raises(ConfigError) as cli:
        validate(config)
    assert str(cli.value) == f"{algo}.{error.value}".replace("n_steps=", f"{algo}.n_steps=")


def test_a_loaded_model_predicts_with_fewer_envs_and_refuses_to_learn_on_them(tmp_path):
    MemoryPPO("MemoryPolicy", make_vec_env("TMaze-v0", 2, 0, length=3), **LEARNER).save(tmp_path / "m.zip")
    one = make_vec_env("TMaze-v0", 1, 0, length=3)
    model = MemoryPPO.load(tmp_path / "m.zip", env=one)
    model.predict(one.reset())
    with pytest.raises(ConfigError, match=r"^batch_size=32: expected at most the rollout, n_steps=16 x n_envs=1 = 16"):
        model.learn(16)


# -- a saved model and an env of other spaces: refused at load, naming the space -------------------------------

class OtherActions(gym.Env):
    """T-Maze's observations with three actions instead of four."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(2, np.float32), 0.0, True, False, {}


@pytest.fixture
def saved(tmp_path) -> Path:
    path = tmp_path / "m.zip"
    MemoryPPO("MemoryPolicy", make_vec_env("TMaze-v0", 2, 0, length=3), **LEARNER).save(path)
    return path


@pytest.mark.parametrize(("env", "message"), [
    (lambda: make_vec_env("MemoryChain-v0", 2, 0), r"^env: its observation space Box\(-1.0, 1.0, \(3,\), float32\) "
                                                   r"is not the observation space the model '.*m.zip' was trained on, "
                                                   r"Box\(-1.0, 1.0, \(2,\), float32\)$"),
    (lambda: "MemoryChain-v0", r"^env: its observation space Box\(-1.0, 1.0, \(3,\)"),
    (lambda: OtherActions(), r"^env: its action space Discrete\(3\) is not the action space the model .* Discrete\("),
    (lambda: 3, r"^env=3: expected an env id, a gymnasium env or a VecEnv"),
])
def test_load_refuses_an_env_of_other_spaces_naming_the_space(saved, env, message):
    with pytest.raises(ConfigError, match=message):
        MemoryPPO.load(saved, env=env())


def test_load_takes_an_env_spec_as_the_constructor_does(saved):
    model = MemoryPPO.load(saved, env="TMaze-v0")
    assert model.n_envs == 1 and model.observation_space.shape == (2,)


@pytest.mark.parametrize("source", ["path", "file", "bytes"])
def test_load_checks_a_model_read_from_an_open_file_as_from_its_path(saved, source):
    """SB3's `load` takes an open binary file too: its options, env and contents are checked alike."""
    def opened() -> Any:
        return {"path": lambda: saved, "file": lambda: saved.open("rb"),
                "bytes": lambda: io.BytesIO(saved.read_bytes())}[source]()

    with pytest.raises(ConfigError, match=r"^clip_range=-1.0: expected a number > 0"):
        MemoryPPO.load(opened(), custom_objects={"clip_range": -1.0})
    with pytest.raises(ConfigError, match=r"^n_steps=-3: expected an integer >= 1"):
        MemoryPPO.load(opened(), n_steps=-3)
    with pytest.raises(ConfigError, match=r"^env: its observation space Box\(-1.0, 1.0, \(3,\)"):
        MemoryPPO.load(opened(), env="MemoryChain-v0")
    assert MemoryPPO.load(opened(), env="TMaze-v0").n_envs == 1
    with pytest.raises(ConfigError, match=r"^path='an open file': not a zip file"):
        MemoryPPO.load(io.BytesIO(b"not a model"))


def test_load_takes_the_schedules_rl_zoo_loads_with_and_checks_them_if_it_learns(saved):
    """rl-zoo3's `enjoy` loads with zero schedules (`custom_objects`), as RecurrentPPO allows: they only matter to
    `learn`, which refuses them there."""
    zoo = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    model = MemoryPPO.load(saved, env=make_vec_env("TMaze-v0", 2, 0, length=3), custom_objects=zoo, device="cpu:0")
    model.predict(model.env.reset())
    with pytest.raises(ConfigError, match=r"^clip_range=.*at every progress: the schedule gave 0.0"):
        model.learn(32)


def test_an_eval_callback_on_a_torch_vec_env_is_refused_by_learn():
    from stable_baselines3.common.callbacks import CallbackList, EvalCallback, EveryNTimesteps

    model = MemoryPPO("MemoryPolicy", make_vec_env("TMaze-v0", 2, 0, length=3), **LEARNER)
    on_device = make_vec_env("TMaze-v0", 2, 0, length=3, vec_env="torch")
    with pytest.raises(ConfigError, match=r"its EvalCallback's eval_env is a torch VecEnv"):
        model.learn(32, callback=CallbackList([EveryNTimesteps(8, EvalCallback(on_device))]))


def test_load_agent_checks_the_env_at_load(saved):
    with pytest.raises(ConfigError, match=r"env='MemoryChain-v0' does not fit the model .*m.zip.*Observation"):
        load_agent(saved, env="MemoryChain-v0")


# -- a value from a hyper-parameter entry is named with the entry, at every check --------------------------------

def entry_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "hp.yml"
    path.write_text("TMaze-v0:\n" + body)
    return str(path)


@pytest.mark.parametrize(("body", "flags", "message"), [
    ("  stop_when_solved: 2\n  eval_freq: 0\n", {}, "{where}: stop_when_solved=2: expected 0 when eval_freq=0"),
    ("  stop_when_solved: 2\n", {"eval_freq": 0}, "{where}: stop_when_solved=2: expected 0 when eval_freq=0"),
    ("  ppo: {batch_size: 4096}\n", {}, "{where}: ppo.batch_size=4096: expected at most the rollout"),
    ("  n_envs: 1\n", {}, "ppo.batch_size=32: expected at most the rollout, ppo.n_steps=16 x n_envs=1 = 16 steps "
                          "(n_envs from {where})"),
    ("  env_kwargs: {length: -3}\n", {}, "{where}: env_kwargs.length=-3: expected an integer >= 1"),
    ("  mlp: {hidden_size: 0}\n", {}, "{where}: mlp.hidden_size=0: expected an integer >= 1"),
])
def test_an_invalid_value_from_a_hyperparameter_entry_names_the_entry(tmp_path, body, flags, message):
    """The entry's own values name it when checked alone; so do the checks of the run they join (relations, the
    env, the policy): the key the message is about first, any other it names after."""
    file = entry_file(tmp_path, body)
    given = {"env": "TMaze-v0", "backbone": "mlp", "hyperparams": file, "log_dir": str(tmp_path / "runs"),
             "total_timesteps": 32, "n_eval_envs": 2, "n_eval_episodes": 2, "checkpoint_freq": 0, **flags}
    where = f"hyper-parameter file {file!r}, entry 'TMaze-v0'"
    with pytest.raises(ConfigError) as error:  # an entry's value alone: when it is read (`build_config`)
        train(build_config(None, given, ["ppo.n_steps=16", "ppo.segment_length=4"]
                           + ([] if "batch_size" in body else ["ppo.batch_size=32"])))
    assert str(error.value).startswith(message.format(where=where)), str(error.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("flags", "message"), [
    ({"stop_when_solved": 1, "eval_freq": 0}, "stop_when_solved=1: expected 0 when eval_freq=0 (stopping early needs "
                                              "evaluations during training)"),
    ({"env_kwargs.bogus": 1}, "env_kwargs: TMaze-v0 got unexpected keyword argument(s) 'bogus'; valid keyword "
                              "arguments: "),
    ({"n_envs": 1, "ppo.batch_size": 256},
     "ppo.batch_size=256: expected at most the rollout, ppo.n_steps=64 x n_envs=1 = 64 steps"),
])
def test_a_value_the_entry_did_not_give_is_not_named_with_it(tmp_path, flags, message):
    """A value of a layer above the entry (one it replaced, or one it does not set) is the user's own."""
    file = entry_file(tmp_path, "  stop_when_solved: 2\n  env_kwargs: {length: 3}\n")
    config = build_config(None, {"env": "TMaze-v0", "hyperparams": file, **flags})
    with pytest.raises(ConfigError) as error:
        validate(config)
    assert str(error.value).startswith(message) and "hyper-parameter" not in str(error.value), str(error.value)


class Stop(BaseCallback):
    def _on_step(self) -> bool:
        return False


def test_a_hand_built_config_trains_and_records_what_it_read(tmp_path):
    """A schedule written as text trains as the file's would, and `config.yaml` records it."""
    config = small_config(tmp_path, options={"ppo": {**SMALL["options"]["ppo"], "learning_rate": "lin_1e-3"}})
    summary = train(config, extra_callback=Stop())
    assert summary["env_steps"] <= 32
    assert "lin_0.001_0.0" in (tmp_path / "runs" / config.run_name() / "config.yaml").read_text()


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_the_default_minibatch_is_cut_to_a_smaller_rollout_and_a_given_one_is_refused(learner):
    """One env copy: the default `batch_size` becomes the whole rollout (the learner trains); a `batch_size` given
    larger than the rollout is refused, by keyword or by position."""
    model = learner("MemoryPolicy", "TMaze-v0", n_steps=32, segment_length=16)
    assert model.batch_size == 32
    model.learn(64)
    with pytest.raises(ConfigError, match=r"^batch_size=64: expected at most the rollout, n_steps=32 x n_envs=1"):
        learner("MemoryPolicy", "TMaze-v0", n_steps=32, segment_length=16, batch_size=64)
    with pytest.raises(ConfigError, match=r"^batch_size=64: expected at most the rollout"):
        learner("MemoryPolicy", "TMaze-v0", 1e-3, 32, 64, segment_length=16)


def test_the_command_line_cuts_the_default_minibatch_as_the_learner_does(tmp_path):
    """`--n-envs 1` trains with the default minibatch cut to the rollout, and records the value it trained with."""
    config = build_config(None, {"env": "TMaze-v0", "n_envs": 1, "total_timesteps": 64, "eval_freq": 0,
                                 "n_eval_episodes": 1, "log_dir": str(tmp_path)})
    validate(config)
    train(config)
    recorded = yaml.safe_load(next(tmp_path.glob("*/config.yaml")).read_text())
    assert recorded["ppo"]["batch_size"] == 64


@pytest.mark.parametrize(("arguments", "message"), [
    ({"callback": 3}, "callback=3: expected None, an SB3 callback"),
    ({"callback": [3]}, "callback=[3]: expected None, an SB3 callback"),
    ({"log_interval": 0}, "log_interval=0: expected an integer >= 1"),
    ({"tb_log_name": 3}, "tb_log_name=3: expected a non-empty string"),
    ({"progress_bar": "yes"}, "progress_bar='yes': expected true or false"),
    ({"reset_num_timesteps": "no"}, "reset_num_timesteps='no': expected true or false"),
])
def test_learn_refuses_arguments_sb3_would_fail_on_or_misread(arguments, message):
    """Each `learn` argument is checked before training (SB3 raises a TypeError or ZeroDivisionError, or accepts it)."""
    model = MemoryPPO("MemoryPolicy", "CartPole-v1", n_steps=16, segment_length=16)
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        model.learn(16, **arguments)
    assert model.num_timesteps == 0


def test_a_tensorboard_log_that_cannot_be_written_is_named_when_the_model_is_built(tmp_path):
    """A log folder under a file, or where no file can be made, is a `ValueError` naming `tensorboard_log` at once
    (mutation caught: the model was built, and `learn` raised a bare `NotADirectoryError` or `FileNotFoundError`)."""
    (tmp_path / "a.txt").write_text("x")
    for log, where in ((tmp_path / "a.txt" / "tb", tmp_path / "a.txt"), ("/proc/nope/tb", "/proc")):
        with pytest.raises(ValueError, match=f"^tensorboard_log={re.escape(repr(str(log)))}: cannot write in "
                                             f"{re.escape(repr(str(where)))}: \\[Errno "):
            MemoryPPO("MemoryPolicy", "CartPole-v1", tensorboard_log=str(log))
    MemoryPPO("MemoryPolicy", "CartPole-v1", tensorboard_log=str(tmp_path / "new" / "tb"))  # made when it logs


def test_the_constructor_and_predict_name_an_argument_of_the_wrong_kind():
    with pytest.raises(ConfigError, match=r"^env=3: expected an env id, a gymnasium env or a VecEnv"):
        MemoryPPO("MemoryPolicy", 3)
    with pytest.raises(ConfigError, match=r"^tensorboard_log=3: expected a folder path"):
        MemoryPPO("MemoryPolicy", "CartPole-v1", tensorboard_log=3)
    model = MemoryPPO("MemoryPolicy", "CartPole-v1", n_steps=16, segment_length=16)
    observation = np.zeros(4, dtype=np.float32)
    with pytest.raises(ConfigError, match=r"^deterministic='yes': expected true or false"):
        model.predict(observation, deterministic="yes")
    assert model.predict(observation, deterministic=np.True_)[0] in (0, 1)


def test_evaluate_names_a_bad_episode_count_flag_or_env():
    from experiments.evaluation import evaluate

    model = MemoryPPO("MemoryPolicy", "CartPole-v1", n_steps=16, segment_length=16)
    env = make_vec_env("CartPole-v1", 1)
    for arguments, message in [({"n_episodes": 0}, "n_episodes=0: expected an integer >= 1"),
                               ({"n_episodes": "3"}, "n_episodes='3': expected"),
                               ({"n_episodes": 1, "deterministic": "no"},
                                "deterministic='no': expected true or false")]:
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
            evaluate(model, env, **arguments)
    with pytest.raises(ConfigError, match=r"^env=.*expected a VecEnv"):
        evaluate(model, gym.make("CartPole-v1"), 1)
    with pytest.raises(ConfigError, match=r"^env: Observation spaces do not match"):
        evaluate(model, make_vec_env("Pendulum-v1", 1), 1)
    assert len(evaluate(model, env, 2).returns) == 2


class SmallImage(gym.Env):
    """A 7 × 7 RGB image: an image to SB3, too small for NatureCNN's 8 × 8 first kernel."""

    observation_space = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


@pytest.mark.parametrize("algo", [MemoryPPO, VMPO])
def test_the_constructor_names_an_image_too_small_for_the_features_extractor(algo):
    expected = (r"^its observation space Box\(0, 255, \(3, 7, 7\), uint8\) \(an image as the policy sees it, channels "
                r"first\) does not fit the features extractor NatureCNN \(.*\); choose another "
                r"features_extractor_class$")
    with pytest.raises(ValueError, match=expected):
        algo("MemoryPolicy", SmallImage(), **LEARNER | {"policy_kwargs": {"backbone": "gru"}})


class NaNReward(SmallImage):
    """A vector observation whose every reward is NaN."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)

    def step(self, action):
        return self.observation_space.sample(), float("nan"), True, False, {}


@pytest.mark.parametrize("algo", [MemoryPPO, VMPO])
def test_learn_names_a_nan_reward_as_the_envs_not_as_a_non_finite_loss(algo):
    model = algo("MemoryPolicy", DummyVecEnv([NaNReward, NaNReward]), **LEARNER)
    with pytest.raises(NonFiniteError, match=r"^non-finite reward \(nan\) from the env at timestep 2 \(envs \[0, 1\]"):
        model.learn(32)


class Observing(gym.Env):
    """An env of the observation space `space` (one-step episodes, two actions)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, space: gym.spaces.Space) -> None:
        self.observation_space = space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


DICT = gym.spaces.Dict({"a": gym.spaces.Box(0.0, 1.0, (2,), np.float32), "b": gym.spaces.Discrete(3)})


@pytest.mark.parametrize(("space", "observation", "message"), [
    (gym.spaces.Discrete(5), 5, r"holds values outside Discrete\(5\); expected whole numbers in \[0, 5\)"),
    (gym.spaces.Discrete(5), -1, r"outside Discrete\(5\)"),
    (gym.spaces.Discrete(5), 2.5, r"outside Discrete\(5\)"),
    (gym.spaces.MultiBinary(3), np.array([0.5, 0, 1]), r"outside MultiBinary\(3\); expected 0 or 1"),
    (gym.spaces.MultiDiscrete([3, 4]), np.array([1, 4]), r"outside MultiDiscrete\(\[3 4\]\)"),
    (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), np.full(2, 1e300), r"a value float32 cannot hold"),
    (DICT, {"a": np.zeros(2, np.float32)}, r"has the keys a; expected a, b"),
    (DICT, {"a": np.zeros(2, np.float32), "b": 7}, r"\['b'\] holds values outside Discrete\(3\)"),
    (DICT, {"a": np.zeros((2, 2), np.float32), "b": np.array([1, 2, 0])}, r"parts of different batch sizes, \[2, 3\]"),
    (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), np.zeros(5), r"has shape \(5,\); expected \(2,\) \(one env's\) "
                                                               r"or \(n_envs, 2\) \(a batch\) for Box of shape"),
    (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), np.zeros((2, 3, 2)), r"has shape \(2, 3, 2\)"),
    (gym.spaces.Discrete(5), np.zeros((2, 1), np.int64), r"has shape \(2, 1\); expected \(\) \(one env's\) or "
                                                          r"\(n_envs\) \(a batch\)"),
    (DICT, {"a": np.zeros(3, np.float32), "b": 1}, r"\['a'\] has shape \(3,\)"),
])
def test_predict_names_an_observation_outside_its_space(space, observation, message):
    """Values, keys, dtypes and shapes (neither one env's nor a batch's) are named before SB3 reads them."""
    model = MemoryPPO("MemoryPolicy", Observing(space), n_steps=16, batch_size=16, segment_length=4,
                      policy_kwargs={"backbone": "gru"})
    with pytest.raises(ValueError, match=rf"^observation (.* )?{message}"):
        model.predict(observation)


def test_predict_refuses_a_state_this_policy_did_not_return():
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    gru, mamba = (MemoryPPO("MemoryPolicy", env, **LEARNER | {"policy_kwargs": {"backbone": backbone}})
                  for backbone in ("gru", "mamba"))
    observation = env.reset()
    state = gru.predict(observation)[1]
    assert gru.predict(observation, state=state)[0].shape == (2,)
    doubled = {name: {key: value.astype(np.float64) if value.dtype == np.float32 else value
                      for key, value in entries.items()} for name, entries in state.items()}
    poisoned = {name: {key: np.full_like(value, np.nan) if value.dtype == np.float32 else value
                       for key, value in entries.items()} for name, entries in state.items()}
    for model, given, message in [
        (mamba, state, r"^state\['pi'\]\['memory'\] has shape \(n_envs, 1, 1, 1, 128\) and dtype float32; this "
                       r"policy's is \(n_envs, 1, 1, 2432\), float32; pass the state this policy's predict returned"),
        (gru, {"pi": {}}, r"^state\['pi'\] lacks 'memory', 'valid'"),
        (gru, doubled, r"dtype float64; this policy's is .*float32"),
        (gru, poisoned, r"^state\['pi'\]\['memory'\] holds a NaN or an infinity"),
    ]:
        with pytest.raises(ValueError, match=message):
            model.predict(observation, state=given)


def test_predict_refuses_key_value_caches_holding_a_nan():
    """The caches are optional in a state, and checked like its other entries where given."""
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    gtrxl = MemoryPPO("MemoryPolicy", env, **LEARNER | {"policy_kwargs": {"backbone": "gtrxl"}})
    observation = env.reset()
    state = gtrxl.predict(observation)[1]
    assert "cache_keys_0" in state["pi"]
    state["pi"]["cache_keys_0"][:] = np.nan
    with pytest.raises(ValueError, match=r"^state\['pi'\]\['cache_keys_0'\] holds a NaN or an infinity"):
        gtrxl.predict(observation, state=state)


@pytest.mark.parametrize(("observation", "action", "message"), [
    (gym.spaces.MultiDiscrete([[3, 4], [2, 2]]), gym.spaces.Discrete(2),
     "observation space MultiDiscrete([[3 4] [2 2]]) has shape (2, 2), and SB3 one-hot encodes a flat vector; "
     "flatten it with env_wrapper: envs.adapters.FlatObservation"),
    (gym.spaces.Dict({"m": gym.spaces.MultiDiscrete([[3, 4], [2, 2]])}), gym.spaces.Discrete(2),
     "observation 'm' MultiDiscrete"),
    (gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiDiscrete([[3, 2], [2, 2]]),
     "action space MultiDiscrete([[3 2] [2 2]]) has shape (2, 2), and the policy's action distributions take a flat"),
    (gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiBinary([2, 2]), "action space MultiBinary((2, 2)) has shape (2, 2)"),
    (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(0, 5, (2,), np.int64),
     "action space Box(0, 5, (2,), int64) holds int64, and the policy's Gaussian actions are real numbers"),
])
def test_spaces_no_policy_can_take_are_refused_by_name(observation, action, message):
    """Multi-dimensional MultiDiscrete or MultiBinary spaces and integer Box actions: refused naming the space (a
    policy would fail inside torch or SB3, or act with non-integer floats)."""
    from policies.spaces import check_spaces

    with pytest.raises(ValueError, match=re.escape(message)):
        check_spaces(observation, action)


@pytest.mark.parametrize(("key", "schedule", "gave"), [
    ("learning_rate", lambda progress: float("nan"), "gave nan at progress_remaining=1"),
    ("learning_rate", lambda progress: 1e-3 if progress > 0.2 else -1.0, "gave -1.0 at progress_remaining=0"),
    ("learning_rate", lambda progress: None, "gave None at progress_remaining=1"),
    ("learning_rate", lambda: 1e-3, "raised TypeError at progress_remaining=1"),
    ("clip_range", lambda progress: 0.0, "gave 0.0 at progress_remaining=1"),  # starts above 0, may end there
])
def test_a_schedule_given_as_a_function_is_checked_where_training_starts_halves_and_ends(key, schedule, gave):
    with pytest.raises(ConfigError, match=rf"^{key}=<function .*at every progress: the schedule {gave}$"):
        MemoryPPO("MemoryPolicy", "TMaze-v0", n_steps=16, batch_size=16, policy_kwargs={"backbone": "mlp"},
                  **{key: schedule})


def test_a_schedule_that_decays_to_its_closed_bound_is_taken():
    model = MemoryPPO("MemoryPolicy", "TMaze-v0", n_steps=16, batch_size=16, policy_kwargs={"backbone": "mlp"},
                      learning_rate=lambda progress: 1e-3 * progress, clip_range=lambda progress: 0.1 + progress)
    assert model.lr_schedule(0.0) == 0.0


def test_predict_takes_an_image_with_its_channels_first_or_last_alone_or_batched():
    model = MemoryPPO("MemoryPolicy", Observing(gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)), n_steps=16,
                      batch_size=16, segment_length=4, policy_kwargs={"backbone": "gru"})
    for shape in [(36, 36, 3), (3, 36, 36), (2, 36, 36, 3), (2, 3, 36, 36)]:
        assert model.predict(np.zeros(shape, np.uint8))[0].shape == (() if len(shape) == 3 else (2,))


@pytest.mark.parametrize("seed", ["x", -1, 2**32, 1.5])
def test_set_random_seed_names_a_seed_numpy_does_not_take(seed):
    model = MemoryPPO("MemoryPolicy", "TMaze-v0", n_steps=16, batch_size=16, policy_kwargs={"backbone": "mlp"})
    with pytest.raises(ConfigError, match=r"^seed=.*: expected an integer in \[0, 4294967295\]"):
        model.set_random_seed(seed)
    model.set_random_seed(3)


# -- learner arguments the rules' words offer, and those the learner sets itself ------------------------------------

@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_a_schedule_written_as_the_command_line_writes_it_is_taken(learner):
    model = learner("MemoryPolicy", make_vec_env("TMaze-v0", n_envs=2, seed=0, length=3), learning_rate="lin_1e-3",
                    **LEARNER)
    assert (model.lr_schedule(1.0), model.lr_schedule(0.5)) == pytest.approx((1e-3, 5e-4))
    with pytest.raises(ConfigError, match=r"learning_rate='lin_x': a linear schedule is written lin_<start>"):
        learner("MemoryPolicy", make_vec_env("TMaze-v0", n_envs=2, seed=0, length=3), learning_rate="lin_x",
                **LEARNER)


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_a_numpy_integer_seed_seeds_the_learner(learner):
    model = learner("MemoryPolicy", make_vec_env("TMaze-v0", n_envs=2, seed=0, length=3), seed=np.int64(3),
                    **LEARNER)
    assert model.seed == 3 and type(model.seed) is int
    model.set_random_seed(np.uint32(4))


@pytest.mark.parametrize(("learner", "policy_kwargs", "message"), [
    (MemoryPPO, {"lr_schedule": 1}, r"policy_kwargs\['lr_schedule'\]: MemoryPPO sets it from the env"),
    (MemoryPPO, {"observation_space": None}, r"policy_kwargs\['observation_space'\]: MemoryPPO sets it"),
    (VMPO, {"popart": True}, r"policy_kwargs\['popart'\]: VMPO sets it from its own option; pass VMPO\(popart="),
    (VMPO, {"popart_beta": -5}, r"policy_kwargs\['popart_beta'\]: VMPO sets it"),
    (MemoryPPO, {"optimizer_kwargs": {"lr": 1e-4}}, r"optimizer_kwargs\['lr'\]=0.0001: the learner's learning_rate"),
    (MemoryPPO, {"squash_output": True}, r"squash_output=True: SB3 squashes actions only with gSDE"),
])
def test_a_policy_option_the_learner_sets_or_no_memory_policy_takes_is_refused(learner, policy_kwargs, message):
    env = make_vec_env("TMaze-v0", n_envs=2, seed=0, length=3)
    with pytest.raises(ConfigError, match=message):
        learner("MemoryPolicy", env, policy_kwargs={"backbone": "mlp", **policy_kwargs},
                **{k: v for k, v in LEARNER.items() if k != "policy_kwargs"})


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_a_policy_class_that_is_no_memory_policy_is_refused_by_name(learner):
    from stable_baselines3.common.policies import ActorCriticPolicy

    with pytest.raises(ConfigError, match=f"policy=ActorCriticPolicy: {learner.__name__} takes 'MemoryPolicy'"):
        learner(ActorCriticPolicy, make_vec_env("TMaze-v0", n_envs=2, seed=0, length=3))


def test_save_to_a_directory_is_refused_and_learning_without_an_env_names_the_cure(tmp_path):
    model = MemoryPPO("MemoryPolicy", make_vec_env("TMaze-v0", n_envs=2, seed=0, length=3), **LEARNER)
    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match="is a directory; expected a file path"):
        model.save(tmp_path / "folder")
    assert not (tmp_path / "folder.zip").exists()
    model.save(tmp_path / "model")
    with pytest.raises(ConfigError, match=r"env=None: .* MemoryPPO.load\(path, env=...\) or call set_env"):
        MemoryPPO.load(tmp_path / "model").learn(32)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link.zip").symlink_to(tmp_path / "elsewhere" / "model.zip")  # dangling until the save
    model.save(tmp_path / "link")  # through the link, as SB3 saves: the link stays one
    assert (tmp_path / "link.zip").is_symlink() and MemoryPPO.load(tmp_path / "elsewhere" / "model.zip")


@pytest.mark.parametrize(("arguments", "message"), [
    ({"file": 3}, "file=3: expected the path of a YAML file"),
    ({"overrides": [3]}, r"overrides=\[3\]: expected a list of 'key=value' strings"),
    ({"overrides": "seed=3"}, "overrides='seed=3': expected a list"),
    ({"flags": [1]}, r"flags=\[1\]: expected a dict of settings"),
])
def test_build_config_refuses_layers_of_other_types(arguments, message):
    with pytest.raises(ConfigError, match=message):
        build_config(**arguments)


def test_loading_parameters_from_a_vector_invalidates_the_caches():
    env = make_vec_env("TMaze-v0", n_envs=2, seed=0, length=3)
    kwargs = {"backbone": "gtrxl", "backbone_kwargs": {"d_model": 16, "n_layers": 1, "n_heads": 2, "memory_length": 4}}
    model = MemoryPPO("MemoryPolicy", env, seed=0, policy_kwargs=kwargs)
    other = MemoryPPO("MemoryPolicy", env, seed=1, policy_kwargs=kwargs)
    obs, state = env.reset(), None
    for _ in range(3):
        _, state = model.predict(obs, state)
    model.policy.load_from_vector(other.policy.parameters_to_vector())
    assert model.policy.as_policy_state(state).pi.cache.generation != model.policy.backbone.generation


@pytest.mark.parametrize(("arguments", "message"), [
    ({"env_kwargs": [1]}, r"env_kwargs=\[1\]: expected a mapping"),
    ({"gym_packages": "math"}, "gym_packages='math': expected a list"),
])
def test_load_agent_refuses_arguments_of_another_type(saved, arguments, message):
    with pytest.raises(ConfigError, match=message):
        load_agent(saved, env="TMaze-v0", **arguments)


@pytest.mark.parametrize(("hyperparams", "message"), [
    ("nope.yml#x", "hyperparams='nope.yml#x': config file 'nope.yml' does not exist"),
    ("ppo#nope", "hyperparams='ppo#nope': hyper-parameter file 'configs/hyperparams/ppo.yml' has no entry 'nope'"),
])
def test_train_refuses_a_hand_set_hyperparams_naming_no_entry(tmp_path, hyperparams, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        train(small_config(tmp_path, hyperparams=hyperparams))
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("call", "message"), [
    (lambda: run_study(Grid(seeds=[0]), "cmd", workers=-1), r"^workers=-1: expected an integer >= 1"),  # hung
    (lambda: run_study(Grid(seeds=[0]), "cmd", launcher="nope"), r"^launcher='nope': expected one of local, ray"),
    (lambda: run_study("x", "cmd"), r"^grid='x': expected a Grid"),
    (lambda: Grid(backbones=3), r"^backbones=3: expected a non-empty list"),
    (lambda: Grid.from_file(3), r"^path=3: expected a non-empty path"),
    (lambda: train_lm("x"), r"^config='x': expected an LMConfig"),
    (lambda: train_lm(build_lm_config(None, ["data=copy"]), resume="yes"), r"^resume='yes': expected true or false"),
    (lambda: load_run(3), r"^run=3: expected a non-empty path"),
    (lambda: evaluate("m", None, 1), r"^model='m': expected an SB3 model"),
    (lambda: build_config(None, entries="no"), r"^entries='no': expected true or false"),
])
def test_the_experiments_api_names_a_bad_argument_before_anything_is_made(call, message, tmp_path, monkeypatch):
    """Studies, the language-model workbench and evaluation refuse a bad argument as `train` does (before: a hang,
    a run started, an AttributeError or a TypeError from inside)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message):
        call()
    assert not any(tmp_path.iterdir())
