"""``train_rl.py tune``: hyper-parameter search with Optuna (Akiba et al. 2019), as rl-zoo3's ``--optimize``.

Every trial trains real engram runs, one per task and seed of ``--tune-seeds`` (one seed proves nothing), with
the trial's values over the base configuration (defaults < the env's hyper-parameter entry < ``--config`` < flags <
``-p``; ``--hyperparams none``: no entry). Its objective is the
mean (or, with ``--aggregate iqm``, the interquartile mean) of the runs' final deterministic evaluation: the
success rate where the task reports one, else the mean return (``--metric``). Several tasks, from a study file's
``tasks`` (``--suite``), make the objective a suite score. ``--metric success`` on a task that reports no success
rate stops the search at its first trial (exit 2; a study directory the command made is removed).

- Sampler: TPE (Bergstra et al. 2011), after ``--startup-trials`` random ones.
- Pruner: the median rule on the evaluation curve: each evaluation of a run within its ``-n`` steps is reported at
  its step (runs of a trial are laid end to end, ``-n`` steps apart), and a trial whose running mean of evaluations
  falls below the median of the completed trials' running means at the same step stops there
  (`experiments.studies.pruning`; ``--pruner none`` keeps every trial).
- Storage: ``{log_dir}/tune/{name}/study.db`` (SQLite). Rerunning the command resumes the study up to
  ``--trials`` trials in all (finished or pruned); trials of a process that died are retried. ``--workers N``
  runs N processes on the same database, each training one trial at a time with ``--threads`` threads.
- Output, in the same directory: ``trial_<n>/`` (the runs of each trial), ``trials.csv``, ``best.yaml`` (the base
  configuration with the best values: usable as ``--config``), ``importance.png`` (PED-ANOVA importances,
  Watanabe et al. 2023, which need no scikit-learn) and ``history.png``.

Example::

    python train_rl.py tune --env MiniGrid-MemoryS11-v0 --backbone gtrxl -n 150000 --tune-seeds 2 --trials 12
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import errno
import fcntl
import json
import multiprocessing
import os
import shlex
import shutil
import socket
import sqlite3
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml
from stable_baselines3.common.callbacks import BaseCallback

from agents import NonFiniteError
from envs.atomic import WriteError, atomic_path, made_folders, nearest_existing, write_atomic
from envs.imports import cause
from envs.registry import VEC_ENVS
from envs.rules import Range, Rule, Text, shown
from experiments.cli.parser import Distinct, OneLineParser, Wrappers, invocation, program, real, whole
from experiments.config import (
    SEED_LIMIT,
    ConfigError,
    RunConfig,
    apply,
    build_config,
    parse_override,
    plain,
)
from experiments.config_files import config_path, shipped_dir
from experiments.exits import advise_on_signal, error_line
from experiments.hyperparams import applied_line
from experiments.rules import FolderName, Threads
from experiments.run_dir import TUNE_FOLDER, TUNE_RECORD, TUNING, EvalLog, RunDirectory, check_owner
from experiments.run_identity import config_record
from experiments.studies.pruning import RunningMedianPruner
from experiments.studies.runs import slug, task_folders, task_label
from experiments.studies.stats import iqm
from experiments.studies.study import Grid, alive, check_folders
from experiments.studies.tune_space import SearchSpace, default_space_files, label, load_space
from experiments.validation import validate_all

SPACE_DIR = shipped_dir() / "tune"
AGGREGATES = {"mean": lambda scores: float(np.mean(scores)), "iqm": iqm}
METRICS = ("auto", "success", "return")
PRUNERS = ("median", "none")
MAX_FAILURES = 3
TUNE_OPTIONS: dict[str, Rule] = {
    "trials": Range(1, integer=True), "tune_seeds": Range(1, integer=True), "workers": Range(1, integer=True),
    "threads": Threads(), "startup_trials": Range(0, integer=True),
    "timeout": Range(0, low_open=True),
    "seed": Range(0, SEED_LIMIT, integer=True),
    "name": FolderName(note="the study directory under {log_dir}/tune"),
}
"""the options of ``train_rl.py tune`` that are not settings of the runs, with their rules"""
FILE_OPTIONS = {"config": "a run configuration file, or the name of a shipped one",
                "suite": "a study file, or the name of a shipped one",
                "space": "a search-space file, or the name of a shipped one"}
"""the options of ``train_rl.py tune`` that name files, with what each names"""
DONE = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


@dataclass
class TuneSettings:
    """What every worker needs to run trials of one study."""

    name: str
    directory: Path
    base: list[RunConfig]
    """the base configuration of each task of the objective"""
    space: SearchSpace
    seeds: list[int]
    trials: int
    metric: str = "auto"
    aggregate: str = "mean"
    pruner: str = "median"
    startup_trials: int = 5
    seed: int = 0
    timeout: float | None = None
    command: str = ""
    enqueue: list[dict[str, Any]] = field(default_factory=list)
    """trials to run first (sampled values by key), e.g. the defaults or a neighbouring task's tuned values"""

    @property
    def storage_url(self) -> str:
        return f"sqlite:///{(self.directory / 'study.db').resolve()}"


