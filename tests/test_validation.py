"""Every bad input is refused before any work: exit status 2, one line naming the key or flag, the bad
value and what is valid, no traceback, and no run directory left behind (docs/validation.md)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import train_rl
from agents import ALGOS
from envs.rules import ConfigError
from experiments.cli import train as train_cli
from experiments.config import POLICY_OPTIONS, SEED_LIMIT, RunConfig, build_config, section_defaults
from experiments.footprint import check_fits, estimate
from experiments.studies.study import Grid
from experiments.training import EVAL_SEED_OFFSET
from experiments.validation import component, validate
from policies import ATTENTIONS, BACKBONES, POSITIONS
from policies.options import is_checked, option_rules
from policies.policy import MemoryActorCriticPolicy

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "4", "--threads", "1",
         "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.segment_length=4", "gtrxl.d_model=16", "gtrxl.n_heads=2",
         "gtrxl.memory_length=4", "n_eval_envs=2"]
"""a small valid run, which each case below spoils with one bad input"""

FILES = {
    "binary.yaml": b"\x00\x01\x02\xff\xfe",
    "latin1.yaml": "env: TMaze-v0  # caf\xe9\n".encode("latin-1"),
    "empty.yaml": b"",
    "list.yaml": b"- algo: ppo\n",
    "scalar.yaml": b"42\n",
    "broken.yaml": b"algo: ppo\n  backbone: [gtrxl\n",
    "gamma.yaml": b"ppo: {gamma: 2}\n",
    "section.yaml": b"ppo: 3\n",
    "huge.yaml": b"ppo: {learning_rate: 1.0e+999}\n",
    "study_seeds.yaml": b"seeds: -2\n",
    "study_seed_list.yaml": b"seeds: [0, -1]\n",
    "study_zero.yaml": b"seeds: 0\n",
    "study_backbones.yaml": b"backbones: [gtrxl, transformer]\n",
    "study_name.yaml": b"name: ../elsewhere\n",
    "study_tasks.yaml": b"tasks: {env: TMaze-v0}\n",
    "study_settings.yaml": b"settings: [1, 2]\n",
    "study_key.yaml": b"backbone: [lstm]\n",
    "study_gamma.yaml": b"settings: {ppo: {gamma: 2}}\n",
    "study_empty.yaml": b"",
    "study_floor.yaml": b"settings: {env: popgym-NoisyPositionOnlyPendulumEasy-v0, ppo: {exploration_floor: 0.1}}\n",
    "a_file": b"not a directory\n",
}
"""files the cases refer to as {name}"""

CASES: list[tuple[list[str], str]] = [
    # run settings given as flags
    (["-n", "0"], "total_timesteps=0: expected an integer >= 1"),
    (["-n", "1.5"], "total_timesteps=1.5: expected an integer"),
    (["-n", "abc"], "train_rl.py [train]: error: argument --total-timesteps/-n: invalid float value: 'abc'"),
    (["--n-envs", "0"], "n_envs=0: expected an integer >= 1"),
    (["--n-envs", "100000000"], "n_envs=100000000"),
    (["--eval-freq", "-1"], "eval_freq=-1: expected an integer >= 0 (0: only at the end)"),
    (["--n-eval-episodes", "0"], "n_eval_episodes=0: expected an integer >= 1"),
    (["--checkpoint-freq", "-5"], "checkpoint_freq=-5: expected an integer >= 0"),
    (["-p", "keep_checkpoints=-1"], "keep_checkpoints=-1: expected an integer >= 0 (0: keep all)"),
    (["--device", "cuda"], "device='cuda': CUDA is not available on this machine"),
    (["--device", "cuda:3"], "device='cuda:3': CUDA is not available"),
    (["--device", "foo"], "device='foo': expected auto, cpu, cuda, cuda:N or mps"),
    (["--threads", "-2"], "threads=-2: expected an integer >= 0"),
    (["--seed", "-1"], "seed=-1: expected an integer in [0, "),
    (["--seed", str(2**32)], f"seed={2**32}: expected an integer in [0, {SEED_LIMIT}]"),
    (["--stop-when-solved", "-1"], "stop_when_solved=-1: expected an integer >= 0"),
    (["--stop-when-solved", "2", "--eval-freq", "0"], "stop_when_solved=2: expected 0 when eval_freq=0"),
    (["--solved-lr-factor", "0"], "solved_lr_factor=0.0: expected a number in (0, 1]"),
    (["--solved-lr-factor", "1.5"], "solved_lr_factor=1.5: expected a number in (0, 1]"),
    (["--solved-lr-streak", "0"], "solved_lr_streak=0: expected an integer >= 1"),
    (["--algo", "dqn"], "argument --algo: invalid choice: 'dqn'"),
    (["--backbone", "transformer"], "argument --backbone: invalid choice: 'transformer'"),
    (["--precision", "fp8"], "argument --precision: invalid choice: 'fp8'"),
    (["--env", "TMaze-v9"], "env='TMaze-v9': Unknown env id 'TMaze-v9': gymnasium's registry does not hold it. "
                            "Did you mean TMaze-v0"),
    (["--env-kwargs", "lenght=5"], "env_kwargs: TMaze-v0 got unexpected keyword argument(s) 'lenght' (did you mean"),
    (["--env-kwargs", "length=abc"], "env_kwargs.length='abc': expected an integer"),
    (["--env-kwargs", "length=0"], "env_kwargs.length=0: expected an integer >= 1"),
    (["--env-kwargs", "penalty=0.5"], "env_kwargs.penalty=0.5: expected a number <= 0 (or null for the default)"),
    (["--env-kwargs", "length"], "override 'length' is not of the form dotted.key=value"),
    (["--workers", "-1"], "--workers=-1: expected an integer >= 1"),
    (["--workers", "0"], "--workers=0: expected an integer >= 1"),
    (["--max-retries", "-1"], "--max-retries=-1: expected an integer >= 0"),
    (["--reps", "-3"], "--reps=-3: expected an integer in [1, 50000]"),
    (["--verbose", "7"], "--verbose=7: expected an integer in [0, 2]"),
    (["--reps", "0"], "--reps=0: expected an integer in [1, 50000]"),
    (["--log-dir", "{a_file}"], "log_dir='{a_file}': is a file"),
    (["--log-dir", "/proc/engram-runs"], "log_dir='/proc/engram-runs': cannot write in '/proc': [Errno 2]"),
    (["-n", "1e999"], "argument --total-timesteps/-n: '1e999' is too large for a float (at most about 1.8e308)"),
    (["--solved-lr-factor", "1e999"], "argument --solved-lr-factor: '1e999' is too large for a float"),
    # run settings given with -p
    (["-p", "success_threshold=2"], "success_threshold=2.0: expected a number in [0, 1]"),
    (["-p", "success_threshold=-0.1"], "success_threshold=-0.1: expected a number in [0, 1]"),
    (["-p", "n_eval_envs=0"], "n_eval_envs=0: expected an integer >= 1"),
    (["-p", "init_from=/no/such/run"], "init_from='/no/such/run': no saved model there"),
    (["-p", "colour=blue"], "unknown configuration key 'colour'; valid keys: algo"),
    (["-p", "seed"], "override 'seed' is not of the form dotted.key=value"),
    (["-p", "env_kwargs=5"], "env_kwargs=5: expected a mapping"),
    (["-p", "algo=dqn"], "algo='dqn': expected one of ppo, vmpo"),
    (["-p", "device=tpu"], "device='tpu': expected auto, cpu, cuda"),
    (["-p", "total_timesteps=nan"], "total_timesteps='nan': expected an integer"),
    (["-p", "n_envs.x=1"], "'n_envs.x': n_envs has no sub-keys"),
    # learner options (PPO; V-MPO below)
    (["-p", "ppo.gamma=2"], "ppo.gamma=2.0: expected a number in [0, 1]"),
    (["-p", "ppo.gamma=-0.5"], "ppo.gamma=-0.5: expected a number in [0, 1]"),
    (["-p", "ppo.gamma=nan"], "ppo.gamma=nan: expected a number in [0, 1]"),
    (["-p", "ppo.gamma=lin_0.99"], "ppo.gamma=lin_0.99_0.0: expected a number in [0, 1], not a schedule"),
    (["-p", "ppo.gae_lambda=1.5"], "ppo.gae_lambda=1.5: expected a number in [0, 1]"),
    (["-p", "ppo.clip_range=-0.1"], "ppo.clip_range=-0.1: expected a number > 0"),
    (["-p", "ppo.clip_range=0"], "ppo.clip_range=0.0: expected a number > 0"),
    (["-p", "ppo.clip_range_vf=-1"], "ppo.clip_range_vf=-1: expected a number > 0 (or null for the default;"),
    (["-p", "ppo.batch_size=100000"], "ppo.batch_size=100000: expected at most the rollout, ppo.n_steps=16 x n_envs=4"),
    (["-p", "ppo.batch_size=30"], "ppo.batch_size=30: expected a multiple of the training segment, "
                                  "ppo.segment_length=4"),
    (["-p", "ppo.n_steps=18"], "ppo.n_steps=18: expected a multiple of the training segment, ppo.segment_length=4"),
    (["-p", "ppo.n_steps=1000000000"], "ppo.n_steps=1000000000, n_envs=4"),
    (["-p", "ppo.n_epochs=0"], "ppo.n_epochs=0: expected an integer >= 1"),
    (["-p", "ppo.learning_rate=-1e-3"],
     "ppo.learning_rate=-0.001: expected a number in [0, 3.40282e+38] (0: the policy stays"),
    (["-p", "ppo.learning_rate=1e999"], "ppo.learning_rate='1e999': expected a number a float holds (at most "),
    (["-p", "ppo.gamma=-1e999"], "ppo.gamma='-1e999': expected a number a float holds"),
    (["--config", "{huge.yaml}"], "ppo.learning_rate='1.0e+999': expected a number a float holds"),
    (["-p", "ppo.learning_rate=lin_fast"], "ppo.learning_rate='lin_fast': a linear schedule is written lin_<start>"),
    (["-p", "ppo.learning_rate=lin_-1e-3"], "ppo.learning_rate=lin_-0.001_0.0: expected a number in [0, 3.40282e+38]"),
    (["-p", "ppo.learning_rate=lin_1e-3_-1"],
     "ppo.learning_rate=lin_0.001_-1.0: expected a number in [0, 3.40282e+38]"),
    (["-p", "ppo.ent_coef=-0.01"], "ppo.ent_coef=-0.01: expected a number >= 0"),
    (["-p", "ppo.vf_coef=-1"], "ppo.vf_coef=-1.0: expected a number >= 0"),
    (["-p", "ppo.max_grad_norm=0"], "ppo.max_grad_norm=0.0: expected a number > 0"),
    (["-p", "ppo.target_kl=0"], "ppo.target_kl=0: expected a number > 0 (or null for the default)"),
    (["-p", "ppo.exploration_floor=1.5"], "ppo.exploration_floor=1.5: expected a number in [0, 1]"),
    (["-p", "ppo.uniform_kl_coef=-0.1"], "ppo.uniform_kl_coef=-0.1: expected a number >= 0"),
    (["-p", "ppo.minibatch_order=random"], "ppo.minibatch_order='random': expected one of shuffled, by-env"),
    (["-p", "ppo.segment_length=0"], "ppo.segment_length=0: expected an integer >= 1"),
    (["-p", "ppo.normalize_advantage=maybe"], "ppo.normalize_advantage='maybe': expected true or false"),
    (["-p", "ppo.aux_coefs={ponder_cost: -1}"], "ppo.aux_coefs.ponder_cost=-1: expected a number >= 0"),
    (["-p", "ppo.stats_window_size=0"], "ppo.stats_window_size=0: expected an integer >= 1"),
    (["-p", "ppo.learning_rat=1e-3"], "unknown option 'learning_rat' for ppo; valid options: learning_rate"),
    (["-p", "ppo=3"], "'ppo' holds the options of ppo and must be a mapping, got 3"),
    (["--algo", "vmpo", "-p", "vmpo.epsilon_eta=0"], "vmpo.epsilon_eta=0.0: expected a number > 0"),
    (["--algo", "vmpo", "-p", "vmpo.popart_beta=2"], "vmpo.popart_beta=2.0: expected a number in (0, 1]"),
    (["--algo", "vmpo", "-p", "vmpo.alpha_init=-1"], "vmpo.alpha_init=-1: expected a number > 0"),
    (["--algo", "vmpo", "-p", "vmpo.dual_learning_rate=0"],
     "vmpo.dual_learning_rate=0.0: expected a number in (0, 3.40282e+38]"),
    (["--algo", "vmpo", "-p", "vmpo.batch_size=4096"], "vmpo.batch_size=4096: expected at most the rollout"),
    # backbone options
    (["-p", "gtrxl.d_model=0"], "gtrxl.d_model=0: expected an integer >= 1"),
    (["-p", "gtrxl.n_heads=3"], "gtrxl.n_heads=3: expected a divisor of gtrxl.d_model=16 (or set gtrxl.d_head)"),
    (["-p", "gtrxl.n_heads=0"], "gtrxl.n_heads=0: expected an integer >= 1"),
    (["-p", "gtrxl.memory_length=0"], "gtrxl.memory_length=0: expected an integer >= 1"),
    (["-p", "gtrxl.n_layers=-1"], "gtrxl.n_layers=-1: expected an integer >= 1"),
    (["-p", "gtrxl.d_inner=0"], "gtrxl.d_inner=0: expected an integer >= 1"),
    (["-p", "gtrxl.dropout=1.0"], "gtrxl.dropout=1.0: expected a number in [0, 1)"),
    (["-p", "gtrxl.gate=lstm"], "gtrxl.gate='lstm': expected one of residual, input"),
    (["-p", "gtrxl.attention=nope"], "gtrxl.attention='nope': expected one of "),
    (["-p", "gtrxl.episode_time=clock"], "gtrxl.episode_time='clock': expected one of none, sinusoidal"),
    (["-p", "gtrxl.max_episode_time=0"], "gtrxl.max_episode_time=0: expected an integer >= 1"),
    (["-p", "gtrxl.attention=knn", "gtrxl.attention_options={top_k: 0}"],
     "gtrxl.attention_options.top_k=0: expected an integer >= 1"),
    (["-p", "gtrxl.attention_options={top_k: 2}"],
     "gtrxl.attention_options.top_k: unknown option of attention 'full'; valid options: none"),
    (["-p", "gtrxl.attention=lsh", "gtrxl.attention_options={n_buckets: 3}"],
     "gtrxl.attention_options.n_buckets=3: expected one of 1, or an integer >= 2, a multiple of 2"),
    (["-p", "gtrxl.attention=local", "gtrxl.attention_options={local_window: many}"],
     "gtrxl.attention_options.local_window='many': expected an integer >= 1"),
    (["-p", "gtrxl.attention_options=3"], "gtrxl.attention_options=3: expected a mapping"),
    (["-p", "gtrxl.d_model=100000"], "gtrxl options {'d_model': 100000"),
    (["-p", "gtrxl.memory_len=8"], "unknown option 'memory_len' for gtrxl; valid options: d_model"),
    (["--backbone", "lstm", "-p", "lstm.hidden_size=0"], "lstm.hidden_size=0: expected an integer >= 1"),
    (["--backbone", "ut-act", "-p", "ut-act.epsilon=1"], "ut-act.epsilon=1.0: expected a number in (0, 1)"),
    (["--backbone", "ut-act", "-p", "ut-act.max_steps=0"], "ut-act.max_steps=0: expected an integer >= 1"),
    (["--backbone", "linear", "-p", "linear.feature_map=relu"], "linear.feature_map='relu': expected one of elu"),
    (["--backbone", "framestack", "-p", "framestack.k=0"], "framestack.k=0: expected an integer >= 1"),
    (["-p", "lstm.hidden_size=-3"], "lstm.hidden_size=-3: expected an integer >= 1"),  # another backbone's section
    # policy options
    (["-p", "policy.activation_fn=swish"], "policy.activation_fn='swish': expected one of tanh, relu"),
    (["-p", "policy.net_arch=[64, -1]"], "policy.net_arch=[64, -1]: expected a list of positive layer widths"),
    (["-p", "policy.net_arch={pi: [8], vf: 0}"], "policy.net_arch={'pi': [8], 'vf': 0}: expected a list"),
    (["-p", "policy.ortho_init=maybe"], "policy.ortho_init='maybe': expected true or false"),
    (["-p", "policy.log_std_init=inf"], "policy.log_std_init=inf: expected a number in [-40, 40]"),
    (["-p", "policy.log_std_init=100"], "policy.log_std_init=100.0: expected a number in [-40, 40] (std = exp(value)"),
    (["-p", "policy.colour=1"], "unknown policy option 'colour'; valid options: net_arch"),
    # configuration files
    (["--config", "{binary.yaml}"], "config file '{binary.yaml}' is not UTF-8 text (byte 0xff at offset 3)"),
    (["--config", "{latin1.yaml}"], "config file '{latin1.yaml}' is not UTF-8 text (byte 0xe9"),
    (["--config", "{empty.yaml}"], "config file '{empty.yaml}' is empty; expected a YAML mapping"),
    (["--config", "{list.yaml}"], "config file '{list.yaml}' holds a list; expected a YAML mapping"),
    (["--config", "{scalar.yaml}"], "config file '{scalar.yaml}' holds an integer; expected a YAML mapping"),
    (["--config", "{broken.yaml}"], "config file '{broken.yaml}' is not valid YAML at line 2"),
    (["--config", "{gamma.yaml}"], "ppo.gamma=2.0: expected a number in [0, 1]"),
    (["--config", "{section.yaml}"], "'ppo' holds the options of ppo and must be a mapping, got 3"),
    (["--config", "{tmp}"], "config file '{tmp}' is not a file"),
    (["--config", "{tmp}/missing.yaml"], "config file '{tmp}/missing.yaml' does not exist"),
    # studies
    (["--study", "s", "--seed", "0", "1", "--backbone", "gtrxl", "lstm", "-p", "lstm.hidden_size=0"],
     "lstm.hidden_size=0: expected an integer >= 1"),
    (["--seed", "0", "-1"], "seed=-1: expected an integer in [0, "),
    (["study", "{study_seeds.yaml}"],
     "study file '{study_seeds.yaml}': seeds=-2: expected an integer in [1, 10000] (a count)"),
    (["study", "{study_zero.yaml}"], "study file '{study_zero.yaml}': seeds=0: expected an integer in [1, 10000]"),
    (["study", "{study_seed_list.yaml}"], "seeds[1]=-1: expected an integer in [0, "),
    (["study", "{study_backbones.yaml}"], "backbones[1]='transformer': expected one of trxl"),
    (["study", "{study_name.yaml}"], "name='../elsewhere': expected a folder name (not empty, . or .., without"),
    (["study", "{study_tasks.yaml}"], "tasks={'env': 'TMaze-v0'}: expected a non-empty list, each a mapping"),
    (["study", "{study_settings.yaml}"], "settings=[1, 2]: expected a mapping"),
    (["study", "{study_key.yaml}"], "unknown key(s) 'backbone' in study file '{study_key.yaml}'; valid keys: name"),
    (["study", "{study_gamma.yaml}"], "ppo.gamma=2.0: expected a number in [0, 1]"),
    (["study", "{study_empty.yaml}"], "config file '{study_empty.yaml}' is empty"),
    (["study", "{study_floor.yaml}"], "ppo.exploration_floor=0.1: exploration_floor needs a finite action space"),
    (["study", "{tmp}/missing.yaml"], "config file '{tmp}/missing.yaml' does not exist"),
]
"""(arguments after the small valid run, a part of the message that names the key, the value and the range)"""


def _fill(text: str, tmp: Path) -> str:
    """``text`` with ``{tmp}`` and every ``{<file of FILES>}`` replaced by its path."""
    for name in FILES:
        text = text.replace(f"{{{name}}}", str(tmp / name))
    return text.replace("{tmp}", str(tmp))


@pytest.fixture
def inputs(tmp_path, monkeypatch) -> Path:
    """The files of :data:`FILES` in ``tmp_path``; CUDA hidden, so ``--device cuda`` is missing on every machine."""
    for name, content in FILES.items():
        (tmp_path / name).write_bytes(content)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    return tmp_path


def _argv(case: list[str], tmp: Path) -> list[str]:
    args = [_fill(arg, tmp) for arg in case]
    runs = ["--log-dir", str(tmp / "runs")]
    if args[0] == "study":  # train_rl.py study FILE [flags]
        return [*args[:2], *runs, *args[2:]]
    return [*SMALL, *runs, *args]


def test_there_are_many_cases():
    assert len(CASES) >= 60


@pytest.mark.parametrize(("case", "message"), CASES, ids=[" ".join(case) for case, _ in CASES])
def test_bad_input_exits_2_with_one_line_naming_it(case, message, inputs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(train_rl.main(_argv(case, inputs)))
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2
    assert "Traceback" not in out + err
    assert err.count("\n") == 1 and err.startswith(("error: ", "train_rl.py")), err
    assert _fill(message, inputs) in err
    assert not (inputs / "runs").exists(), "a run directory was created"


def test_bad_input_through_a_real_process_has_no_traceback(tmp_path):
    """Three bad inputs of the issue, each in its own ``python train_rl.py`` process (run at once)."""
    cases = {"gtrxl.d_model=0": ["-p", "gtrxl.d_model=0"], "device='foo'": ["--device", "foo"],
             "ppo.gamma=2.0": ["-p", "ppo.gamma=2"]}
    processes = {key: subprocess.Popen([sys.executable, str(REPO / "train_rl.py"), *SMALL, "--log-dir",
                                        str(tmp_path / "runs"), *argv], cwd=REPO, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env={"OMP_NUM_THREADS": "1", "PATH": ""})
                 for key, argv in cases.items()}
    for key, process in processes.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 2 and "Traceback" not in out + err and err.count("\n") == 1, err
        assert key in err
    assert not (tmp_path / "runs").exists()


def _components() -> dict[str, tuple[type, dict]]:
    """Every learner, backbone, attention and position by name, with its class and its options' defaults."""
    found = {section: (component(section), section_defaults(section)) for section in [*ALGOS, *BACKBONES]}
    for catalogue in (ATTENTIONS, POSITIONS):
        found.update({f"{catalogue.kind} {name}": (entry.cls, catalogue.options(name))
                      for name, entry in catalogue.items()})
    return found


