"""A tune search space is checked as `train` checks a run, value by value, before the study directory is made; list
and mapping categories are sampled without Optuna's warning and reach the runs as written."""

from __future__ import annotations

import csv
import warnings

import optuna
import pytest
import yaml

import train_rl
from experiments.config import ConfigError, build_config
from experiments.rules import FolderName
from experiments.studies.tune_space import load_space, parse_param
from tests.test_tune import write_space

CARTPOLE = ["tune", "--env", "CartPole-v1", "--backbone", "mlp", "-n", "64", "--eval-freq", "0",
            "--n-eval-episodes", "1", "--tune-seeds", "1", "-p", "ppo.n_steps=32", "n_eval_envs=1"]


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("key,spec,message", [
    ("n_envs", {"type": "int", "low": 1, "high": 100_000_000}, "n_envs (high): "),
    ("env_kwargs.length", {"type": "int", "low": 0, "high": 3},
     "env_kwargs.length=0 (low): env_kwargs: CartPole-v1 got unexpected keyword argument(s) 'length'"),
    ("env", {"type": "categorical", "choices": ["CartPole-v1", "Nope-v0"]},
     "env (choice 2 of 2): env='Nope-v0': Unknown env id 'Nope-v0'"),
    ("policy.net_arch", {"type": "categorical", "choices": [[64], [0]]}, "policy.net_arch"),
])
def test_a_space_value_a_run_would_refuse_exits_2_before_the_study_is_made(key, spec, message, tmp_path, capsys):
    path = write_space(tmp_path / "s.yaml", {key: spec})
    argv = [*CARTPOLE, "--trials", "1", "--log-dir", str(tmp_path / "runs"), "--name", "x", "--space", path]
    assert train_rl.main(argv) == 2
    line = _err_line(capsys)
    assert line.startswith(f"error: search space {path!r}, ") and message in line
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ValueError, match="search space"):  # the Python API: a ConfigError
        load_space([path]).check(build_config(None, {"env": "CartPole-v1", "backbone": "mlp"}))


def test_an_enqueued_value_a_run_would_refuse_exits_2_before_the_study_is_made(tmp_path, capsys):
    """Both ends of the range pass; 17 is not a multiple of the training segment."""
    path = write_space(tmp_path / "s.yaml", {"ppo.n_steps": {"type": "int", "low": 16, "high": 32}})
    argv = ["tune", "--env", "TMaze-v0", "--backbone", "gtrxl", "-n", "64", "--eval-freq", "0", "--trials", "1",
            "--tune-seeds", "1", "--log-dir", str(tmp_path / "runs"), "--space", path, "--enqueue", "ppo.n_steps=17",
            "-p", "n_envs=1", "n_eval_envs=1", "ppo.segment_length=4", "ppo.batch_size=16"]
    assert train_rl.main(argv) == 2
    assert _err_line(capsys) == ("error: --enqueue ppo.n_steps=17: ppo.n_steps=17: expected a multiple of the training "
                                 "segment, ppo.segment_length=4")
    assert not (tmp_path / "runs").exists()


def test_list_and_mapping_choices_are_sampled_without_a_warning_and_recorded_as_written(tmp_path, capsys):
    choices = [[64, 64], [32]]
    path = write_space(tmp_path / "s.yaml", {"policy.net_arch": {"type": "categorical", "choices": choices}})
    argv = [*CARTPOLE, "--trials", "2", "--log-dir", str(tmp_path), "--name", "x", "--space", path,
            "--enqueue", "policy.net_arch=[32]"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train_rl.main(argv) == 0
    assert not [w for w in caught if "categorical" in str(w.message)]
    assert "categorical" not in capsys.readouterr().err
    study = tmp_path / "tune" / "x"
    rows = list(csv.DictReader((study / "trials.csv").open()))
    assert rows[0]["params_policy.net_arch"] == "[32]"
    for row in rows:
        config = yaml.safe_load((study / f"trial_{int(row['number']):04d}" / "CartPole-v1__ppo-mlp__0" / "config.yaml")
                                .read_text())
        assert config["policy"]["net_arch"] == yaml.safe_load(row["params_policy.net_arch"]) in choices


def test_a_mapping_choice_comes_back_as_the_mapping():
    param = parse_param("policy.net_arch", {"type": "categorical", "choices": [{"pi": [8], "vf": [16]}, [32]]}, "s")
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = param.suggest(trial)
    assert value in param.choices and param.decoded(trial.params[param.key]) == value


def test_a_list_choice_and_the_string_of_its_text_are_refused_together():
    with pytest.raises(ConfigError, match=r"'\[64\]' is given twice; expected distinct choices"):
        parse_param("policy.net_arch", {"type": "categorical", "choices": [[64], "[64]"]}, "s")


@pytest.mark.parametrize("name", ["a\nb", "a\tb", "\x1b[31mred", "a\x7fb", "a\u200bb", "a\u202eb"])
def test_a_folder_name_with_a_control_character_is_refused_shown_with_repr(name, tmp_path, capsys):
    with pytest.raises(ValueError, match="control characters"):
        FolderName().check("name", name)
    study = tmp_path / "study.yaml"
    settings = {"log_dir": str(tmp_path / "runs"), "total_timesteps": 64}
    study.write_text(yaml.safe_dump({"name": name, "settings": settings, "tasks": [{"env": "CartPole-v1"}]}))
    assert train_rl.main(["study", str(study)]) == 2
    assert f"name={name!r}: expected a folder name" in _err_line(capsys)
    space = write_space(tmp_path / "s.yaml", {"ppo.n_epochs": {"type": "int", "low": 1, "high": 2}})
    assert train_rl.main([*CARTPOLE, "--log-dir", str(tmp_path / "runs"), "--name", name, "--space", space]) == 2
    assert f"--name={name!r}: expected a folder name" in _err_line(capsys)
    assert not (tmp_path / "runs").exists()