OTHER_METRICS = ("valid choices: --metric return, or --metric auto (the success rate where a task reports one, else "
                 "the mean return)")


class MetricError(ConfigError):
    """`--metric success` on a task that reports no success rate: no sampled value can change it."""


def score(row: dict[str, Any], metric: str) -> float:
    """A run's score from an evaluation row or a summary (`success_rate` / `mean_return` or their
    `final_` forms): the success rate (`success`; `auto` where the task reports one) or the mean return."""
    rate = row.get("final_success_rate", row.get("success_rate"))
    rate = None if rate in (None, "") else float(rate)
    if metric == "success" and rate is None:
        raise MetricError(f"--metric=success: the task reports no success rate; {OTHER_METRICS}")
    if metric != "return" and rate is not None:
        return rate
    return float(row.get("final_mean_return", row.get("mean_return")))


class ReportEvaluations(BaseCallback):
    """Report each new evaluation of a run (`evaluations.csv`) to an Optuna trial at `offset` + its step, and
    stop the run once the pruner says so. Evaluations past the run's `budget` (a last rollout that ends past
    `-n`) are not reported: the trial's next run starts at `offset` + `budget`, so each step is reported once and
    lines up with the same step of other trials, whatever rollout size they sample."""

    def __init__(self, trial: optuna.Trial, log: EvalLog, metric: str, offset: int, budget: int) -> None:
        super().__init__()
        self.trial, self.log, self.metric, self.offset, self.budget = trial, log, metric, offset, budget
        self.seen, self.size = len(log.rows()), self._size()
        self.pruned = False

    def _size(self) -> int:
        return self.log.path.stat().st_size if self.log.path.exists() else 0

    def _on_step(self) -> bool:
        size = self._size()
        if size == self.size:
            return True
        self.size, rows = size, self.log.rows()
        for row in rows[self.seen:]:
            step = int(float(row["timesteps"]))
            if 0 < step <= self.budget:
                self.trial.report(score(row, self.metric), self.offset + step)
                self.pruned = self.pruned or self.trial.should_prune()
        self.seen = len(rows)
        return not self.pruned


def with_values(base: RunConfig, values: dict[str, Any]) -> RunConfig:
    """A copy of `base` with the dotted `values` applied."""
    config = copy.deepcopy(base)
    for key, value in values.items():
        apply(config, key, value)
    return config


def trial_configs(settings: TuneSettings, values: dict[str, Any], trial_dir: Path) -> list[RunConfig]:
    """The runs of a trial: every task × seed, with `values` applied, under `trial_dir`."""
    configs = [with_values(base, values) for base in settings.base for _ in settings.seeds]
    folders = task_folders([config.to_dict() for config in configs])
    for config, seed, folder in zip(configs, settings.seeds * len(settings.base), folders, strict=True):
        config.seed = seed
        config.log_dir = str(trial_dir / folder if len(settings.base) > 1 else trial_dir)
    return configs


INTERRUPTED = "interrupted"
"""the user attribute of a trial stopped by Ctrl-C or SIGTERM: not a failure, and its values are queued again"""


def failures_in_a_row(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial] | None:
    """The last `MAX_FAILURES` trials that were not interrupted, when every one of them failed; else `None`."""
    last = [t for t in trials if not t.user_attrs.get(INTERRUPTED)][-MAX_FAILURES:]
    return last if len(last) == MAX_FAILURES and all(t.state == optuna.trial.TrialState.FAIL for t in last) else None


