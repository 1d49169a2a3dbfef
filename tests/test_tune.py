"""train_rl.py tune: trials train real runs, the study resumes from its SQLite database without repeating a
trial, best.yaml is a usable config, the plots are written; bad spaces exit 2; the pruner stops a run."""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml

import experiments.studies.tune
import train_rl
from experiments.config import build_config
from experiments.run_dir import EvalLog
from experiments.studies.tune import ReportEvaluations, one_ask_at_a_time, open_study, score
from experiments.studies.tune_space import SearchSpace, load_space

TINY = ["--env", "TMaze-v0", "--backbone", "mlp", "-n", "128", "--eval-freq", "64",
        "--n-eval-episodes", "2", "--startup-trials", "1",
        "-p", "n_envs=4", "n_eval_envs=2", "checkpoint_freq=0", "ppo.n_steps=16", "ppo.batch_size=32",
        "ppo.n_epochs=1", "ppo.segment_length=4", "mlp.hidden_size=8"]
SPACE = {"ppo.learning_rate": {"type": "log_uniform", "low": 1e-4, "high": 1e-2, "template": "lin_{}"},
         "ppo.gae_lambda": {"type": "categorical", "choices": [0.9, 0.95, 0.99]},
         "ppo.n_epochs": {"type": "int", "low": 1, "high": 2}}


def write_space(path: Path, space: dict) -> str:
    path.write_text(yaml.safe_dump(space))
    return str(path)


def tune(tmp_path: Path, *argv: str, task: tuple[str, ...] = ("--env-kwargs", "length=3")) -> int:
    space = write_space(tmp_path / "space.yaml", SPACE)
    return train_rl.main(["tune", *TINY, *task, "--log-dir", str(tmp_path), "--name", "t", "--space", space, *argv])


def load_study(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 'tune' / 't' / 'study.db'}")


def test_rerun_resumes_the_study_and_best_yaml_is_a_config_with_the_best_values(tmp_path):
    # all three trials are random start-up draws: a resumed sampler with the first one's seed would repeat trial 0
    assert tune(tmp_path, "--trials", "2", "--tune-seeds", "2", "--startup-trials", "10") == 0
    assert len(load_study(tmp_path).trials) == 2
    assert tune(tmp_path, "--trials", "3", "--tune-seeds", "2", "--startup-trials", "10") == 0
    study = load_study(tmp_path)
    trials = study.trials
    assert [t.number for t in trials] == [0, 1, 2]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 3  # no trial drawn twice
    directory = tmp_path / "tune" / "t"
    for trial in trials:  # every trial trained one real run per seed, and its value is their mean
        assert len(list((directory / f"trial_{trial.number:04d}").glob("*/summary.json"))) == 2
        assert trial.value == pytest.approx(np.mean(trial.user_attrs["scores"]))
    config = build_config(directory / "best.yaml")
    best = study.best_trial
    assert config.options["ppo"]["gae_lambda"] == best.params["ppo.gae_lambda"]
    assert config.options["ppo"]["n_epochs"] == best.params["ppo.n_epochs"]
    assert config.options["ppo"]["learning_rate"].start == pytest.approx(best.params["ppo.learning_rate"])
    assert config.backbone == "mlp" and config.options["mlp"]["hidden_size"] == 8  # the base config is kept
    for name in ("importance.png", "history.png"):
        assert (directory / name).read_bytes()[:4] == b"\x89PNG"
    assert len((directory / "trials.csv").read_text().splitlines()) == 4


