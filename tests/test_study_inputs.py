"""Inputs of `study`, `tune`, `report` and `plot`: tasks scored by return, the steps a study's runs train, an
empty or blocked log directory, a storage that cannot be written, and the lines these commands print."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import warnings

import optuna
import pytest
import sqlalchemy.exc
import yaml

import train_rl
from experiments.config import ConfigError, build_config
from experiments.studies import tune
from experiments.studies.report import Study, build_report, outcome
from experiments.studies.runs import Run
from experiments.studies.study import Grid, Progress, RunTask, execute
from tests.test_report import fake_run
from tests.test_tune import SPACE, TINY, write_space

CARTPOLE = {"env": "CartPole-v1", "backbone": "mlp", "n_envs": 3, "n_eval_envs": 1, "n_eval_episodes": 1,
            "eval_freq": 10_000, "checkpoint_freq": 0, "total_timesteps": 100}


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# -- tasks scored by return ----------------------------------------------------------------------------------------


def test_a_return_scored_task_has_no_solved_outcome_unless_a_threshold_is_given(tmp_path):
    for seed, score in enumerate((10.5, 0.5)):
        fake_run(tmp_path, "mlp", seed, score, env="CartPole-v1", env_kwargs={}, success=False, curve=[2.0, score])
    (task,) = Study.analyse(tmp_path, reps=50).tasks
    assert task.threshold is None and task.reliability["mlp"].solved is None
    run = Run(tmp_path / "CartPole-v1__ppo-mlp__0")
    assert outcome(run, success=False, threshold=None) == "finished"
    text = build_report(tmp_path, reps=50).read_text()
    assert "solved (≥" not in text and "| CartPole-v1__ppo-mlp__0 | finished | 200 | 0 | 10.500 | 10.500 | – |" in text
    (given,) = Study.analyse(tmp_path, reps=50, threshold=5.0).tasks  # --solve-threshold: counted against it
    assert given.threshold == 5.0 and given.reliability["mlp"].solved == 1


def test_a_success_scored_run_is_solved_as_its_own_summary_says(tmp_path):
    """Runs of one task with their own success_threshold: each is judged by its summary's `solved`, in a row of
    its threshold."""
    fake_run(tmp_path, "mlp", 0, 0.92, curve=[0.5, 0.92])
    run = fake_run(tmp_path, "mlp", 1, 0.92, curve=[0.5, 0.92])
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "solved": False}))
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "success_threshold": 0.95}))
    (task,) = Study.analyse(tmp_path, reps=50).tasks
    assert task.reliability["mlp success_threshold=0.9"].solved == 1
    assert task.reliability["mlp success_threshold=0.95"].solved == 0
    assert outcome(Run(run), success=True, threshold=None) == "not solved"
    assert outcome(Run(run), success=True, threshold=0.9) == "solved"  # --solve-threshold: one for every run


# -- the steps a study's runs train --------------------------------------------------------------------------------


def test_progress_counts_the_steps_runs_really_train_and_never_more(tmp_path):
    config = build_config(None, {**CARTPOLE, "log_dir": str(tmp_path)})
    task = RunTask(config, resume=False, session="now")
    progress = Progress([task])
    assert progress.target == 192  # whole rollouts of 64 steps x 3 copies: 100 rounds up to 192
    assert execute(task)["state"] == "finished"
    assert Run.of(config).timesteps() == progress.target
    assert "192/192 steps" in progress.line((1, 0, 0, 0))


# -- the log directory ---------------------------------------------------------------------------------------------


def test_an_empty_log_dir_is_refused_by_the_study_as_by_a_single_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="log_dir='': expected a non-empty string"):
        Grid(flags={"env": "CartPole-v1", "log_dir": ""}, seeds=[0, 1]).study_configs()
    assert train_rl.main(["--env", "CartPole-v1", "--seed", "0", "1", "--log-dir", "", "-n", "64"]) == 2
    assert _err_line(capsys) == "error: log_dir='': expected a non-empty string"
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"settings": {"log_dir": "", "total_timesteps": 64}, "tasks": [
        {"env": "CartPole-v1"}]}))
    assert train_rl.main(["study", str(study)]) == 2
    assert _err_line(capsys) == "error: log_dir='': expected a non-empty string"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_a_file_where_a_study_folder_goes_exits_2_naming_the_log_dir_and_the_file(tmp_path, capsys):
    (tmp_path / "r5").mkdir()
    (tmp_path / "r5" / "s").write_text("")
    argv = ["--env", "CartPole-v1", "--seed", "0", "1", "-n", "64", "--study", "s"]
    assert train_rl.main([*argv, "--log-dir", str(tmp_path / "r5")]) == 2
    assert _err_line(capsys) == (f"error: log_dir={str(tmp_path / 'r5')!r}: the study directory "
                                 f"{str(tmp_path / 'r5' / 's')!r} is a file; expected a directory (move the file "
                                 "away, or choose another log_dir)")
    run = tmp_path / "r8" / "s" / "CartPole-v1__ppo-gtrxl__1"
    run.parent.mkdir(parents=True)
    run.write_text("")
    assert train_rl.main([*argv, "--log-dir", str(tmp_path / "r8")]) == 2
    assert f"the run directory {str(run)!r} is a file" in _err_line(capsys)
    assert sorted(p.name for p in run.parent.iterdir()) == [run.name]  # no .lock, no other run


def test_a_file_where_the_tune_study_goes_exits_2_naming_it(tmp_path, capsys):
    space = write_space(tmp_path / "space.yaml", SPACE)
    (tmp_path / "r6").mkdir()
    (tmp_path / "r6" / "tune").write_text("")
    assert train_rl.main(["tune", *TINY, "--log-dir", str(tmp_path / "r6"), "--space", space]) == 2
    assert f"'{tmp_path / 'r6' / 'tune'}' is a file" in _err_line(capsys)
    (tmp_path / "r7" / "tune").mkdir(parents=True)
    (tmp_path / "r7" / "tune" / "nm").write_text("")
    assert train_rl.main(["tune", *TINY, "--log-dir", str(tmp_path / "r7"), "--name", "nm", "--space", space]) == 2
    line = _err_line(capsys)
    assert line.startswith("error: --name='nm': the tune study directory") and "is a file" in line
    assert sorted(p.name for p in (tmp_path / "r7" / "tune").iterdir()) == ["nm"]


# -- a storage that cannot be written --------------------------------------------------------------------------------


def _full_disk() -> Exception:
    """What Optuna's optimize raises when SQLite finds the disk full: its assertion over the storage's error."""
    try:
        try:
            try:
                raise sqlite3.OperationalError("database or disk is full")
            except sqlite3.OperationalError as error:
                raise sqlalchemy.exc.OperationalError("UPDATE trials", {}, error) from error
        except sqlalchemy.exc.OperationalError as error:
            raise optuna.exceptions.StorageInternalError("commit failed") from error
    except optuna.exceptions.StorageInternalError:
        try:
            raise AssertionError("Should not reach.")
        except AssertionError as error:
            return error


def test_a_full_disk_under_the_tune_storage_exits_1_with_one_line(tmp_path, monkeypatch, capsys):
    def full(settings, worker):
        raise _full_disk()

    monkeypatch.setattr(tune, "work", full)
    space = write_space(tmp_path / "space.yaml", SPACE)
    assert train_rl.main(["tune", *TINY, "--log-dir", str(tmp_path), "--name", "t", "--space", space]) == 1
    assert _err_line(capsys) == (f"error: cannot write {str(tmp_path / 'tune' / 't' / 'study.db')!r}: [Errno 28] "
                                 "No space left on device")
    assert tune.storage_fault(ValueError("other"), tmp_path) is None


def test_a_trial_whose_worker_is_gone_is_failed_and_retried_at_once(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="t")
    trial = study.ask()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    study._storage.set_trial_system_attr(trial._trial_id, tune.WORKER, {**tune.worker_identity(),
                                                                         "pid": int(gone.stdout)})
    ours = study.ask()
    study._storage.set_trial_system_attr(ours._trial_id, tune.WORKER, tune.worker_identity())
    tune.fail_dead_workers(study)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states[:2] == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.RUNNING]  # this process: alive


# -- the lines the commands print ------------------------------------------------------------------------------------


def test_a_tune_name_default_is_as_the_help_says(tmp_path):
    args = tune.make_parser().parse_args(["--env", "CartPole-v1", "--backbone", "mlp", "--log-dir", str(tmp_path)])
    assert tune.settings_from_args(args, "tune").name == "CartPole_v1_ppo_mlp"
    assert "CartPole_v1_ppo_mlp" in " ".join(tune.make_parser().format_help().split())


def test_an_unknown_env_over_a_study_of_several_tasks_is_named(tmp_path, capsys):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"settings": {"total_timesteps": 64}, "tasks": [
        {"env": "CartPole-v1"}, {"env": "Pendulum-v1"}]}))
    assert train_rl.main(["study", str(study), "--env", "Nosuch-v0", "--log-dir", str(tmp_path)]) == 2
    assert _err_line(capsys).startswith("error: env='Nosuch-v0': Unknown env id")
    assert train_rl.main(["study", str(study), "--env", "CartPole-v1", "--log-dir", str(tmp_path)]) == 2
    assert "the command line sets env for every task" in _err_line(capsys)


def test_plot_counts_one_run_in_one_group(tmp_path, capsys):
    fake_run(tmp_path / "runs", "mlp", 0, 0.5, curve=[0.2, 0.5])
    assert train_rl.main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "c.png"), "--reps", "20"]) == 0
    assert "1 run in 1 group: " in capsys.readouterr().out


def test_a_report_of_variants_with_long_labels_warns_of_nothing(tmp_path):
    for seed in range(2):
        for lr in (0.000123456789012345, 0.00987654321098765):
            run = fake_run(tmp_path / f"lr{lr}", "mlp", seed, 0.5 + lr, curve=[0.1, 0.5 + lr])
            config = yaml.safe_load((run / "config.yaml").read_text())
            config["ppo"] = {"learning_rate": f"lin_{lr}_0.0", "ent_coef": lr / 3, "gae_lambda": 0.95,
                             "n_epochs": 5}
            (run / "config.yaml").write_text(yaml.safe_dump(config))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_report(tmp_path, tmp_path / "out", reps=20)


def test_a_study_run_with_nothing_left_to_train_shows_no_rate(tmp_path, capsys):
    config = build_config(None, {**CARTPOLE, "total_timesteps": 192, "checkpoint_freq": 192,
                                 "log_dir": str(tmp_path)})
    assert execute(RunTask(config, resume=False, session="a"))["state"] == "finished"
    (Run.of(config).directory / "summary.json").unlink()  # killed after its last checkpoint
    task = RunTask(config, resume=True, session="b")
    result = execute(task)
    assert result["state"] == "finished" and result["steps_per_second"] is None
    Progress([task]).finished(task, result)
    assert "nothing left to train" in capsys.readouterr().err
    text = build_report(tmp_path, reps=20).read_text()
    assert "| 0.0 |" not in text.split("## Runs")[1]
    assert os.path.exists(tmp_path / "report.md")


def test_a_grid_beyond_the_runs_a_study_holds_is_refused_before_it_is_expanded(tmp_path, capsys):
    file = tmp_path / "huge.yaml"
    file.write_text("backbones: [mlp]\nseeds: 100000000\nsettings: {env: CartPole-v1}\n")
    assert train_rl.main(["study", str(file), "--log-dir", str(tmp_path / "runs")]) == 2
    assert "seeds=100000000: expected an integer in [1, 10000] (a count)" in capsys.readouterr().err
    file.write_text("backbones: [mlp, gru]\nseeds: 6000\nsettings: {env: CartPole-v1}\n")
    assert train_rl.main(["study", str(file), "--log-dir", str(tmp_path / "runs")]) == 2
    assert ("the study's grid is 1 task × 2 backbones × 6,000 seeds = 12,000 runs; a study holds at most 10,000"
            in capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", ["5", "null", "[a]", "true", "''"])
def test_a_task_config_that_is_no_file_name_is_refused_in_one_line(tmp_path, capsys, value):
    file = tmp_path / "tasks.yaml"
    file.write_text(f"backbones: [mlp]\nseeds: 1\ntasks: [{{config: {value}}}]\n")
    assert train_rl.main(["study", str(file), "--log-dir", str(tmp_path / "runs")]) == 2
    assert "tasks[0].config=" in _err_line(capsys)
    assert not (tmp_path / "runs").exists()