def objective(trial: optuna.Trial, settings: TuneSettings) -> float:
    """Train the trial's runs one after another; the aggregate of their final scores. A trial that fails records
    why, on one line, as its `error`; one whose runs report no success rate for `--metric success` is also `fatal`
    (`stop_on_failures` then stops the search). The trial records the process that runs it (`WORKER`), so that a
    later command fails it at once when that process is gone (`fail_dead_workers`)."""
    trial.storage.set_trial_system_attr(trial._trial_id, WORKER, worker_identity())
    tuning = TUNING.set(settings.directory)  # its runs belong in its trial folders, no other command's do
    try:
        return _run_trial(trial, settings)
    except optuna.TrialPruned:
        raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: no failure of the values; the next command tries them again
        trial.set_user_attr(INTERRUPTED, True)
        trial.study.enqueue_trial(trial.params, skip_if_exists=False)
        raise
    except MetricError:
        trial.set_user_attr("fatal", True)
        raise
    except Exception as error:
        if "error" not in trial.user_attrs:
            trial.set_user_attr("error", " ".join(str(error).split()) if isinstance(error, ConfigError)
                                else cause(error))
        raise
    finally:
        TUNING.reset(tuning)


def _run_trial(trial: optuna.Trial, settings: TuneSettings) -> float:
    """The runs of one trial, trained one after another; the aggregate of their final scores."""
    from experiments.training import train
    from experiments.validation import validate_all

    values = settings.space.suggest(trial)
    trial_dir = settings.directory / f"trial_{trial.number:04d}"
    scores, offset = [], 0
    configs = trial_configs(settings, values, trial_dir)
    try:
        validate_all(configs)  # values that break a relation together: the trial fails before it trains
    except ConfigError as error:
        trial.set_user_attr("error", str(error))
        raise
    for config in configs:
        run = RunDirectory.of(config)
        reporter = ReportEvaluations(trial, run.evaluations, settings.metric, offset, config.total_timesteps)
        try:
            summary = train(config, extra_callback=reporter)
            if not reporter.pruned:
                scores.append(score(summary, settings.metric))
        except MetricError as error:  # no trial can score these runs: the message names the env
            message = (f"--metric=success: env {shown(config.env)} reports no success rate (run {run.path.name}); "
                       f"{OTHER_METRICS}")
            trial.set_user_attr("error", message)
            raise MetricError(message) from error
        except Exception as error:  # a failed trial, as a failed run of a study: recorded, and the search goes on
            reason = error if isinstance(error, ConfigError | NonFiniteError) else cause(error)
            trial.set_user_attr("error", f"{run.path.name}: {reason}")
            raise
        if reporter.pruned:
            raise optuna.TrialPruned(f"pruned in {run.path.name} at {summary['env_steps']} steps")
        trial.set_user_attr("scores", scores)
        offset += config.total_timesteps
    return AGGREGATES[settings.aggregate](np.array(scores))


def make_pruner(settings: TuneSettings) -> optuna.pruners.BasePruner:
    if settings.pruner == "none":
        return optuna.pruners.NopPruner()
    first = settings.base[0]
    several = len(settings.base) * len(settings.seeds) > 1  # a trial of several runs is judged after its first one
    warmup = first.total_timesteps if several else max(first.total_timesteps // 3, first.eval_freq)
    return RunningMedianPruner(n_startup_trials=settings.startup_trials, n_warmup_steps=warmup)


def open_study(settings: TuneSettings, sampler_seed: int | None = None) -> optuna.Study:
    """The study in `study.db` (created on first use, by one process at a time: two commands starting one search
    together would both create its tables), sampled by TPE seeded with `sampler_seed`. Trials whose process
    stopped beating are failed after two minutes and enqueued again (Optuna's heartbeat)."""
    with held(settings.directory / "ask.lock"), warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)
        storage = optuna.storages.RDBStorage(settings.storage_url, engine_kwargs={"connect_args": {"timeout": 60}},
                                             heartbeat_interval=30, grace_period=120,
                                             heartbeat_stale_trial_callback=retry)
    sampler = optuna.samplers.TPESampler(n_startup_trials=settings.startup_trials, seed=sampler_seed)
    return optuna.create_study(study_name=settings.name, storage=storage, sampler=sampler,
                               pruner=make_pruner(settings), direction="maximize", load_if_exists=True)


WORKER = "engram_worker"
"""the system attribute of a trial naming the process that runs it (`worker_identity`)"""


def worker_identity() -> dict[str, Any]:
    """This process: its host and PID."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def fail_dead_workers(study: optuna.Study) -> None:
    """Fail the running trials whose process, on this host, is gone (killed, or stopped by a storage that could not
    record the trial's end), and retry them as a trial whose heartbeat stopped is retried: a later command goes on at
    once instead of after the heartbeat's grace period. Trials of other hosts are left to their heartbeat."""
    storage = study._storage
    retry = storage.get_heartbeat_stale_trial_callback() if hasattr(storage, "get_heartbeat_stale_trial_callback") \
        else None
    here = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker = trial.system_attrs.get(WORKER) or {}
        if worker.get("host") != here or worker.get("pid") in (None, os.getpid()) or alive(worker["pid"]):
            continue
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            if storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL) and retry:
                retry(study, copy.deepcopy(storage.get_trial(trial._trial_id)))