def test_a_rerun_with_another_search_is_refused_and_adds_no_trial(tmp_path, capsys):
    """Another space, base setting, seed count or metric under the same --name would mix trials of two searches in
    one study.db and best.yaml: each is refused (exit 2, one line naming what differs), the study left as it was."""
    assert tune(tmp_path, "--trials", "1", "--tune-seeds", "1") == 0
    capsys.readouterr()
    other_space = write_space(tmp_path / "other.yaml", {"ppo.gamma": {"type": "uniform", "low": 0.9, "high": 0.99}})
    for extra, differs in ((["--space", other_space], "space.params"), (["-p", "ppo.gamma=0.5"], "tasks.0.ppo.gamma"),
                           (["--tune-seeds", "2"], "seeds"), (["--metric", "return"], "metric")):
        assert tune(tmp_path, "--trials", "2", "--tune-seeds", "1", *extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "searches with other settings" in err[0] and differs in err[0], err
    assert len(load_study(tmp_path).trials) == 1


def test_suite_objective_covers_every_task(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"tasks": [{"env_kwargs": {"length": 3}}, {"env_kwargs": {"length": 4}}]}))
    assert tune(tmp_path, "--trials", "1", "--tune-seeds", "1", "--suite", str(suite), "--aggregate", "iqm",
                task=()) == 0
    trial = load_study(tmp_path).trials[0]
    assert len(trial.user_attrs["scores"]) == 2
    folders = sorted(p.name for p in (tmp_path / "tune" / "t" / "trial_0000").iterdir())
    assert folders == ["TMaze_v0_length_3", "TMaze_v0_length_4"]


def test_a_suite_listing_a_task_twice_exits_2(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"tasks": [{"env_kwargs": {"length": 3}}, {"env_kwargs": {"length": 3}}]}))
    assert tune(tmp_path, "--suite", str(suite), task=()) == 2
    assert "lists task 'TMaze-v0 (length=3)' twice" in capsys.readouterr().err


