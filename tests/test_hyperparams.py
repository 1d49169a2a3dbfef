"""Hyper-parameter files (rl-zoo3's ``hyperparams/<algo>.yml``): an env with an entry starts from it, named on one
line and recorded in the run's settings; ``--hyperparams none`` turns it off; the entry lies under the config file,
flags and ``-p``; an exact id beats a pattern and conditions choose; a bad entry is refused naming the file, the
entry and the key; a run resumes only from the entry it was made from; studies and tune resolve the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import train_rl
from experiments.cli import train as train_cli
from experiments.config import ConfigError, build_config
from experiments.config_files import config_path
from experiments.hyperparams import applied_line, load
from experiments.run_dir import RunDirectory
from experiments.run_identity import config_record
from experiments.studies import tune
from experiments.studies.study import Grid

SHIPPED = "configs/hyperparams/ppo.yml"
"""the shipped PPO file as a run records it"""
TMAZE100 = config_path("tmaze100")


def entries(tmp_path: Path, data: dict[str, Any], name: str = "hyperparams.yml") -> str:
    """A hyper-parameter file holding ``data``."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def resolved(argv: list[str], capsys) -> tuple[Any, str]:
    """The validated configuration of ``train_rl.py ARGV`` and what it printed on stderr."""
    config = train_cli.config_from_args(train_cli.make_parser().parse_args(argv))
    return config, capsys.readouterr().err


def test_an_env_with_an_entry_starts_from_it_named_on_one_line(capsys):
    config, err = resolved(["--config", "tmaze100"], capsys)
    assert config.hyperparams == f"{SHIPPED}#TMaze-v0"
    assert (config.n_envs, config.eval_freq, config.solved_lr_factor) == (16, 40_000, 0.1)
    assert config.algo_options()["uniform_kl_coef"] == 0.003 and config.backbone_options()["memory_length"] == 128
    lines = err.splitlines()
    assert lines == [f"hyperparams: {SHIPPED}#TMaze-v0 applies under --config, flags and -p "
                     "(--hyperparams none: without it)"]


def test_hyperparams_none_starts_from_the_defaults_and_says_nothing(capsys):
    config, err = resolved(["--config", "tmaze100", "--hyperparams", "none"], capsys)
    assert config.hyperparams == "none" and config.env_kwargs == {"length": 100}
    assert (config.n_envs, config.eval_freq, config.solved_lr_factor) == (16, 10_000, 1.0)
    assert "uniform_kl_coef" not in config.algo_options() and "hyperparams" not in err


def test_a_run_records_the_entry_it_started_from(tmp_path, capsys):
    file = entries(tmp_path, {"TMaze-v0": {
        "n_envs": 4, "eval_freq": 64, "n_eval_episodes": 4, "n_eval_envs": 2, "checkpoint_freq": 0,
        "ppo": {"n_steps": 16, "batch_size": 32, "n_epochs": 1, "segment_length": 4},
        "gtrxl": {"memory_length": 4, "d_model": 16, "n_heads": 2}}})
    argv = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "-n", "64", "--threads", "1", "--hyperparams", file,
            "--log-dir", str(tmp_path / "runs")]
    assert train_rl.main(argv) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("hyperparams:")] == [
        f"hyperparams: {file}#TMaze-v0 applies under --config, flags and -p (--hyperparams none: without it)"]
    saved = yaml.safe_load((tmp_path / "runs" / "TMaze-v0__ppo-gtrxl__0" / "config.yaml").read_text())
    assert saved["hyperparams"] == f"{file}#TMaze-v0" and saved["n_envs"] == 4 and saved["ppo"]["n_steps"] == 16


def test_precedence_entry_config_file_flags_overrides(tmp_path):
    file = entries(tmp_path, {"TMaze-v0": {"eval_freq": 1000, "n_eval_episodes": 7, "n_envs": 2,
                                           "ppo": {"gamma": 0.5, "gae_lambda": 0.5, "ent_coef": 0.5}}})
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump({"env": "TMaze-v0", "hyperparams": file, "n_eval_episodes": 9, "n_envs": 3,
                                           "ppo": {"gamma": 0.6, "gae_lambda": 0.6}}))
    config = build_config(config_file, {"n_envs": 4}, ["ppo.gamma=0.7"])
    assert config.eval_freq == 1000  # the entry alone
    assert config.n_eval_episodes == 9  # the config file over the entry
    assert config.n_envs == 4  # a flag over both
    ppo = config.algo_options()
    assert (ppo["ent_coef"], ppo["gae_lambda"], ppo["gamma"]) == (0.5, 0.6, 0.7)  # -p over everything


def test_the_exact_id_beats_a_pattern_and_conditions_choose(tmp_path):
    file = entries(tmp_path, {
        "T*": {"n_envs": 1},
        "TMaze*": {"n_envs": 2},
        "TMaze-v0": {"when": {"env_kwargs.length": ">= 100"}, "n_envs": 3},
        "TMaze?v0": {"n_envs": 4},
        "TMaze-v?": {"n_envs": 5},
    })

    def entry(env: str, **kwargs: Any) -> str:
        config = build_config(None, {"env": env, "hyperparams": file, **kwargs})
        return config.hyperparams.rpartition("#")[2]

    assert entry("TMaze-v0", env_kwargs={"length": 100}) == "TMaze-v0"  # the exact id
    assert entry("TMaze-v0", env_kwargs={"length": 99}) == "TMaze?v0"  # its condition fails: the most literal pattern,
    assert entry("TMaze-v0") == "TMaze?v0"  # the first of equals; a key the run does not set fails the condition
    assert entry("TMazeActive-v0") == "TMaze*" and entry("Tetris") == "T*"
    assert build_config(None, {"env": "CartPole-v1", "hyperparams": file}).hyperparams == "none"
    forced = build_config(None, {"env": "CartPole-v1", "hyperparams": f"{file}#TMaze*"})
    assert (forced.hyperparams, forced.n_envs) == (f"{file}#TMaze*", 2)  # FILE#KEY applies whatever the env