def test_every_option_declares_its_valid_values():
    """An option without a rule in its constructor's annotation fails here, and so does a constructor that does
    not check its options (mutations caught: gae_lambda annotated ``float``; ``@checked`` left off a backbone)."""
    for name, (cls, defaults) in _components().items():
        assert set(defaults) <= set(option_rules(cls.__init__)), name
        assert not defaults or is_checked(cls.__init__), name
    assert set(POLICY_OPTIONS) <= set(option_rules(MemoryActorCriticPolicy.__init__, spelled=True))
    assert is_checked(MemoryActorCriticPolicy.__init__)
    assert all("rule" in f.metadata for f in dataclasses.fields(RunConfig) if f.name != "options")


def test_every_default_passes_its_rule():
    """The rules are not stricter than the components' own defaults."""
    for name, (cls, defaults) in _components().items():
        rules = option_rules(cls.__init__)
        for option, default in defaults.items():
            rules[option].check(f"{name}.{option}", default)
    rules = option_rules(MemoryActorCriticPolicy.__init__, spelled=True)
    for option, default in POLICY_OPTIONS.items():
        if default is not None:  # unset: the policy's (or SB3's) own default
            rules[option].check(f"policy.{option}", default)
    config = RunConfig()
    for spec in dataclasses.fields(RunConfig):
        if "rule" in spec.metadata and spec.name not in ("device", "log_dir"):
            spec.metadata["rule"].check(spec.name, getattr(config, spec.name))


