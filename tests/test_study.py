"""Seed studies: grids from the command line and from study files, a 2 × 2 study through the
process pool, failures recorded without stopping the study, a study killed mid-way (SIGKILL)
and rerun, and the Ray launcher."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_cli import REPO, TINY

import experiments.studies.study
import experiments.training
import train_rl
from experiments.cli import train as train_cli
from experiments.config import ConfigError
from experiments.studies.runs import DIVERGED, FAILED, FINISHED, INTERRUPTED, NEW, Run, write_status
from experiments.studies.study import Grid, Progress, RunTask, execute, plan

STUDY = [*TINY, "--reps", "100"]
PARAMS = TINY[TINY.index("-p"):]  # the -p overrides of TINY, to extend (a later -p replaces them)
LSTM_STUDY, LSTM_PARAMS = ([arg for arg in args if not arg.startswith("gtrxl.")] for args in (STUDY, PARAMS))
"""STUDY and PARAMS for studies of lstm runs alone (a gtrxl option no run uses is refused)"""


def in_process(fn, items, *args, **kwargs):
    """A launcher that runs everything here, one after the other (for tests of the study logic)."""
    return ((i, fn(item)) for i, item in enumerate(items))


def runs_table(study: Path) -> str:
    return (study / "report.md").read_text().split("## Runs")[1]


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_study_file_grid(tmp_path):
    file = tmp_path / "memory.yaml"
    file.write_text(yaml.safe_dump({
        "settings": {"total_timesteps": 1000, "n_envs": 4, "env_kwargs": {"length": 5}, "lstm": {"hidden_size": 8},
                     "ppo": {"batch_size": 128}},
        "tasks": [{"env": "TMaze-v0", "env_kwargs": {"length": 7}}, {"env": "MemoryChain-v0", "n_envs": 2}],
        "backbones": ["lstm", "gru"], "seeds": 2}))
    grid = Grid.from_file(file, flags={"log_dir": str(tmp_path / "runs"), "total_timesteps": 500})
    directory, configs = grid.study_configs()
    assert directory == tmp_path / "runs" / "memory"
    assert [(c.env, c.backbone, c.seed) for c in configs] == [
        (env, backbone, seed) for env in ("TMaze-v0", "MemoryChain-v0") for backbone in ("lstm", "gru")
        for seed in (0, 1)]
    assert {c.log_dir for c in configs} == {str(directory)} and {c.threads for c in configs} == {1}
    tmaze, chain = configs[0], configs[-1]
    assert tmaze.env_kwargs == {"length": 7} and chain.env_kwargs == {"length": 5}  # the task over settings
    assert (tmaze.n_envs, chain.n_envs) == (4, 2) and {c.total_timesteps for c in configs} == {500}  # flags win
    assert tmaze.backbone_options() == {"hidden_size": 8}

    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"n_envs": 8, "env_kwargs": {"length": 9}}))
    file.write_text(yaml.safe_dump({"settings": {"env": "TMaze-v0"},
                                    "tasks": [{"env_kwargs": {"length": 3}}, {"config": "base.yaml"}]}))
    directory, configs = Grid.from_file(file, flags={"log_dir": str(tmp_path)}).study_configs()
    assert [(c.n_envs, c.env_kwargs["length"]) for c in configs] == [(16, 3), (8, 9)]  # a task's own config file
    assert [Path(c.log_dir).name for c in configs] == ["TMaze_v0_length_3", "TMaze_v0_length_9"]  # same env id

    file.write_text(yaml.safe_dump({"tasks": [{"env": "Pendulum-v1", "env_kwargs": {"g": g}} for g in (10.0, -10.0)]}))
    directory, configs = Grid.from_file(file, flags={"log_dir": str(tmp_path)}).study_configs()
    first, second = (Path(c.log_dir).name for c in configs)  # both slugs read g_10.0: the later one gets a digest
    assert first == "Pendulum_v1_g_10.0" and second.startswith("Pendulum_v1_g_10.0_") and first != second

    file.write_text(yaml.safe_dump({"backbone": ["lstm"]}))
    with pytest.raises(ConfigError, match="unknown key.*'backbone'.*valid keys: name, config"):
        Grid.from_file(file)
    file.write_text(yaml.safe_dump({"seeds": [0, 0]}))
    with pytest.raises(ConfigError, match="more than once"):
        Grid.from_file(file).study_configs()
    assert train_rl.main(["study", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize("study,message", [
    ({"settings": {"backbone": "lstm"}, "tasks": [{"env": "CartPole-v1"}], "backbones": ["mlp"]},
     "settings.backbone='lstm': the study's backbones (mlp) set the backbone of every run; list backbones under "
     "backbones: (or --backbone) instead"),
    ({"tasks": [{"env": "CartPole-v1", "backbone": "lstm"}], "backbones": ["mlp"]}, "tasks[0].backbone='lstm'"),
    ({"tasks": [{"env": "CartPole-v1", "seed": 5}], "seeds": [0, 1]}, "tasks[0].seed=5: the study's seeds ([0, 1])"),
    ({"settings": {"seed": 5}, "seeds": 2}, "settings.seed=5: the study's seeds ([0, 1])"),
    ({"settings": {"threads": 4}}, "settings.threads=4: the study runs every run with one torch thread, or the "
                                   "--threads given; give --threads instead"),
    ({"tasks": [{"env": "CartPole-v1", "threads": 2}]}, "tasks[0].threads=2"),
    ({"tasks": [{"env": "CartPole-v1", "log_dir": "elsewhere"}]},
     "tasks[0].log_dir='elsewhere': every run of the study goes under {log_dir}/{name}/; set log_dir under settings: "
     "(or --log-dir) instead"),
    ({"tasks": [{"env_kwargs": {}}]}, "tasks[0]={'env_kwargs': {}}: no env (it would train the default, TMaze-v0); "
                                      "set env: in the task"),
    ({"tasks": [{"env": "CartPole-v1"}, {}]}, "tasks[1]={}: no env"),
    ({"tasks": [{}]}, "tasks[0]={}: no env (it would train the default, TMaze-v0)"),  # not the grid's default task
])
def test_a_key_the_study_sets_itself_or_a_task_without_env_exits_2(study, message, tmp_path, capsys):
    """Keys the study overwrites in every run are refused where a study file sets them, as is a task that names no
    env, with one line and before anything is made."""
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump(study))
    assert train_rl.main(["study", str(file), "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "runs").exists()


def test_a_task_takes_its_env_from_settings_flags_or_its_config_file(tmp_path):
    (tmp_path / "base.yaml").write_text("env: CartPole-v1\n")
    file = tmp_path / "study.yaml"
    for study, flags in (({"settings": {"env": "CartPole-v1"}, "tasks": [{"n_envs": 2}]}, {}),
                         ({"tasks": [{"n_envs": 2}]}, {"env": "CartPole-v1"}),
                         ({"tasks": [{"config": "base.yaml", "n_envs": 2}]}, {}),
                         ({"config": "base.yaml", "tasks": [{"n_envs": 2}]}, {})):
        file.write_text(yaml.safe_dump(study))
        (config,) = Grid.from_file(file, flags=flags).configs()
        assert (config.env, config.n_envs) == ("CartPole-v1", 2)
    file.write_text(yaml.safe_dump({"tasks": [{"n_envs": 2}]}))
    assert Grid.from_file(file, params=["env=CartPole-v1"]).configs()[0].env == "CartPole-v1"
    file.write_text(yaml.safe_dump({"settings": {"env": "CartPole-v1"}, "tasks": [{}]}))
    assert [c.env for c in Grid.from_file(file).configs()] == ["CartPole-v1"]


def test_grid_from_the_command_line(tmp_path):
    args = train_cli.make_parser().parse_args([*TINY, "--log-dir", str(tmp_path), "--backbone", "gtrxl", "lstm",
                                              "--seed", "0", "1", "2", "--threads", "2"])
    directory, configs = train_cli.grid_from_args(args).study_configs()
    assert directory == tmp_path / "TMaze-v0__ppo"
    assert [c.run_name() for c in configs] == [f"TMaze-v0__ppo-{b}__{s}" for b in ("gtrxl", "lstm") for s in (0, 1, 2)]
    assert {c.threads for c in configs} == {2} and {c.env_kwargs["length"] for c in configs} == {3}
    args = train_cli.make_parser().parse_args([*TINY, "--log-dir", str(tmp_path), "--seed", "0", "1"])
    assert {c.threads for c in train_cli.grid_from_args(args).study_configs()[1]} == {1}  # one thread per worker


def test_failures_are_recorded_and_the_study_goes_on(tmp_path, monkeypatch, capsys):
    """A run that diverges and one that raises are recorded in status.json; the others finish,
    the report counts them, the exit status is 3, and a rerun leaves them alone unless asked."""
    monkeypatch.setattr(experiments.studies.study, "launch", in_process)
    build_model = experiments.training.build_model

    def fail_for_gtrxl(config, *args):  # a failure inside the run: bad settings are refused before the study
        if config.backbone == "gtrxl":
            raise ConfigError("cannot build ppo with backbone gtrxl")
        return build_model(config, *args)

    monkeypatch.setattr(experiments.training, "build_model", fail_for_gtrxl)
    argv = [*STUDY, "--log-dir", str(tmp_path), "-n", "64", "--eval-freq", "0", "--backbone", "gtrxl", "lstm",
            "--seed", "0", *PARAMS]
    assert train_rl.main(argv) == 3
    study = tmp_path / "TMaze-v0__ppo"
    gtrxl, lstm = Run(study / "TMaze-v0__ppo-gtrxl__0"), Run(study / "TMaze-v0__ppo-lstm__0")
    assert gtrxl.state() == FAILED and "ConfigError" in gtrxl.error() and lstm.state() == FINISHED
    assert "| TMaze-v0__ppo-gtrxl__0 | failed |" in runs_table(study)
    assert "failed TMaze-v0__ppo-gtrxl__0: ConfigError" in capsys.readouterr().err

    monkeypatch.setattr(experiments.training, "build_model", build_model)
    config = train_cli.grid_from_args(train_cli.make_parser().parse_args(
        [*TINY, "--log-dir", str(tmp_path / "nan"), "-n", "4096", *PARAMS, "ppo.learning_rate=1e30",
         "ppo.max_grad_norm=1e30"])).configs()[0]
    outcome = execute(RunTask(config, resume=False, session="test"))
    diverged = Run(tmp_path / "nan" / config.run_name())
    assert outcome["state"] == diverged.state() == DIVERGED and "non-finite" in diverged.error()
    assert diverged.summary is None and diverged.checkpoint() is not None

    configs = train_cli.grid_from_args(train_cli.make_parser().parse_args(argv)).study_configs()[1]
    assert [t.config.backbone for t in plan(configs, "s")[0]] == []
    assert [(t.config.backbone, t.resume) for t in plan(configs, "s", retry_failed=True)[0]] == [("gtrxl", False)]


def test_a_study_refuses_runs_of_another_configuration(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(experiments.studies.study, "launch", in_process)
    argv = [*LSTM_STUDY, "--log-dir", str(tmp_path), "-n", "64", "--eval-freq", "0", "--backbone", "lstm", "--study",
            "s"]
    assert train_rl.main([*argv, "--no-report"]) == 0
    assert train_rl.main([*argv, *LSTM_PARAMS, "lstm.hidden_size=8"]) == 2
    assert ("already holds a run of another configuration (differs in: lstm.hidden_size (128 in the run, 8 now))"
            in capsys.readouterr().err)
    # a run saved before a setting existed behaved as its default: it is the same configuration, but not
    # when the default would differ (mutation caught: the saved file read without the defaults)
    saved = tmp_path / "s" / "TMaze-v0__ppo-lstm__0" / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    assert config.pop("precision") == "fp32"
    saved.write_text(yaml.safe_dump(config))
    assert train_rl.main([*argv, "--no-report"]) == 0
    assert train_rl.main([*argv, "--precision", "bf16"]) == 2
    assert "differs in: precision ('fp32' in the run, 'bf16' now)" in capsys.readouterr().err


def test_a_run_killed_before_its_first_checkpoint_starts_afresh(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments.studies.study, "launch", in_process)
    argv = [*LSTM_STUDY, "--log-dir", str(tmp_path), "-n", "64", "--backbone", "lstm", "--study", "s", "--no-report"]
    assert train_rl.main(argv) == 0
    run = tmp_path / "s" / "TMaze-v0__ppo-lstm__0"
    for stale in ("summary.json", "model.zip"):
        (run / stale).unlink()
    for checkpoint in (run / "checkpoints").iterdir():
        checkpoint.unlink()
    assert Run(run).state(64) == NEW and Run(run).evaluations
    assert train_rl.main(argv) == 0
    assert [int(r["timesteps"]) for r in csv.DictReader((run / "evaluations.csv").open())] == [64]
    assert json.loads((run / "summary.json").read_text())["resumed_from"] is None


def test_progress_counts_runs_from_their_status_files(tmp_path):
    configs = Grid(flags={"log_dir": str(tmp_path)}, seeds=[0, 1, 2, 3, 4]).study_configs()[1]
    tasks = [RunTask(c, resume=False, session="now") for c in configs]
    write_status(tmp_path / "TMaze-v0__ppo" / configs[2].run_name(), "running", session="now")
    write_status(tmp_path / "TMaze-v0__ppo" / configs[3].run_name(), "running", session="an earlier one")
    progress = Progress(tasks)
    assert progress.counts({0: {"state": FINISHED}, 1: {"state": DIVERGED}}) == (1, 1, 1, 2)
    assert "1/5 done, 1 running, 1 failed, 2 queued" in progress.line((1, 1, 1, 2))


def test_two_by_two_study_through_the_process_pool(tmp_path, capsys):
    argv = [*STUDY, "--log-dir", str(tmp_path), "-n", "128", "--backbone", "gtrxl", "lstm", "--seed", "0", "1",
            "--workers", "2"]
    assert train_rl.main(argv) == 0
    study = tmp_path / "TMaze-v0__ppo"
    runs = sorted(study.glob("TMaze-v0__ppo-*"))
    assert [r.name for r in runs] == [f"TMaze-v0__ppo-{b}__{s}" for b in ("gtrxl", "lstm") for s in (0, 1)]
    workers = set()
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        status = json.loads((run / "status.json").read_text())
        assert summary["env_steps"] == 128 and summary["torch_threads"] == 1 and status["state"] == FINISHED
        assert [int(r["timesteps"]) for r in csv.DictReader((run / "evaluations.csv").open())] == [64, 128]
        workers.add(status["pid"])
    assert os.getpid() not in workers  # trained in worker processes
    record = yaml.safe_load((study / "study.yaml").read_text())
    assert record["runs"] == [r.name for r in runs] and "--backbone gtrxl lstm" in record["commands"][0]["command"]
    table = runs_table(study)
    assert all(table.count(f"| {r.name} | finished |") == 1 for r in runs)
    assert (study / "curves_TMaze_v0_length_3.png").exists() and (study / "scores_TMaze_v0_length_3.png").exists()
    err = capsys.readouterr().err
    assert "4/4 done, 0 running, 0 failed, 0 queued" in err and "steps/s" in err


def test_a_rerun_on_a_subset_adds_to_the_recorded_grid(tmp_path):
    """``study.yaml`` records what the study covers: a second command on other seeds and one backbone
    adds them to the grid instead of replacing it, and each command keeps the grid it ran."""
    base = [*STUDY, "--log-dir", str(tmp_path), "-n", "64", "--workers", "1"]
    assert train_rl.main([*base, "--backbone", "gtrxl", "lstm", "--seed", "0"]) == 0
    lstm_only = [arg for arg in base if not arg.startswith("gtrxl.")]  # a gtrxl option no run uses is refused
    assert train_rl.main([*lstm_only, "--backbone", "lstm", "--seed", "1", "2", "--no-report"]) == 0
    text = (tmp_path / "TMaze-v0__ppo" / "study.yaml").read_text()
    record = yaml.safe_load(text)
    assert record["grid"]["backbones"] == ["gtrxl", "lstm"] and record["grid"]["seeds"] == [0, 1, 2]
    assert [c["grid"]["seeds"] for c in record["commands"]] == [[0], [1, 2]] and "&id" not in text
    assert record["runs"] == [f"TMaze-v0__ppo-{run}" for run in ("gtrxl__0", "lstm__0", "lstm__1", "lstm__2")]


@pytest.mark.slow  # long: run by make test-slow
def test_killed_study_resumes_without_redoing_finished_runs(tmp_path):
    """SIGKILL the study while its second run trains (one worker): the orphaned worker exits; the
    rerun keeps the first run as it is, resumes the second from its checkpoint and runs the third."""
    total = 512
    argv = [*STUDY, "--log-dir", str(tmp_path), "-n", str(total), "--backbone", "gtrxl", "--seed", "0", "1", "2",
            "--workers", "1"]
    process = subprocess.Popen([sys.executable, str(REPO / "train_rl.py"), *argv], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    study = tmp_path / "TMaze-v0__ppo"
    first, second, third = (study / f"TMaze-v0__ppo-gtrxl__{seed}" for seed in range(3))
    deadline = time.time() + 180
    while time.time() < deadline and not ((first / "summary.json").exists() and Run(second).checkpoint()):
        assert process.poll() is None, process.stderr.read().decode()
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert Run(second).state(total) == INTERRUPTED, "the second run finished before the study could be killed"
    assert Run(first).state(total) == FINISHED and Run(third).state(total) == NEW
    worker = json.loads((second / "status.json").read_text())["pid"]
    deadline = time.time() + 60
    while alive(worker) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(worker), "the worker outlived the killed study"

    kept = {path: path.stat().st_mtime_ns for path in (first / "summary.json", first / "model.zip")}
    checkpoint = Run(second).checkpoint()[1]
    assert train_rl.main(argv) == 0
    assert {path: path.stat().st_mtime_ns for path in kept} == kept, "a finished run was redone"
    summary = json.loads((second / "summary.json").read_text())
    assert summary["resumed_from"] == checkpoint and summary["env_steps"] == total
    steps = [int(r["timesteps"]) for r in csv.DictReader((second / "evaluations.csv").open())]
    assert steps == list(range(64, total + 1, 64))
    assert Run(third).state(total) == FINISHED
    table = runs_table(study)
    assert all(table.count(f"| {run.name} |") == 1 for run in (first, second, third))
    assert "3 runs: 3 finished." in (study / "report.md").read_text()
    assert len(yaml.safe_load((study / "study.yaml").read_text())["commands"]) == 2


def test_ray_launcher_says_how_to_install_ray(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    assert train_rl.main([*STUDY, "--log-dir", str(tmp_path), "--seed", "0", "1", "--launcher", "ray"]) == 1
    assert "pip install '.[ray]'" in capsys.readouterr().err


@pytest.mark.slow
def test_ray_launcher_runs_the_study(tmp_path):
    pytest.importorskip("ray")
    argv = [*STUDY, "--log-dir", str(tmp_path), "-n", "128", "--backbone", "gtrxl", "lstm", "--seed", "0", "1",
            "--launcher", "ray"]
    assert train_rl.main(argv) == 0
    study = tmp_path / "TMaze-v0__ppo"
    runs = sorted(study.glob("TMaze-v0__ppo-*"))
    assert len(runs) == 4 and all(Run(run).state(128) == FINISHED for run in runs)
    assert "4 runs: 4 finished." in (study / "report.md").read_text()
