"""A learner's or backbone's section given to a command is refused when no run of the command uses it: a single run's
`-p`, a study's `-p` and settings, a tune's `-p` and search space. A section one run of a study uses is kept for the
study; a configuration file's and a hyper-parameter entry's sections are a menu the run picks its own from, and a run
records only the sections it uses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

import train_rl
from experiments import validation
from experiments.config import ConfigError, RunConfig, build_config
from experiments.studies.study import Grid
from experiments.studies.tune_space import SearchSpace, parse_param
from experiments.validation import validate, validate_all

CARTPOLE = {"env": "CartPole-v1", "n_envs": 2, "total_timesteps": 64}


def configured(tmp_path: Path, flags: dict, overrides: list[str], file: str | None = None) -> RunConfig:
    return build_config(file, {**CARTPOLE, "log_dir": str(tmp_path / "runs"), **flags}, overrides)


@pytest.mark.parametrize("flags,overrides,message", [
    ({"algo": "vmpo"}, ["ppo.gamma=0.9"],
     "ppo.gamma=0.9: an option of the learner ppo, but the run uses vmpo, so it would change nothing; valid sections "
     "here: vmpo, gtrxl"),
    ({"backbone": "gru"}, ["gtrxl.d_model=32"],
     "gtrxl.d_model=32: an option of the backbone gtrxl, but the run uses gru, so it would change nothing; valid "
     "sections here: ppo, gru"),
    ({"backbone": "gru"}, ["lstm={hidden_size: 8}"], "lstm.hidden_size=8: an option of the backbone lstm"),
])
def test_single_run_refuses_another_components_section(flags, overrides, message, tmp_path):
    with pytest.raises(ConfigError) as error:
        validate(configured(tmp_path, flags, overrides))
    assert str(error.value) == message or str(error.value).startswith(message)


def test_python_api_refuses_a_section_made_by_hand(tmp_path):
    config = RunConfig(algo="vmpo", backbone="mlp", env="CartPole-v1", log_dir=str(tmp_path),
                       options={"ppo": {"gamma": 0.9}})
    with pytest.raises(ConfigError, match=r"^ppo\.gamma=0\.9: an option of the learner ppo, but the run uses vmpo"):
        validate(config)


@pytest.mark.parametrize("argv,message", [
    (["--algo", "vmpo", "-p", "ppo.gamma=0.9"], "error: ppo.gamma=0.9: an option of the learner ppo, but the run "
                                                "uses vmpo, so it would change nothing; valid sections here: vmpo"),
    (["--backbone", "gru", "lstm", "-p", "gtrxl.d_model=32"],
     "error: gtrxl.d_model=32: an option of the backbone gtrxl, but the runs use gru, lstm, so it would change "
     "nothing; valid sections here: ppo, gru, lstm"),
])
def test_cli_exits_2_and_creates_nothing(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(train_rl.main(["--env", "CartPole-v1", "-n", "64", "--log-dir", str(tmp_path / "runs"), *argv]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(message)
    assert not (tmp_path / "runs").exists()


def test_config_file_sections_are_a_menu_and_a_run_records_its_own(tmp_path):
    file = tmp_path / "menu.yaml"
    file.write_text(yaml.safe_dump({"algo": "vmpo", "backbone": "gru", "ppo": {"gamma": 0.9},
                                    "vmpo": {"gamma": 0.95}, "gru": {"hidden_size": 8}, "lstm": {"hidden_size": 8}}))
    config = configured(tmp_path, {}, [], str(file))
    assert config.options == {"vmpo": {"gamma": 0.95}, "gru": {"hidden_size": 8}}
    validate(config)
    picked = configured(tmp_path, {"algo": "ppo", "backbone": "lstm"}, [], str(file))
    assert picked.options == {"ppo": {"gamma": 0.9}, "lstm": {"hidden_size": 8}}


def test_config_file_menu_still_checks_every_key(tmp_path):
    file = tmp_path / "menu.yaml"
    file.write_text(yaml.safe_dump({"backbone": "gru", "lstm": {"hidden_sise": 8}}))
    with pytest.raises(ConfigError, match="unknown option 'hidden_sise' for lstm"):
        configured(tmp_path, {}, [], str(file))


def test_multi_backbone_study_keeps_a_section_one_backbone_uses(tmp_path):
    grid = Grid(flags={**CARTPOLE, "log_dir": str(tmp_path)}, params=["gtrxl.d_model=32"], backbones=["gru", "gtrxl"])
    _, configs = grid.study_configs()
    by_backbone = {config.backbone: config for config in configs}
    assert by_backbone["gtrxl"].options["gtrxl"] == {"d_model": 32}
    assert "gtrxl" not in by_backbone["gru"].options  # each run records what it uses
    for config in configs:  # and is valid alone, as train and a resume check it
        validate(config)


@pytest.mark.parametrize("grid", [
    {"params": ["lstm.hidden_size=8"]},
    {"settings": {"lstm": {"hidden_size": 8}}},
    {"tasks": [{"env": "CartPole-v1", "lstm": {"hidden_size": 8}}], "listed": True},
])
def test_study_refuses_a_section_no_run_uses(grid, tmp_path):
    study = Grid(flags={**CARTPOLE, "log_dir": str(tmp_path / "runs")}, backbones=["gru", "gtrxl"], **grid)
    with pytest.raises(ConfigError, match=r"^lstm\.hidden_size=8: an option of the backbone lstm, but the runs use "
                                          r"gru, gtrxl, so it would change nothing; valid sections here: ppo, gru, "
                                          r"gtrxl$"):
        study.study_configs()
    assert not (tmp_path / "runs").exists()


def test_validate_all_checks_over_every_run_and_keeps_each_runs_own(tmp_path):
    gru, gtrxl = (configured(tmp_path, {"backbone": name}, ["gtrxl.d_model=32"]) for name in ("gru", "gtrxl"))
    with pytest.raises(ConfigError, match="gtrxl.d_model=32: an option of the backbone gtrxl, but the run uses gru"):
        validation.check_sections_used([gru])
    validate_all([gru, gtrxl])
    assert "gtrxl" not in gru.options
    assert gtrxl.options["gtrxl"] == {"d_model": 32}


@pytest.mark.parametrize("backbone", ["lstm", "gtrxl", "mlp"])
def test_hyperparameter_entry_sections_are_not_refused(backbone, tmp_path):
    """The shipped entry of TMaze-v0 (length >= 100) holds a section for each of several backbones."""
    entry = yaml.safe_load(Path("configs/hyperparams/ppo.yml").read_text())["TMaze-v0"]
    assert {"gtrxl", "lstm", "gru", "mlp"} <= set(entry)
    config = build_config(None, {"env": "TMaze-v0", "env_kwargs": {"length": 100}, "backbone": backbone,
                                 "log_dir": str(tmp_path)})
    assert config.hyperparams == "configs/hyperparams/ppo.yml#TMaze-v0"
    assert set(config.options) == {"ppo", backbone}  # the run takes its own sections of the entry
    assert config.options[backbone] == entry[backbone]
    validate(config)
    validate_all([config, build_config(None, {"env": "TMaze-v0", "env_kwargs": {"length": 100},
                                              "backbone": "gru", "log_dir": str(tmp_path)})])


def test_tune_refuses_a_section_of_another_learner(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(train_rl.main(["tune", "--env", "CartPole-v1", "--algo", "vmpo", "--backbone", "mlp", "-n", "64",
                                "--log-dir", str(tmp_path / "runs"), "-p", "ppo.gamma=0.9"]))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "error: ppo.gamma=0.9: an option of the learner ppo, but the run uses vmpo")
    assert not (tmp_path / "runs").exists()


def test_tune_space_follows_the_same_rule_over_its_tasks(tmp_path):
    space = SearchSpace([parse_param("gtrxl.d_model", {"type": "categorical", "choices": [16, 32]}, "s.yaml")])
    gru, gtrxl = (configured(tmp_path, {"backbone": name}, []) for name in ("gru", "gtrxl"))
    with pytest.raises(ConfigError, match=r"^search space 's\.yaml', gtrxl\.d_model: an option of the backbone gtrxl, "
                                          r"but the runs use gru, so it would change nothing; valid sections here: "
                                          r"ppo, gru$"):
        space.check(gru)
    space.check([gru, gtrxl])  # a task of the tune uses it