@pytest.mark.parametrize("entry,message", [
    ({"ppo": {"gamma": 2.0}}, "ppo.gamma=2.0: expected a number in [0, 1]"),
    ({"ppo": {"gama": 0.9}}, "unknown option 'gama' for ppo"),
    ({"n_envs": 0}, "n_envs=0: expected an integer >= 1"),
    ({"seed": 3}, "seed is not a setting of an entry"),
    ({"when": {"env_kwargs.length": ">= long"}}, "compares with 'long', not a number"),
    ({"when": {"colour": "blue"}}, "when: 'colour' is not a run setting"),
])
def test_a_bad_entry_is_refused_naming_the_file_entry_and_key(entry, message, tmp_path, capsys):
    file = entries(tmp_path, {"MemoryChain-v0": {"n_envs": 4}, "TMaze-v0": entry})
    with pytest.raises(ConfigError) as error:
        build_config(None, {"env": "MemoryChain-v0", "hyperparams": file})  # the file is checked whole
    assert str(error.value).startswith(f"hyper-parameter file {file!r}, entry 'TMaze-v0': ")
    assert message in str(error.value)
    assert train_rl.main(["--env", "MemoryChain-v0", "--hyperparams", file, "-n", "64",
                          "--log-dir", str(tmp_path / "runs")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_an_unknown_file_or_entry_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"nor is it the name of a shipped hyper-parameter file \(ppo, vmpo\)"):
        build_config(None, {"hyperparams": "ppo2"})
    with pytest.raises(ConfigError, match=r"has no entry 'Nope'; its entries: MiniGrid-Memory\*, MiniGrid-MemoryS9"):
        build_config(None, {"hyperparams": "ppo#Nope"})


def test_every_shipped_entry_passes_the_training_checks():
    for name in ("ppo", "vmpo"):
        shipped = load(config_path(name, "hyperparams"))
        shipped.check_values()
        assert {"MiniGrid-Memory*", "MiniGrid-MemoryS9-v0", "TMaze-v0", "Pendulum-v1"} <= {
            entry.key for entry in shipped.entries}


def test_a_run_resumes_only_from_the_entry_it_was_made_from(tmp_path):
    config = build_config(TMAZE100)
    saved = tmp_path / "config.yaml"
    RunDirectory(tmp_path).write_config(config_record(config))
    RunDirectory(tmp_path).check_same_run(build_config(TMAZE100))
    other = build_config(TMAZE100, {"hyperparams": f"{SHIPPED}#TMaze-v0"})
    RunDirectory(tmp_path).check_same_run(other)  # the same entry, named
    with pytest.raises(ConfigError, match=r"hyperparams \('configs/hyperparams/ppo.yml#TMaze-v0' in the run, 'none' "
                                          r"now\)"):
        RunDirectory(tmp_path).check_same_run(build_config(TMAZE100, {"hyperparams": "none"}))
    unrecorded = yaml.safe_load(saved.read_text())
    del unrecorded["hyperparams"]  # a run made before runs recorded their entry: its values alone are compared
    saved.write_text(yaml.safe_dump(unrecorded))
    RunDirectory(tmp_path).check_same_run(config)


def test_a_study_resolves_each_run_and_names_the_entries_on_one_line(tmp_path):
    grid = Grid(tasks=[{"env": "TMaze-v0", "env_kwargs": {"length": 100}}, {"env": "MemoryChain-v0"},
                       {"env": "TMaze-v0", "env_kwargs": {"length": 200}, "hyperparams": "none"}],
                seeds=[0, 1], flags={"log_dir": str(tmp_path)})
    _, configs = grid.study_configs()
    assert [config.hyperparams for config in configs] == [f"{SHIPPED}#TMaze-v0"] * 2 + ["none"] * 4
    assert [config.eval_freq for config in configs] == [40_000] * 2 + [10_000] * 4
    assert applied_line([config.hyperparams for config in configs]) == (
        f"hyperparams: {SHIPPED}#TMaze-v0 (2 of 6 runs) applies under --config, flags and -p "
        "(--hyperparams none: without it)")


def test_tune_resolves_its_base_configuration_the_same_way():
    args = tune.make_parser().parse_args(["--config", "minigrid_memory_s9"])
    (base,) = tune.base_configs(args)
    assert base.hyperparams == f"{SHIPPED}#MiniGrid-MemoryS9-v0" and base.env_kwargs["actions"] == "navigation"
    args = tune.make_parser().parse_args(["--config", "minigrid_memory_s9", "--hyperparams", "none"])
    assert tune.base_configs(args)[0].env_kwargs == {}


def test_a_keyword_argument_an_entry_misspells_is_named_with_the_entry(tmp_path, capsys):
    entries = tmp_path / "h.yml"
    entries.write_text("MountainCar-v0:\n  env_kwargs: {goal_velocty: 1}\n")
    assert train_rl.main(["--env", "MountainCar-v0", "--hyperparams", str(entries), "-n", "32",
                          "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "unexpected keyword argument(s) 'goal_velocty'" in err and err.rstrip().endswith(
        f"(env_kwargs.goal_velocty from hyper-parameter file '{entries}', entry 'MountainCar-v0')"), err
    assert not (tmp_path / "runs").exists()