def test_shipped_configs_and_studies_are_valid(tmp_path):
    for path in sorted((REPO / "configs").glob("*.yaml")):
        validate(build_config(path, {"log_dir": str(tmp_path)}))
    for path in sorted((REPO / "configs" / "studies").glob("*.yaml")):
        Grid.from_file(path, flags={"log_dir": str(tmp_path)}).study_configs()  # validates every run
    assert not list(tmp_path.iterdir())


def test_a_schedule_may_decay_to_its_open_lower_bound():
    """PPO's clip range must be > 0, but ``lin_0.2`` (0.2 decaying to 0) is a valid schedule."""
    rule = option_rules(ALGOS["ppo"].__init__)["clip_range"]
    rule.check("clip_range", build_config(overrides=["ppo.clip_range=lin_0.2"]).algo_options()["clip_range"])
    with pytest.raises(ConfigError, match="clip_range=0.0: expected a number > 0"):
        rule.check("clip_range", 0.0)


def test_seeds_stay_below_numpys_limit_with_the_evaluation_offset():
    assert SEED_LIMIT + EVAL_SEED_OFFSET == 2**32 - 1


def test_memory_estimate_refuses_what_does_not_fit(tmp_path):
    """The estimate grows with n_steps and n_envs, and a run over the available memory is refused with the
    sizes; the same run fits in more memory."""
    config = build_config(overrides=["n_envs=4", "ppo.n_steps=16", "ppo.batch_size=32", "gtrxl.d_model=16",
                                     "gtrxl.n_heads=2", "gtrxl.memory_length=4"])
    from experiments.validation import _build_policy_on_meta, check_env

    env = check_env(config)
    policy = _build_policy_on_meta(config, env)
    small = estimate(config, env.observation_space, env.action_space, policy, "engram")
    config.n_envs *= 10
    large = estimate(config, env.observation_space, env.action_space, policy, "engram")
    env.close()
    assert large.parts["rollout buffer"] == 10 * small.parts["rollout buffer"]
    assert large.parts["memory windows"] > small.parts["memory windows"]
    need = sum(large.parts.values())
    check_fits(config, large, host=need)
    with pytest.raises(ConfigError, match=r"ppo.n_steps=16, n_envs=40, .* would need about .* of RAM .* but 1.0 KiB"):
        check_fits(config, large, host=1024)
    config.device = "cuda"  # the model and the windows go to the GPU, the buffer and the envs stay in RAM
    on_gpu = large.parts["model"] + large.parts["memory windows"]
    check_fits(config, large, host=need - on_gpu, accelerator=on_gpu)
    with pytest.raises(ConfigError, match=r"of GPU memory \(model .*, memory windows .*\) but 1.0 KiB"):
        check_fits(config, large, host=need, accelerator=1024)


def test_good_settings_pass_and_name_nothing(inputs, capsys):
    config = train_cli.config_from_args(train_cli.make_parser().parse_args([*SMALL, "--log-dir", str(inputs / "r")]))
    assert config.n_envs == 4 and not (inputs / "r").exists()
    validate(build_config(overrides=["device=auto", "ppo.learning_rate=lin_1e-3_1e-4", "gtrxl.attention=knn",
                                     "gtrxl.attention_options={top_k: 2}", "policy.net_arch={pi: [8], vf: [8]}"]))
    assert capsys.readouterr().err == ""
    (inputs / "study.yaml").write_text(yaml.safe_dump({"seeds": 2, "backbones": ["lstm"], "settings": {"n_envs": 4}}))
    directory, configs = Grid.from_file(inputs / "study.yaml", flags={"log_dir": str(inputs / "r")}).study_configs()
    assert [c.seed for c in configs] == [0, 1] and not directory.exists()