def test_trials_that_keep_failing_stop_the_study(tmp_path, capsys, monkeypatch):
    # an env that passes every check before the study (it builds, resets and steps once) and fails at its second
    # step, in every trial
    (tmp_path / "breaks_when_stepped.py").write_text(
        "from envs.batched import SingleCopyEnv\nfrom envs.tmaze import PassiveTMaze\n\n"
        "class Env(SingleCopyEnv):\n"
        "    def __init__(self):\n"
        "        super().__init__(PassiveTMaze(n_copies=1, length=3))\n"
        "        self.steps = 0\n\n"
        "    def step(self, action):\n"
        "        self.steps += 1\n"
        "        if self.steps > 1:\n"
        "            raise RuntimeError('the simulator crashed')\n"
        "        return super().step(action)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert tune(tmp_path, "--trials", "5", task=("--env", "breaks_when_stepped:Env")) == 1
    assert len(load_study(tmp_path).trials) == 3
    failure = ("breaks_when_stepped-Env__ppo-mlp__0: env='breaks_when_stepped:Env' failed at step 2 of an episode: "
               "step raised RuntimeError: the simulator crashed")
    assert f"3 trials in a row failed; the last: {failure}" in capsys.readouterr().err


def test_a_base_config_that_breaks_a_rule_exits_2_before_any_trial(tmp_path, capsys):
    assert tune(tmp_path, "--trials", "5", "-p", "ppo.batch_size=30") == 2
    assert "ppo.batch_size=30: expected a multiple of the training segment" in capsys.readouterr().err
    assert not (tmp_path / "tune").exists()


@pytest.mark.parametrize("space,message", [
    ({"ppo.ent_coef": {"type": "normal", "low": 0, "high": 1}}, "type='normal'; valid types: log_uniform"),
    ({"ppo.ent_coef": {"type": "log_uniform", "low": 0.0, "high": 0.1}}, "a log-uniform range must be positive"),
    ({"ppo.ent_coef": {"type": "uniform", "low": 0.2, "high": 0.1}}, "expected two numbers with low < high"),
    ({"ppo.ent_cof": {"type": "uniform", "low": 0.0, "high": 0.1}}, "unknown option 'ent_cof' for ppo"),
    ({"ppo.n_epochs": {"type": "categorical", "choices": ["many"]}}, "ppo.n_epochs='many': expected an integer"),
    ({"ppo.gamma": {"type": "categorical"}}, "choices=None: expected a non-empty list"),
    ({"gtrxl.d_model": {"type": "categorical", "choices": [32, 64]}},
     "gtrxl.d_model: an option of the backbone gtrxl, but the runs use mlp, so it would change nothing"),
    ({"vmpo.eta_init": {"type": "uniform", "low": 0.5, "high": 2.0}},
     "vmpo.eta_init: an option of the learner vmpo, but the runs use ppo, so it would change nothing"),
])
def test_bad_space_exits_2_naming_it(space, message, tmp_path, capsys):
    path = write_space(tmp_path / "bad.yaml", space)
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(train_rl.main(["tune", *TINY, "--log-dir", str(tmp_path), "--space", path]))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("spec,message", [
    ({"type": "int", "low": 1, "high": 8, "step": 2, "log": True},
     "ppo.n_epochs: low=1, high=8, step=2, log=True: Optuna cannot sample this range: Samplers and other components "
     "in Optuna only accept step is 1 when `log` argument is True"),
    ({"type": "int", "low": 0, "high": 64, "log": True},
     "ppo.n_epochs: low=0, high=64, log=True: Optuna cannot sample this range: `low >= 1` must hold for `log=True`"),
    ({"type": "int", "low": 1, "high": 3, "step": 5},
     "ppo.n_epochs: high=3, step=5: high - low must be a whole number of steps from low=1; valid high: 6"),
    ({"type": "int", "low": 2, "high": 9, "step": 3},
     "ppo.n_epochs: high=9, step=3: high - low must be a whole number of steps from low=2; valid high: 8 or 11"),
])
def test_a_range_optuna_cannot_sample_exits_2_before_the_study_is_made(spec, message, tmp_path, capsys):
    path = write_space(tmp_path / "bad.yaml", {"ppo.n_epochs": spec})
    assert train_rl.main(["tune", *TINY, "--log-dir", str(tmp_path / "runs"), "--name", "t", "--space", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and path in err[0] and message in err[0]
    assert not (tmp_path / "runs").exists()


def test_every_range_of_the_shipped_spaces_builds_its_optuna_distribution():
    for path in sorted(Path("configs/tune").glob("*.yaml")):
        for param in load_space([path]).params:
            param.distribution()


class PruneAfter:
    """An Optuna trial stand-in that asks to prune once ``limit`` values have been reported."""

    def __init__(self, limit: int) -> None:
        self.limit, self.reported = limit, []

    def report(self, value: float, step: int) -> None:
        self.reported.append((step, value))

    def should_prune(self) -> bool:
        return len(self.reported) >= self.limit


def test_report_evaluations_reports_each_new_row_at_its_offset_step_and_stops_when_pruned(tmp_path):
    log = EvalLog(tmp_path / "evaluations.csv")
    trial = PruneAfter(limit=2)
    callback = ReportEvaluations(trial, log, "auto", offset=1000, budget=128)
    assert callback._on_step()
    log.append({"timesteps": 64, "mean_return": 0.5, "success_rate": 0.25})
    assert callback._on_step() and callback._on_step()  # one row, reported once
    log.append({"timesteps": 128, "mean_return": 0.7, "success_rate": 0.75})
    assert not callback._on_step()
    assert trial.reported == [(1064, 0.25), (1128, 0.75)] and callback.pruned


def test_report_evaluations_leaves_out_evaluations_past_the_budget(tmp_path):
    """A last rollout that ends past ``-n`` evaluates past it; those steps belong to the trial's next run."""
    log = EvalLog(tmp_path / "evaluations.csv")
    trial = PruneAfter(limit=10)
    callback = ReportEvaluations(trial, log, "auto", offset=128, budget=128)
    for step in (64, 128, 192, 256):
        log.append({"timesteps": step, "mean_return": 0.5, "success_rate": step / 256})
    assert callback._on_step()
    assert trial.reported == [(192, 0.25), (256, 0.5)]


def test_a_run_trained_past_its_budget_reports_each_step_once(tmp_path, recwarn):
    """A rollout (4 envs x 48 steps) longer than ``-n 128``: each seed trains 192 steps; the trial reports each
    seed's evaluations within its 128 steps, seed 1's at 128 + its step, each step once (no Optuna warning)."""
    assert tune(tmp_path, "--trials", "1", "--tune-seeds", "2", "-p", "ppo.n_steps=48", "ppo.batch_size=48") == 0
    assert not [w for w in recwarn if "already reported" in str(w.message)]
    trial = load_study(tmp_path).trials[0]
    assert sorted(trial.intermediate_values) == [64, 128, 192, 256]


def test_score_is_the_success_rate_where_reported_else_the_return():
    assert score({"final_success_rate": 0.5, "final_mean_return": 3.0}, "auto") == 0.5
    assert score({"final_success_rate": None, "final_mean_return": 3.0}, "auto") == 3.0
    assert score({"success_rate": "", "mean_return": "2.5"}, "auto") == 2.5
    assert score({"final_success_rate": 0.5, "final_mean_return": 3.0}, "return") == 3.0


@pytest.mark.slow
def test_workers_share_the_study_and_run_trials_at_the_same_time(tmp_path):
    assert tune(tmp_path, "--trials", "4", "--tune-seeds", "1", "--workers", "2") == 0
    trials = load_study(tmp_path).trials
    assert len(trials) >= 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    first, second = trials[0], trials[1]  # both workers start a trial as soon as they are up
    assert second.datetime_start < first.datetime_complete


def test_workers_do_not_run_more_trials_than_asked(tmp_path):
    """``--trials`` counts trials under way: four workers on a two-trial study start two processes, and a worker
    that finishes while the other still runs stops (before, each started one more: four trials, or five). Two
    workers finishing at the same instant could still both start one, so the bound is one above."""
    assert tune(tmp_path, "--trials", "2", "--tune-seeds", "1", "--workers", "4") == 0
    assert 2 <= len(load_study(tmp_path).trials) <= 3


@pytest.mark.slow  # long: run by make test-slow
def test_enqueued_trials_run_once_each_with_several_workers(tmp_path):
    """``--enqueue`` trials run once each, however many workers share the study (they are queued once, by the
    parent, before the workers start; workers that each queued them could race past ``skip_if_exists``, which a
    suite search met as a duplicated trial: timing-dependent, so this test pins the behaviour, not the race)."""
    first = ["ppo.learning_rate=1e-3", "ppo.gae_lambda=0.95", "ppo.n_epochs=1"]
    second = ["ppo.learning_rate=3e-4", "ppo.gae_lambda=0.99", "ppo.n_epochs=2"]
    assert tune(tmp_path, "--trials", "2", "--tune-seeds", "1", "--workers", "2",
                "--enqueue", *first, "--enqueue", *second) == 0
    trials = load_study(tmp_path).trials
    enqueued = [{"ppo.learning_rate": 1e-3, "ppo.gae_lambda": 0.95, "ppo.n_epochs": 1},
                {"ppo.learning_rate": 3e-4, "ppo.gae_lambda": 0.99, "ppo.n_epochs": 2}]
    assert [sum(t.params == values for t in trials) for values in enqueued] == [1, 1]
    assert all(t.state != optuna.trial.TrialState.WAITING for t in trials)  # no copy left in the queue


def test_workers_take_their_trials_one_at_a_time(tmp_path):
    """Two workers (here threads, each with its own Study on one SQLite storage) never take a trial at the same time:
    Optuna reads a waiting trial's state and then writes it, unlocked, and on a loaded machine two tune workers
    both took enqueued trial 0 (CI of stop 36). With each ``ask`` slowed to 0.3 s, the two asks must not overlap."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="s", storage=storage)
    spans: list[tuple[float, float]] = []

    def worker_study() -> optuna.Study:
        study = optuna.load_study(study_name="s", storage=storage)
        ask = study.ask

        def slow_ask(*args, **kwargs):
            began = time.monotonic()
            time.sleep(0.3)
            trial = ask(*args, **kwargs)
            spans.append((began, time.monotonic()))
            return trial

        study.ask = slow_ask
        one_ask_at_a_time(study, tmp_path / "ask.lock")
        return study

    threads = [threading.Thread(target=study.ask) for study in (worker_study(), worker_study())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (_, first_end), (second_start, _) = sorted(spans)
    assert second_start >= first_end, "two workers were taking a trial at the same time"


@pytest.mark.slow  # long: run by make test-slow
def test_a_signal_to_the_command_alone_ends_its_workers_too(tmp_path):
    """SIGTERM (or SIGINT) sent to the `tune` process only, not its process group, as a scheduler's `kill PID`
    does: the worker processes end with it, rather than being waited for until their trials finish."""
    import os
    import signal
    import subprocess

    space = write_space(tmp_path / "space.yaml", SPACE)
    argv = [sys.executable, str(Path(train_rl.__file__)), "tune", *TINY, "--env-kwargs", "length=3", "--log-dir",
            str(tmp_path), "--name", "t", "--space", space, "--trials", "4", "--workers", "2", "-n", "1000000"]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(tmp_path.glob("tune/t/trial_*/*/evaluations.csv"))) < 2:
        time.sleep(0.2)
    workers = [proc.name for proc in Path("/proc").iterdir() if proc.name.isdigit() and _is_worker(proc, process.pid)]
    assert len(workers) == 2
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and "terminated (SIGTERM); rerun the same command to resume the search" in err
    time.sleep(0.5)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]


def _is_worker(proc: Path, parent: int) -> bool:
    """Whether `/proc/<pid>` is a process `multiprocessing` spawned for `parent`."""
    try:
        ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        return ppid == parent and b"spawn_main" in (proc / "cmdline").read_bytes()
    except (OSError, IndexError, ValueError):
        return False


def test_space_bounds_are_read_as_numbers_as_a_run_config_reads_them(tmp_path):
    """`1e-4` is a string to YAML 1.1; a space file reads it as the number, as a --config file does."""
    path = tmp_path / "space.yaml"
    path.write_text("ppo.learning_rate: {type: log_uniform, low: 1e-4, high: 1e-3}\nppo.n_epochs: {type: int, low: 1, "
                    "high: 1e1}\n")
    learning_rate, epochs = load_space([path]).params
    assert (learning_rate.low, learning_rate.high) == (1e-4, 1e-3) and (epochs.low, epochs.high) == (1, 10)
    SearchSpace([learning_rate, epochs]).check(build_config(None, {"backbone": "mlp"}))


@pytest.mark.parametrize("key,message", [
    ("seed", "seed: every trial runs the seeds of --tune-seeds (0, 1, ...), so a sampled seed would change nothing"),
    ("log_dir", "log_dir: every trial's runs go to {log_dir}/tune/{name}/trial_<n>/; give --log-dir and --name"),
    ("hyperparams", "hyperparams: its entry is applied once, under the base configuration"),
])
def test_a_space_over_a_key_a_trial_sets_itself_exits_2_before_anything_is_made(key, message, tmp_path, capsys):
    choices = {"seed": [3], "log_dir": [str(tmp_path / "elsewhere")], "hyperparams": ["none"]}[key]
    path = write_space(tmp_path / "bad.yaml", {key: {"type": "categorical", "choices": choices}})
    assert train_rl.main(["tune", *TINY, "--log-dir", str(tmp_path / "runs"), "--space", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("flag", ["--space", "--suite", "--config"])
def test_an_empty_file_name_exits_2_naming_the_flag(flag, tmp_path, capsys):
    assert train_rl.main(["tune", *TINY, "--log-dir", str(tmp_path / "runs"), flag, ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"error: {flag}='': expected a non-empty string" in err[0]


def test_metric_success_on_a_task_without_success_rate_stops_at_the_first_trial(tmp_path, capsys):
    """CartPole reports no success rate: the first trial says so, the search stops (exit 2) and the study directory
    it made is removed."""
    code = tune(tmp_path, "--metric", "success", "--trials", "3", "--tune-seeds", "1",
                task=("--env", "CartPole-v1", "--eval-freq", "0"))
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "reports no success rate" not in captured.out  # said once, as the error
    assert err[0] == ("error: --metric=success: env 'CartPole-v1' reports no success rate (run "
                      "CartPole-v1__ppo-mlp__0); valid choices: --metric return, or --metric auto (the success rate "
                      "where a task reports one, else the mean return)")
    assert not (tmp_path / "tune").exists()


def test_the_reason_of_the_last_failed_trial_is_given_whatever_failed(tmp_path, capsys, monkeypatch):
    def no_room(*args, **kwargs):
        raise OSError("no room left")

    monkeypatch.setattr(experiments.studies.tune, "trial_configs", no_room)
    assert tune(tmp_path, "--trials", "5") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: 3 trials in a row failed; the last: OSError: no room left"]


def test_a_learner_and_backbone_without_a_shipped_space_are_named_with_the_shipped_ones(tmp_path, capsys):
    code = train_rl.main(["tune", "--env", "CartPole-v1", "--algo", "vmpo", "--backbone", "mlp", "-n", "128",
                          "--trials", "1", "--log-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: --space: no search space is shipped for algo='vmpo' nor backbone='mlp' "
                             "(tune/vmpo, tune/mlp); give --space FILE.yaml, or one of the shipped spaces: ")
    assert "ppo" in err[0].split("shipped spaces: ")[1] and not (tmp_path / "runs").exists()


def test_an_interrupted_trial_is_no_failure_and_its_values_run_again(tmp_path, capsys, monkeypatch):
    """Ctrl-C in a trial (exit 130) neither counts as a failed trial nor loses its values: the rerun trains them
    first (mutation caught: three interrupted trials stopped the study as three failures in a row, exit 1, and
    their values were never trained)."""
    import experiments.studies.tune as tuning

    trained = tuning._run_trial

    def interrupted(trial, settings):
        settings.space.suggest(trial)  # as a trial does first
        raise KeyboardInterrupt

    monkeypatch.setattr(tuning, "_run_trial", interrupted)
    for _ in range(3):
        assert tune(tmp_path, "--trials", "2", "--tune-seeds", "1") == 130
    values = load_study(tmp_path).trials[0].params
    monkeypatch.setattr(tuning, "_run_trial", trained)
    assert tune(tmp_path, "--trials", "2", "--tune-seeds", "1") == 0
    complete = [t.params for t in load_study(tmp_path).trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 2 and values in complete


def _open_when_both_are_ready(directory: str, ready: Any) -> None:
    settings = types.SimpleNamespace(storage_url=f"sqlite:///{directory}/study.db", startup_trials=1, name="s",
                                     directory=Path(directory), pruner="none")
    ready.wait()
    open_study(settings)


def test_two_commands_starting_one_search_together_both_open_it(tmp_path):
    """Two processes creating one new `study.db` at the same moment: one at a time (without, SQLite's schema was
    made twice and one command ended in an IntegrityError traceback, about one round in two)."""
    processes = multiprocessing.get_context("fork")
    for round_ in range(4):
        directory = tmp_path / str(round_)
        directory.mkdir()
        ready = processes.Barrier(2)
        openers = [processes.Process(target=_open_when_both_are_ready, args=(str(directory), ready)) for _ in "ab"]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join()
        assert [opener.exitcode for opener in openers] == [0, 0], f"round {round_}"
