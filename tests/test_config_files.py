"""A configuration file named on the command line: an existing path wins, else a shipped file by its short name
(in the command's folder first), else one line naming the shipped files, exit status 2, for every command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

import train_rl
from experiments.cli import train as train_cli
from experiments.config import ConfigError
from experiments.config_files import config_path, shipped_dir, shipped_names
from experiments.studies import tune
from experiments.studies.tune_space import load_space

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "configs"


@pytest.mark.parametrize("name,folder,file", [
    ("demo", "", "demo.yaml"),
    ("demo.yaml", "", "demo.yaml"),
    ("configs/demo.yaml", "", "demo.yaml"),
    ("studies/demo", "", "studies/demo.yaml"),
    ("demo", "studies", "studies/demo.yaml"),
    ("studies/demo.yaml", "studies", "studies/demo.yaml"),
    ("memory_chain", "studies", "memory_chain.yaml"),
    ("ppo", "tune", "tune/ppo.yaml"),
    ("configs/tune/gtrxl.yaml", "tune", "tune/gtrxl.yaml"),
    ("python", "lm", "lm/python.yaml"),
])
def test_a_short_name_resolves_to_the_shipped_file(name, folder, file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here: the names are shipped files
    assert config_path(name, folder) == str(SHIPPED / file)


def test_an_existing_path_wins_over_a_short_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("demo").write_text("total_timesteps: 64\n")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "demo.yaml").write_text("total_timesteps: 64\n")
    assert config_path("demo") == "demo"
    assert config_path("configs/demo.yaml") == "configs/demo.yaml"
    assert config_path(None) is None


def test_an_unknown_name_is_one_line_naming_the_shipped_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as error:
        config_path("demoo")
    assert str(error.value) == ("config file 'demoo' does not exist, nor is it the name of a shipped run config "
                                f"({', '.join(shipped_names())})")
    assert "demo, memory_chain" in str(error.value)
    with pytest.raises(ConfigError, match=r"shipped study file \(demo, learners, memory"):
        config_path("nope", "studies")


def test_shipped_files_are_the_package_data_and_a_source_tree_finds_its_own(monkeypatch):
    assert shipped_dir() == SHIPPED  # the editable install maps engram.configs onto configs/
    monkeypatch.setitem(sys.modules, "engram.configs", None)  # as when engram was never installed
    assert shipped_dir() == SHIPPED
    assert "demo" in shipped_names() and shipped_names("lm") == ["python"]


@pytest.mark.parametrize("argv", [["--config", "nope"], ["study", "nope"], ["tune", "--config", "nope"],
                                  ["tune", "--space", "nope"], ["tune", "--suite", "nope"],
                                  ["lm", "train", "-c", "nope"]])
def test_every_command_refuses_an_unknown_name_with_exit_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # nothing is written: the name is refused first
    assert train_rl.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config file 'nope' does not exist, nor is it the name of a shipped" in err


def test_run_config_and_study_file_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = train_cli.config_from_args(train_cli.make_parser().parse_args(["--config", "demo"]))
    assert (config.env, config.env_kwargs, config.total_timesteps) == ("TMaze-v0", {"length": 20}, 150000)
    grid = train_cli.grid_from_args(train_cli.make_parser(study_file=True).parse_args(["demo"]))
    assert grid.name == "study_demo"
    assert grid.config_file == str(SHIPPED / "memory_chain.yaml")  # `config: ../memory_chain.yaml`, beside the file
    grid = train_cli.grid_from_args(train_cli.make_parser().parse_args(["--config", "demo", "--seed", "0", "1"]))
    assert yaml.safe_load(yaml.safe_dump(grid.record()))["config"] == str(SHIPPED / "demo.yaml")  # study.yaml's


def test_tune_spaces_and_suite_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = tune.make_parser().parse_args(["--config", "demo", "--space", "ppo", "gtrxl", "--log-dir", str(tmp_path)])
    settings = tune.settings_from_args(args, "")
    assert settings.space == load_space([SHIPPED / "tune" / "ppo.yaml", SHIPPED / "tune" / "gtrxl.yaml"])
    assert tune.SPACE_DIR == SHIPPED / "tune"
    args = tune.make_parser().parse_args(["--suite", "learners", "--log-dir", str(tmp_path)])
    assert len(tune.base_configs(args)) == 2


LONG = "a" * 200_000
DOTTED = ".".join(["a"] * 2_500) + ".b"


@pytest.mark.parametrize(("settings", "starts"), [
    ({"env_wrapper": LONG}, "error: env_wrapper 'aaa"),
    ({"env_wrapper": DOTTED}, "error: env_wrapper 'a.a"),
    ({"policy": {"features_extractor_class": DOTTED}}, "error: policy.features_extractor_class='a.a"),
    ({"gym_packages": [DOTTED]}, "error: gym_packages=['a.a"),
    ({"hyperparams": LONG}, "error: config file 'aaa"),
    ({"init_from": f"/tmp/{LONG}"}, "error: init_from='/tmp/aaa"),
    ({"algo": LONG}, "error: algo='aaa"),
])
def test_a_long_value_in_a_config_file_is_named_in_one_short_line(settings, starts, tmp_path, capsys):
    """Each word of an error line is cut at `WORD_LIMIT` characters (a value shown by `shown` at 100 already);
    the algo is checked before it names a hyper-parameter file, and a path too long to be a file's is a bad input
    (exit 2), not a fault of the machine."""
    file = tmp_path / "long.yaml"
    file.write_text(yaml.safe_dump({"env": "CartPole-v1", **settings}))
    status = train_rl.main(["--config", str(file), "--log-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(starts) and err.count("\n") == 1 and len(err) < 1_000, err[:300]
    assert not (tmp_path / "runs").exists()