SQLITE_ERRNOS = {"SQLITE_FULL": errno.ENOSPC, "SQLITE_READONLY": errno.EROFS, "SQLITE_IOERR": errno.EIO,
                 "SQLITE_PERM": errno.EPERM, "SQLITE_CANTOPEN": errno.EACCES}
"""SQLite's result codes of a machine fault, as the errno a file write would give"""


def storage_fault(error: BaseException, path: Path) -> WriteError | None:
    """The machine fault behind `error` (a full disk, a read-only file system, ... under SQLAlchemy's and Optuna's
    errors) as a `WriteError` naming the database `path`; `None` for any other error."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.Error):
            name = getattr(current, "sqlite_errorname", "")
            code = next((number for prefix, number in SQLITE_ERRNOS.items() if name.startswith(prefix)), None)
            if code is None and "disk is full" in str(current):
                code = errno.ENOSPC
            if code is not None:
                return WriteError(code, os.strerror(code), str(path))
        if isinstance(current, OSError) and current.errno in SQLITE_ERRNOS.values():
            return current if isinstance(current, WriteError) else WriteError(current.errno, current.strerror,
                                                                                str(current.filename or path))
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def storage_faults(settings: TuneSettings) -> Iterator[None]:
    """Raise a machine fault of the study's database (`storage_fault`) as a `WriteError` naming `study.db`, which
    ends the command with one line and exit status 1, not a traceback; other errors pass as they are."""
    try:
        yield
    except Exception as error:
        fault = storage_fault(error, settings.directory / "study.db")
        if fault is None:
            raise
        raise fault from error


def finished(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=DONE))


def claimed(study: optuna.Study) -> int:
    """Trials finished, pruned or under way (a dead worker's trial, past its heartbeat, is failed first)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    return len(study.get_trials(deepcopy=False, states=(*DONE, optuna.trial.TrialState.RUNNING)))


@contextlib.contextmanager
def held(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `lock` (made if missing) while the block runs; the kernel releases it when
    the file closes, also when the process is killed."""
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def one_ask_at_a_time(study: optuna.Study, lock: Path) -> None:
    """Make `study.ask` (how `optimize` takes each trial) hold an exclusive lock on the file `lock`. Optuna's
    storage takes a waiting (`--enqueue`) trial by reading its state, then writing it; SQLite does not lock the
    row in between, so two workers on a busy machine could both take the same trial and run it twice."""
    ask = study.ask

    def ask_alone(*args: Any, **kwargs: Any) -> optuna.Trial:
        with held(lock):
            return ask(*args, **kwargs)

    study.ask = ask_alone  # type: ignore[method-assign]


def work(settings: TuneSettings, worker: int) -> None:
    """One worker: trials until the study holds `settings.trials` finished or pruned ones (or the timeout).

    The sampler's seed moves with the trials already in the study and the worker, so a resumed or parallel
    worker does not draw the same random start-up trials again."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial is one line of `announce`, no traceback
    study = open_study(settings)
    study = open_study(settings, settings.seed + 1000 * worker + len(study.trials))
    if finished(study) >= settings.trials:
        return
    one_ask_at_a_time(study, settings.directory / "ask.lock")

    def enough(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        # trials under way count: with finished ones alone, each worker that finishes while others still run
        # would start one more, up to workers - 1 beyond --trials
        if claimed(study) >= settings.trials:
            study.stop()

    study.optimize(lambda trial: objective(trial, settings), callbacks=[enough, announce, stop_on_failures],
                   timeout=settings.timeout, catch=(Exception,))


def work_process(settings: TuneSettings, worker: int, faults: Any) -> None:
    """`work` in a process of its own: a machine fault of the storage (`storage_faults`) is put on the queue
    `faults`, for the command to name once, and ends the process with exit status 1."""
    try:
        with storage_faults(settings):
            work(settings, worker)
    except WriteError as error:
        faults.put(error)
        sys.exit(1)


def stop_on_failures(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Stop the study once `MAX_FAILURES` trials in a row have failed, interrupted ones aside (a setting that no
    sampled value can fix, rather than one bad draw), or at once after a `fatal` trial (`objective`)."""
    if trial.user_attrs.get("fatal") or failures_in_a_row(study.get_trials(deepcopy=False)):
        study.stop()


def announce(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """One line per finished trial; a `fatal` one's error is the command's own line, printed once at the end."""
    if trial.user_attrs.get("fatal"):
        return
    value = "" if trial.value is None else f" value {trial.value:.3f}"
    scores = trial.user_attrs.get("scores")
    error = trial.user_attrs.get("error") if trial.state == optuna.trial.TrialState.FAIL else None
    print(f"trial {trial.number}: {trial.state.name.lower()}{value}" + (f" (runs {scores})" if scores else "")
          + f" {trial.params}" + (f": {error}" if error else ""), flush=True)


def run_workers(settings: TuneSettings, workers: int) -> int:
    """`workers` processes on the same storage (one in this process when 1); the number that failed. A machine
    fault in any of them is raised here, once (`WriteError`), in place of one line per worker.

    The study (and its tables) is created and the `--enqueue` trials queued here, once, before any worker
    starts: workers that each queued them raced past `skip_if_exists` and ran the same trial twice."""
    study = open_study(settings)
    fail_dead_workers(study)
    for values in settings.enqueue:
        study.enqueue_trial(values, skip_if_exists=True)
    workers = max(1, min(workers, settings.trials - finished(study)))  # no more workers than trials left
    if workers == 1:
        work(settings, 0)
        return 0
    context = multiprocessing.get_context("spawn")
    faults = context.SimpleQueue()
    processes = [context.Process(target=work_process, args=(settings, i, faults)) for i in range(workers)]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join()
    finally:  # a signal (or error) here ends the workers too, as a study's; the next run fails their stale trials
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
    if not faults.empty():
        raise faults.get()
    return sum(process.exitcode != 0 for process in processes)


def write_outputs(settings: TuneSettings) -> dict[str, Path]:
    """`trials.csv`, `best.yaml`, `importance.png` and `history.png` of the study (those it can make), each
    written whole (`envs.atomic`)."""
    study = open_study(settings)
    paths = {"trials": settings.directory / "trials.csv"}
    write_atomic(paths["trials"], study.trials_dataframe().to_csv(index=False))
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        return paths
    best = study.best_trial
    paths["best"] = settings.directory / "best.yaml"
    write_best(settings, best, paths["best"])
    paths.update(write_plots(study, settings.directory, len(complete)))
    return paths


def write_best(settings: TuneSettings, best: optuna.trial.FrozenTrial, path: Path) -> None:
    """The first task's base configuration with the best trial's values, headed by where they came from."""
    values = settings.space.configured(best.params)
    config = with_values(settings.base[0], values)
    header = [f"# best trial of `train_rl.py tune` study {settings.name!r}: trial {best.number}, objective "
              f"{best.value:.4f} ({settings.aggregate} {settings.metric} over seeds {settings.seeds}"
              f" and {len(settings.base)} task(s)), runs {best.user_attrs.get('scores')}",
              f"# command: {settings.command}",
              f"# values: {yaml.safe_dump(plain(values), default_flow_style=True, width=1000).strip()}"]
    body = yaml.safe_dump(config_record(config), sort_keys=False)  # as a run's config.yaml holds it
    write_atomic(path, "\n".join(header) + "\n" + body)


def write_plots(study: optuna.Study, directory: Path, complete: int) -> dict[str, Path]:
    """Optuna's optimisation history and (from two finished trials on) parameter importances, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    paths = {}
    makers = {"history": plots.plot_optimization_history}
    if complete >= 2:
        makers["importance"] = plots.plot_param_importances
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", "Target and region quantiles")  # PED-ANOVA on equal objectives
        for name, make in makers.items():
            axes = make(study)
            figure = axes.figure
            figure.set_size_inches(7, 4)
            figure.tight_layout()
            paths[name] = directory / f"{name}.png"
            with atomic_path(paths[name]) as tmp:
                figure.savefig(tmp, dpi=80, bbox_inches="tight")
            plt.close(figure)
    return paths


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=f"{program()} tune", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    base = parser.add_argument_group("base configuration (as for training)")
    base.add_argument("--config", "-c", help="YAML file, or the name of a shipped one (demo, configs/demo.yaml)")
    base.add_argument("--algo", help="learner (default: the config's, else ppo)")
    base.add_argument("--backbone", help="memory backbone (default: the config's, else gtrxl)")
    base.add_argument("--env", help="environment: an id or module.path:EnvClass, as for training")
    base.add_argument("--env-kwargs", nargs="+", action="extend", default=[], metavar="KEY=VALUE")
    base.add_argument("--env-wrapper", nargs="+", action=Wrappers, metavar="WRAPPER",
                      help="wrappers of each environment copy, as for training")
    base.add_argument("--gym-packages", nargs="+", action=Distinct, metavar="MODULE",
                      help="modules to import first, as for training")
    base.add_argument("--vec-env", choices=VEC_ENVS, help="dummy, subproc or torch, as for training")
    base.add_argument("--total-timesteps", "-n", type=real, help="env steps per run of a trial")
    base.add_argument("--eval-freq", type=whole, help="evaluate (and report to the pruner) every this many steps")
    base.add_argument("--n-eval-episodes", type=whole, help="episodes per evaluation")
    base.add_argument("--threads", type=whole, default=1, help="torch threads per worker (default: %(default)s)")
    base.add_argument("--log-dir", help="the study goes to {log_dir}/tune/{name}/ (default: the config's, runs)")
    base.add_argument("--hyperparams", metavar="FILE|none",
                      help="the hyper-parameter entry the base configuration starts from, as for training (default: "
                           "auto, the entry of configs/hyperparams/<algo>.yml that matches the env)")
    base.add_argument("-p", "--param", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                      help="dotted overrides of the base configuration")
    tune = parser.add_argument_group("search")
    tune.add_argument("--name", help="study name (default: {env}_{algo}_{backbone}, each run of characters other "
                                     "than letters, digits and dots made one _, e.g. CartPole_v1_ppo_mlp); the same "
                                     "name resumes")
    tune.add_argument("--space", nargs="+", action=Distinct,
                      help="search-space YAML file(s), or names of shipped ones (ppo, configs/tune/ppo.yaml; default: "
                           "tune/{algo} and tune/{backbone})")
    tune.add_argument("--enqueue", nargs="+", action="append", default=[], metavar="KEY=VALUE",
                      help="a trial to run first, with these values (as sampled: ppo.learning_rate=1e-3, not "
                           "lin_1e-3); repeat the flag for several")
    tune.add_argument("--suite", help="a study file, or the name of a shipped one, whose tasks all enter the "
                                      "objective (its seeds are not used)")
    tune.add_argument("--trials", type=whole, default=20, help="trials in the study, finished or pruned (default: "
                                                             "%(default)s); rerun with more to extend it")
    tune.add_argument("--tune-seeds", type=whole, default=2, help="seeds per task in each trial (default: %(default)s)")
    tune.add_argument("--workers", type=whole, default=1, help="processes sharing the study (default: %(default)s)")
    tune.add_argument("--metric", choices=METRICS, default="auto",
                      help="run score: auto (success rate where reported, else mean return), success or return")
    tune.add_argument("--aggregate", choices=list(AGGREGATES), default="mean", help="over runs (default: mean)")
    tune.add_argument("--pruner", choices=PRUNERS, default="median")
    tune.add_argument("--startup-trials", type=whole, default=5, help="random trials before TPE, and before pruning")
    tune.add_argument("--timeout", type=real, help="stop starting trials after this many seconds")
    tune.add_argument("--seed", type=whole, default=0, help="seed of the sampler (default: %(default)s)")
    return parser


def base_configs(args: argparse.Namespace) -> list[RunConfig]:
    """The base configuration of each task: the suite's tasks (or the single one) over flags and `-p`."""
    flags: dict[str, Any] = {key: value for key, value in (
        ("algo", args.algo), ("backbone", args.backbone), ("env", args.env), ("total_timesteps", args.total_timesteps),
        ("env_wrapper", args.env_wrapper), ("gym_packages", args.gym_packages), ("vec_env", args.vec_env),
        ("eval_freq", args.eval_freq), ("n_eval_episodes", args.n_eval_episodes), ("threads", args.threads),
        ("log_dir", args.log_dir), ("hyperparams", args.hyperparams)) if value is not None}
    flags.update({f"env_kwargs.{k}": v for k, v in (parse_override(text, "--env-kwargs") for text in args.env_kwargs)})
    if args.suite:
        grid = Grid.from_file(config_path(args.suite, "studies"), config_file=config_path(args.config), flags=flags,
                              params=args.param)
        grid.seeds, grid.backbones = [0], [args.backbone] if args.backbone else []
        return grid.configs()
    return [build_config(config_path(args.config), flags, args.param)]


def check_args(args: argparse.Namespace) -> None:
    """Each option of `TUNE_OPTIONS` given against its rule, and each file named (`--config`, `--suite`,
    `--space`) not empty (`ConfigError` naming the flag)."""
    for name, rule in TUNE_OPTIONS.items():
        if getattr(args, name) is not None:  # None: not given (no --timeout)
            rule.check(f"--{name.replace('_', '-')}", getattr(args, name))
    for name, note in FILE_OPTIONS.items():
        given = getattr(args, name)
        for value in given if isinstance(given, list) else [] if given is None else [given]:
            Text(note=note).check(f"--{name}", value)


def settings_from_args(args: argparse.Namespace, command: str) -> TuneSettings:
    check_args(args)
    base = base_configs(args)
    labels = [task_label(config.to_dict()) for config in base]
    repeated = [label for label in labels if labels.count(label) > 1]
    if repeated:
        raise ConfigError(f"the suite lists task {repeated[0]!r} twice")
    validate_all(base)
    first = base[0]
    defaults = default_space_files(first.algo, first.backbone, SPACE_DIR)
    if not args.space and not defaults:
        shipped = ", ".join(sorted(path.stem for path in SPACE_DIR.glob("*.yaml")))
        raise ConfigError(f"--space: no search space is shipped for algo={first.algo!r} nor backbone="
                          f"{first.backbone!r} (tune/{first.algo}, tune/{first.backbone}); give --space FILE.yaml, "
                          f"or one of the shipped spaces: {shipped}")
    space = load_space([config_path(name, "tune") for name in args.space] if args.space else defaults)
    space.check(base)  # a key some task uses is one the search may set
    enqueue = [enqueued(space, texts, base) for texts in args.enqueue]
    name = args.name or slug(f"{first.env}__{first.algo}-{first.backbone}")
    directory = Path(first.log_dir) / TUNE_FOLDER / name
    check_folders("log_dir", first.log_dir, [("the folder of tune studies", directory.parent)])
    check_folders("--name" if args.name else "log_dir", args.name or first.log_dir,
                  [("the tune study directory", directory)])
    check_owner("tune study directory", directory, "--log-dir", first.log_dir, "--name" if args.name else None)
    return TuneSettings(name=name, directory=directory, base=base, space=space, seeds=list(range(args.tune_seeds)),
                        trials=args.trials, metric=args.metric, aggregate=args.aggregate, pruner=args.pruner,
                        startup_trials=args.startup_trials, seed=args.seed, timeout=args.timeout, command=command,
                        enqueue=enqueue)


def enqueued(space: SearchSpace, texts: list[str], base: list[RunConfig]) -> dict[str, Any]:
    """The values of an `--enqueue` trial; keys outside the space, values outside its ranges and choices, or runs of
    `base` with these values that `train` would refuse (`validate`) raise `ConfigError`."""
    values = dict(parse_override(text, "--enqueue") for text in texts)
    keys = [param.key for param in space.params]
    unknown = sorted(set(values) - set(keys))
    if unknown:
        raise ConfigError(f"--enqueue {unknown[0]}: not a key of the search space; valid keys: {', '.join(keys)}")
    for param in space.params:
        if param.key not in values:
            continue
        if param.type == "categorical" and values[param.key] not in param.choices:
            raise ConfigError(f"--enqueue {param.key}={values[param.key]!r}: valid choices: "
                              f"{', '.join(map(str, param.choices))}")
        if param.type != "categorical" and not (isinstance(values[param.key], int | float)
                                                 and param.low <= values[param.key] <= param.high):
            raise ConfigError(f"--enqueue {param.key}={values[param.key]!r}: expected a number in the space's range "
                              f"[{param.low}, {param.high}]")
        if param.type == "categorical":
            values[param.key] = label(values[param.key])  # as Optuna samples it
    try:
        validate_all([with_values(config, space.configured(values)) for config in base])  # as a trial's runs
    except ConfigError as error:
        raise ConfigError(f"--enqueue {' '.join(texts)}: {error}") from None
    return values


def summary_lines(settings: TuneSettings, paths: dict[str, Path]) -> list[str]:
    study = open_study(settings)
    states = [t.state.name.lower() for t in study.trials]
    counts = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states)))
    lines = [f"study {settings.name!r}: {len(states)} trials ({counts}) in {settings.directory / 'study.db'}"]
    if "best" in paths:
        best = study.best_trial
        lines.append(f"best: trial {best.number}, value {best.value:.3f}, runs {best.user_attrs.get('scores')}")
        lines += [f"  {key}: {value}" for key, value in settings.space.configured(best.params).items()]
    lines += [f"{name}: {path}" for name, path in paths.items()]
    return lines


def main(argv: list[str]) -> int:
    """`train_rl.py tune ...`; exit status 0 done, 1 trials failing or a machine fault (one line naming the file),
    2 bad input."""
    args = make_parser().parse_args(argv)
    try:
        settings = settings_from_args(args, shlex.join([*invocation(), "tune", *argv]))
    except ConfigError as error:
        print(error_line(error), file=sys.stderr)
        return 2
    line = applied_line([config.hyperparams for config in settings.base], "tasks")
    if line is not None:
        print(line, file=sys.stderr)
    try:
        check_same_search(settings)
    except ConfigError as error:
        print(error_line(error), file=sys.stderr)
        return 2
    made = first_made(settings.directory)
    with made_folders(settings.directory):
        if not (settings.directory / SEARCH_RECORD).is_file():
            write_atomic(settings.directory / SEARCH_RECORD, json.dumps(search_identity(settings), indent=1))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    advise_on_signal("rerun the same command to resume the search")
    with storage_faults(settings):
        return _search(settings, args, made)


def _search(settings: TuneSettings, args: argparse.Namespace, made: Path | None) -> int:
    """Run the workers, then write the outputs and the summary; the exit status."""
    failed_workers = run_workers(settings, args.workers)
    fatal = fatal_error(settings)
    if fatal is not None:  # no trial could score: the search is refused, and what this command made removed
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        print(error_line(fatal), file=sys.stderr)
        return 2
    paths = write_outputs(settings)
    print("\n".join(summary_lines(settings, paths)))
    if failed_workers:
        print(f"error: {failed_workers} of {args.workers} workers failed (their errors are above)", file=sys.stderr)
    return 1 if failing(settings) or failed_workers else 0


SEARCH_RECORD = TUNE_RECORD
"""what a tune study searches (space, tasks, seeds, metric), recorded by its first command"""


def search_identity(settings: TuneSettings) -> dict[str, Any]:
    """What makes trials of one study comparable: the space, each task's base settings (its seed aside), the
    seeds, the metric, the aggregate and the pruner, as JSON values."""
    tasks = [{key: value for key, value in config_record(config).items() if key != "seed"} for config in settings.base]
    return json.loads(json.dumps({"space": dataclasses.asdict(settings.space), "tasks": tasks, "seeds": settings.seeds,
                                  "metric": settings.metric, "aggregate": settings.aggregate,
                                  "pruner": settings.pruner}, default=str))


def check_same_search(settings: TuneSettings) -> None:
    """Refuse (`ConfigError`, naming what differs) to add trials to a study started with another search: its trials
    would be mixed with these in one `study.db` and one `best.yaml`."""
    path = settings.directory / SEARCH_RECORD
    if not path.is_file():
        return
    recorded, given = _flat(json.loads(path.read_text())), _flat(search_identity(settings))
    if differ := sorted(key for key in recorded.keys() | given.keys() if recorded.get(key) != given.get(key)):
        raise ConfigError(f"tune study {settings.name!r} ({str(settings.directory)!r}) searches with other settings: "
                          f"{', '.join(differ[:4])}{' …' if len(differ) > 4 else ''} differ; rerun its own command to "
                          "resume it, or give --name a new study")


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings and lists of mappings as one mapping of dotted keys (`tasks.0.ppo.gamma`)."""
    if isinstance(value, dict) or (isinstance(value, list) and value and all(isinstance(v, dict) for v in value)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return {key: leaf for name, item in items for key, leaf in _flat(item, f"{prefix}{name}.").items()}
    return {prefix.removesuffix("."): value}


def first_made(directory: Path) -> Path | None:
    """The outermost folder that making `directory` creates (`None`: it exists)."""
    existing = nearest_existing(directory)
    parts = directory.relative_to(existing).parts
    return existing / parts[0] if parts else None


def fatal_error(settings: TuneSettings) -> str | None:
    """The reason of the study's last trial when it failed in a way no sampled value can change (`objective`)."""
    trials = open_study(settings).get_trials(deepcopy=False)
    return trials[-1].user_attrs.get("error") if trials and trials[-1].user_attrs.get("fatal") else None


def failing(settings: TuneSettings) -> bool:
    """Whether the study stopped on failures (then the last error is printed, on one line)."""
    last = failures_in_a_row(open_study(settings).get_trials(deepcopy=False))
    if last is None:
        return False
    reason = last[-1].user_attrs.get("error", "its worker stopped before it recorded why (it was killed or lost)")
    print(f"error: {MAX_FAILURES} trials in a row failed; the last: {reason}", file=sys.stderr)
    return True
