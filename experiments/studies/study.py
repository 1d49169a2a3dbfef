"""Seed studies: every combination of tasks × backbones × seeds as an independent run, in parallel
(`experiments.studies.launchers`), resumable, with a report at the end (`experiments.studies.report`).

A study lives in `{log_dir}/{name}/`: one run directory per run, in the layout of single runs
(`{env}__{algo}-{backbone}__{seed}/`; under a per-task folder when two tasks share an
environment id), `study.yaml` (the grid, the runs and every command that ran the study),
`report.md` and the figures. Every run trains with one torch thread.

Rerunning a study skips finished runs (and, unless `retry_failed`, runs that diverged or failed:
they are results too), resumes interrupted ones from their last checkpoint and starts the others
afresh. A run that raises does not stop the study: its `status.json` records `diverged` (a
non-finite loss, gradient or parameter) or `failed` with the message, and the report counts it.
Killing the study at any moment loses nothing already written (every file is written atomically).

A run whose worker dies under it (a killed process, a lost Ray node) is retried while the other
runs go on: it resumes from its last checkpoint (or starts afresh if it had none), on any worker
still alive, up to `max_retries` times per study command; `status.json` counts its
`retries` over its whole life, and the report shows them. A run lost more often is recorded as
`failed` (`--retry-failed` reruns it).

A study file (`train_rl.py study FILE.yaml`) holds the grid; every key is optional::

    name: memory              # the study directory under log_dir (default: the file's name)
    config: ../base.yaml      # a run configuration file (relative to this file), as --config
    settings:                 # run-configuration keys for every run, as in a --config file
      total_timesteps: 200000
      ppo: {n_steps: 128}
    gym_packages: [my_envs]   # modules imported before any env is made (ids they register become tasks)
    tasks:                    # one entry per task: run-configuration keys (default: one task),
      - {env: TMaze-v0, env_kwargs: {length: 100}}       # and optionally its own config file
      - {config: ../minigrid_memory_s9.yaml, total_timesteps: 500000}
      - {env: CartPole-v1, env_wrapper: envs.wrappers.MaskVelocity}
      - {env: "my_envs:Maze", env_kwargs: {size: 9}}     # an entry point, or an id my_envs registers
    backbones: [gtrxl, trxl-i, trxl, lstm, mlp]
    seeds: [0, 1, 2, 3, 4]    # or a count: 5

Precedence, lowest first: defaults, the hyper-parameter entry of each run's env (`experiments.hyperparams`;
`hyperparams: none` in `settings` or a task, or `--hyperparams none`, turns it off), `config` (a task's own
`config` replaces it; both are relative to the study file), `settings`, the task's keys, command-line flags,
`-p` overrides; `--backbone` and `--seed` replace the file's lists. Each run's `config.yaml` records the
entry it started from, and a rerun refuses runs made from another.

What the study sets in every run is refused in `settings` and in a task, naming where it goes instead: `seed`
and `backbone` when the study lists seeds or backbones, `threads` (one per run, or `--threads`) and a task's
`log_dir` (the study directory's parent is `settings`' or `--log-dir`). A listed task must name its env (itself,
`settings`, its config file, `--env` or `-p env=...`); only a study without `tasks` trains the default env.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import fcntl
import math
import os
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import yaml

from agents import NonFiniteError
from envs.atomic import made_folders, nearest_existing, write_atomic
from envs.rules import AnyOf, Entries, Flag, Items, OneOf, Range, Rule, Text, shown
from experiments.config import SEED_LIMIT, ConfigError, RunConfig, algo_settings, build_config, env_slug, load_yaml
from experiments.hyperparams import applied_line
from experiments.rules import Directory, FolderName, PathName
from experiments.run_dir import STUDY_LOCK, RunDirectory, check_owner
from experiments.run_identity import config_record
from experiments.studies.launchers import DEFAULT_MAX_RETRIES, LAUNCHERS, Lost, connect, launch
from experiments.studies.report import DEFAULT_REPS, build_report, report_target, trained_nothing
from experiments.studies.runs import (
    DIVERGED,
    FAILED,
    FINISHED,
    INTERRUPTED,
    RUNNING,
    STUDY_FILE,
    UNSUCCESSFUL,
    Run,
    read_study_record,
    task_folders,
    task_label,
    write_status,
)
from experiments.training import train
from experiments.validation import CLI_OPTIONS, validate_all
from policies.registry import BACKBONES

MAX_RUNS = 10_000
"""the most runs one study holds (tasks × backbones × seeds): each is a directory, a process and a row of its report"""
STUDY_KEYS: dict[str, Rule] = {
    "name": FolderName(note="the study directory under log_dir"),
    "config": Text(note="a run configuration file, relative to the study file"),
    "settings": Entries(optional=False),
    "tasks": Items(Entries(optional=False)),
    "backbones": Items(OneOf(lambda: BACKBONES)),
    "seeds": AnyOf((Range(1, MAX_RUNS, integer=True, note="a count"), Items(Range(0, SEED_LIMIT, integer=True)))),
    "gym_packages": Items(Text(), empty_ok=True),
}
"""The keys of a study file and their valid values."""
LOG_DIR: Directory = next(spec.metadata["rule"] for spec in dataclasses.fields(RunConfig) if spec.name == "log_dir")
"""the rule of a run's `log_dir`, which the study checks on the value given before it puts each run below it"""
EXIT_OK, EXIT_FAILED_RUNS, EXIT_INTERRUPTED = 0, 3, 130
LOST_WORKER_WAIT_SECONDS = 60.0
"""how long a retry waits for the lost worker it replaces to be gone (see :func:`wait_for_lost_worker`)"""


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update` over `base`, merging nested mappings (`env_kwargs`, `ppo`, ...)."""
    merged = dict(base)
    for key, value in update.items():
        old = merged.get(key)
        merged[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def _beside(study_file: Path, relative: str) -> str:
    """A path written in a study file, relative to that file."""
    return os.path.normpath(study_file.parent / relative)


@dataclass
class Grid:
    """The runs of a study: tasks × backbones × seeds over one base configuration."""

    config_file: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """run-configuration keys of the study file"""
    flags: dict[str, Any] = field(default_factory=dict)
    """command-line flags (already typed), over the tasks' keys"""
    params: list[str] = field(default_factory=list)
    """``-p key=value`` overrides, over everything"""
    tasks: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    listed: bool = False
    """whether the study file lists `tasks` (each must then name its env), else the one default task"""
    backbones: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    name: str | None = None
    gym_packages: list[str] = field(default_factory=list)
    """modules imported for every task, before those a task names itself"""

    def __post_init__(self) -> None:
        """Each field by the rule of its study-file key, as a file is checked."""
        for key, value in (("settings", self.settings), ("tasks", self.tasks), ("backbones", self.backbones),
                           ("gym_packages", self.gym_packages)):
            if value != []:  # an empty list: the default (the run's backbone)
                STUDY_KEYS[key].check(key, value)
        Items(Range(integer=True), empty_ok=True).check("seeds", self.seeds)  # each then by the run's seed rule
        if self.name is not None:
            STUDY_KEYS["name"].check("name", self.name)
        Entries(optional=False).check("flags", self.flags)
        Items(Text(), empty_ok=True).check("params", self.params)
        if self.config_file is not None:
            PathName().check("config_file", self.config_file)

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> Grid:
        """A grid from a study file (see the module doc); non-empty `overrides` replace its fields."""
        PathName().check("path", path)
        path = Path(path)
        data = load_yaml(path)
        unknown = sorted(set(data) - set(STUDY_KEYS))
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(map(repr, unknown))} in study file {str(path)!r}; "
                              f"valid keys: {', '.join(STUDY_KEYS)}")
        for key, value in data.items():
            try:
                STUDY_KEYS[key].check(key, value)
            except ConfigError as error:
                raise ConfigError(f"study file {str(path)!r}: {error}") from None
        for n, task in enumerate(data.get("tasks") or []):
            try:
                if "config" in task:
                    STUDY_KEYS["config"].check(f"tasks[{n}].config", task["config"])
            except ConfigError as error:
                raise ConfigError(f"study file {str(path)!r}: {error}") from None
        seeds = data.get("seeds", [])
        fields = {"settings": data.get("settings", {}), "tasks": data.get("tasks") or [{}],
                  "gym_packages": data.get("gym_packages", []),
                  "backbones": data.get("backbones", []),
                  "seeds": list(range(seeds)) if isinstance(seeds, int) else seeds}
        fields["tasks"] = [{**task, "config": _beside(path, task["config"])} if "config" in task else task
                           for task in fields["tasks"]]
        config = data.get("config")
        grid = cls(config_file=None if config is None else _beside(path, config),
                   name=str(data.get("name", path.stem)), listed="tasks" in data, **fields)
        for key, value in overrides.items():
            if value:
                setattr(grid, key, value)
        return grid

    def decided(self) -> dict[str, tuple[tuple[str, ...], str]]:
        """The run settings the grid itself sets in every run, each with the parts of a study file that may not set
        them (`settings`, `tasks`: there they would be overwritten) and where to set them instead."""
        both = ("settings", "tasks")
        decided = {"threads": (both, "the study runs every run with one torch thread, or the --threads given; give "
                                     "--threads instead"),
                   "log_dir": (("tasks",), "every run of the study goes under {log_dir}/{name}/; set log_dir under "
                                           "settings: (or --log-dir) instead")}
        if self.seeds:
            decided["seed"] = (both, f"the study's seeds ({self.seeds}) set the seed of every run; list seeds under "
                                     "seeds: (or --seed) instead")
        if self.backbones:
            decided["backbone"] = (both, f"the study's backbones ({', '.join(self.backbones)}) set the backbone of "
                                         "every run; list backbones under backbones: (or --backbone) instead")
        return decided

    def check_layers(self) -> None:
        """Refuse (`ConfigError`, naming the key and where to set it) a key of `settings` or of a task that the grid
        sets itself (`decided`), and a listed task whose env no layer names (it would train the default env)."""
        decided = self.decided()
        layers = [*((f"tasks[{index}]", "tasks", task) for index, task in enumerate(self.tasks)),
                  ("settings", "settings", self.settings)]
        for where, part, layer in layers:
            for key, (refused_in, instead) in decided.items():
                if key in layer and part in refused_in:
                    raise ConfigError(f"{where}.{key}={shown(layer[key])}: {instead}")
        if self.tasks == [{}] and not self.listed:  # a grid that lists no task: the settings' env, or the default
            return
        for index, task in enumerate(self.tasks):
            if not self._names_env(task):
                raise ConfigError(f"tasks[{index}]={shown(task)}: no env (it would train the default, "
                                  f"{RunConfig.env}); set env: in the task (an id or module.path:EnvClass), under "
                                  "settings:, in its config: file or with --env")

    def _names_env(self, task: dict[str, Any]) -> bool:
        """Whether a layer over the defaults sets the env of `task`: its keys, `settings`, flags, `-p` or its
        config file."""
        if any("env" in layer for layer in (task, self.settings, self.flags)):
            return True
        if any(text.partition("=")[0].strip() == "env" for text in self.params):
            return True
        file = task.get("config", self.config_file)
        return file is not None and "env" in load_yaml(file)

    def configs(self) -> list[RunConfig]:
        """One resolved configuration per run, task by task, backbone by backbone, seed by seed."""
        self.check_layers()
        sizes = {"task": len(self.tasks), "backbone": len(self.backbones) or 1, "seed": len(self.seeds) or 1}
        if math.prod(sizes.values()) > MAX_RUNS:
            grid = " × ".join(f"{n:,} {name}{'s' if n > 1 else ''}" for name, n in sizes.items())
            raise ConfigError(f"the study's grid is {grid} = {math.prod(sizes.values()):,} runs; a study holds at "
                              f"most {MAX_RUNS:,} (split it into several studies)")
        configs = []
        for task in self.tasks:
            keys = {k: v for k, v in task.items() if k != "config"}
            file = task.get("config", self.config_file)
            layer = _merge(_merge(self.settings, keys), self.flags)
            if self.gym_packages:
                layer["gym_packages"] = [*self.gym_packages, *layer.get("gym_packages", [])]
            base = build_config(file, layer, self.params)
            for backbone in self.backbones or [base.backbone]:
                for seed in self.seeds or [base.seed]:
                    configs.append(build_config(file, {**layer, "backbone": backbone, "seed": seed}, self.params))
        return configs

    def study_configs(self) -> tuple[Path, list[RunConfig]]:
        """The study directory and the run configurations placed in it: one torch thread each, or the
        `threads` given as a flag (a study's workers share the machine, so a config file's count is not used).

        `log_dir` is checked by its rule, and that files can be created in it, before the study puts each run under
        it, and every folder the study makes (its directory, each run's) must not be a file (`check_folders`), nor
        its directory be inside a run, study or tune study directory, or be another kind (`check_owner`); then
        each run is validated, and runs the grid lists twice are refused, naming the flags that made tasks alike."""
        configs = self.configs()
        first = configs[0]
        for config in configs:  # the value given: each run's own log_dir is the study's folder from here on
            LOG_DIR.check_writable("log_dir", config.log_dir)
        given = first.log_dir
        directory = Path(given) / (self.name or f"{env_slug(first.env)}__{first.algo}")
        shared_env = len({c.env for c in configs}) < len({task_label(c.to_dict()) for c in configs})
        threads = self.flags.get("threads") or 1
        folders = task_folders([c.to_dict() for c in configs])
        for config, folder in zip(configs, folders, strict=True):
            config.log_dir = str(directory / folder if shared_env else directory)
            config.threads = threads
        check_folders("log_dir", given, [("the study directory", directory),
                                         *(("the run directory", RunDirectory.of(c).path) for c in configs)])
        check_owner("study directory", directory, "--log-dir", given, "--study" if self.name else None)
        validate_all(configs)
        names = Counter(str(Path(c.log_dir) / c.run_name()) for c in configs)
        repeated = [name for name, count in names.items() if count > 1]
        if repeated:
            envs = sorted({c.env for c in configs if str(Path(c.log_dir) / c.run_name()) == repeated[0]})
            why = (f": the env specs {', '.join(map(repr, envs))} give one folder name; list one of them once, or as "
                   "another spec" if len(envs) > 1 else self._alike())
            raise ConfigError(f"the study lists run {repeated[0]!r} more than once{why}")
        return directory, configs

    def _alike(self) -> str:
        """Why runs repeat: the flags or `-p` keys that replace a key every task sets itself, else repeated seeds
        or tasks."""
        given = {key.split(".")[0] for key in self.flags} | {
            text.partition("=")[0].strip().split(".")[0] for text in self.params}
        replaced = sorted(given & {key for task in self.tasks for key in task if key != "config"})
        if len(self.tasks) > 1 and replaced:
            return (f": the command line sets {', '.join(replaced)} for every task, replacing each task's own, so "
                    "tasks become the same run; drop it to keep the file's tasks")
        return " (repeated seeds or tasks?)"

    def record(self) -> dict[str, Any]:
        return {"config": self.config_file, "settings": self.settings, "flags": self.flags, "params": self.params,
                "tasks": self.tasks, "backbones": self.backbones, "seeds": self.seeds,
                "gym_packages": self.gym_packages}


@dataclass(frozen=True)
class RunTask:
    """What a worker needs to train one run of a study."""

    config: RunConfig
    resume: bool
    """continue from the run's last checkpoint (else start afresh, clearing what a run killed before
    its first checkpoint left)"""
    session: str
    verbose: int = 0
    retries: int = 0
    """times this run was retried after its worker was lost, over its whole life (``status.json``)"""

    def after_loss(self) -> RunTask:
        """This run retried after its worker was lost: resumed from its last checkpoint if any, one more retry."""
        return replace(self, resume=Run.of(self.config).checkpoint() is not None, retries=self.retries + 1)


def alive(pid: int) -> bool:
    """Whether process `pid` (of this host) exists and is not a zombie."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat")
        return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except PermissionError:
        return True
    except (ProcessLookupError, FileNotFoundError):
        return False


def wait_for_lost_worker(directory: Path, session: str, timeout: float = LOST_WORKER_WAIT_SECONDS) -> None:
    """Before a retry trains: when `status.json` says another process of this study session,
    on this host, is training the run (the lost worker: a Ray worker notices its raylet's death
    only a moment after the node is declared dead), wait up to `timeout` seconds for it to be
    gone, so two processes never write one run directory (and a lock it held is released)."""
    status = Run(directory).status or {}
    pid = status.get("pid")
    if (status.get("state") != RUNNING or status.get("session") != session or pid in (None, os.getpid())
            or status.get("host") != socket.gethostname()):
        return
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def execute(task: RunTask) -> dict[str, Any]:
    """Train one run (in a worker) and record its outcome in `status.json`; never raises for a
    run that fails, so the study goes on."""
    directory = RunDirectory.of(task.config).path
    wait_for_lost_worker(directory, task.session)
    if not task.resume and directory.exists():
        shutil.rmtree(directory)
    write_status(directory, RUNNING, session=task.session, retries=task.retries)
    outcome: dict[str, Any] = {"run": task.config.run_name(), "state": FINISHED}
    try:
        summary = train(task.config, resume=task.resume, verbose=task.verbose)
    except NonFiniteError as error:
        outcome.update(state=DIVERGED, error=str(error))
    except Exception as error:  # any failure of one run is recorded, never fatal to the study
        outcome.update(state=FAILED, error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
    else:
        outcome.update(steps_per_second=None if trained_nothing(summary) else summary["steps_per_second"],
                       final_mean_return=summary["final_mean_return"], final_success_rate=summary["final_success_rate"])
    write_status(directory, outcome["state"], session=task.session, retries=task.retries,
                 **{k: v for k, v in outcome.items() if k in ("error", "traceback")})
    return outcome


def check_consistency(configs: list[RunConfig]) -> None:
    """Refuse a study whose existing run directories hold other configurations (in their `config.yaml` or
    recorded in their checkpoints: `experiments.run_dir.RunDirectory.check_same_run`)."""
    for config in configs:
        run = RunDirectory.of(config)
        directory = run.path
        if directory.is_dir():
            try:
                run.check_same_run(config)
            except ConfigError as error:
                changed = str(error).rpartition(" in: ")[2]
                raise ConfigError(f"{str(directory)!r} already holds a run of another configuration (differs in: "
                                  f"{changed}); choose another --study name or --log-dir") from error


def plan(configs: list[RunConfig], session: str, retry_failed: bool = False,
         verbose: int = 0) -> tuple[list[RunTask], Counter[str]]:
    """The runs to launch, and the count of every run by state."""
    tasks, states = [], Counter()
    for config in configs:
        run = Run.of(config)
        state = run.state(config.total_timesteps)
        states[state] += 1
        if state == FINISHED or (state in UNSUCCESSFUL and not retry_failed):
            continue
        retries = int((run.status or {}).get("retries", 0))
        tasks.append(RunTask(config, run.checkpoint() is not None, session, verbose, retries))
    return tasks, states


def steps_at_end(config: RunConfig, start: int) -> int:
    """The environment steps a run of `config` trained from step `start` ends at: its learner collects whole
    rollouts of `n_steps` × `n_envs` steps until it reaches `total_timesteps` (SB3's `learn`), so the budget left
    rounds up to a whole number of rollouts (a run stopped early when solved ends before)."""
    if start >= config.total_timesteps:
        return start
    rollout = algo_settings(config.algo, config.algo_options(), config.n_envs)["n_steps"] * config.n_envs
    return start + math.ceil((config.total_timesteps - start) / rollout) * rollout


def check_folders(key: str, value: Any, folders: Iterable[tuple[str, Path]]) -> None:
    """Refuse (`ConfigError`, one line naming `key`, its `value` and the path that is a file) a folder the command
    would make (`folders`: what it is, its path) where a file is, or on whose way one is: a file is never
    replaced, nor written into, and nothing is created before the check."""
    for what, path in folders:
        existing = nearest_existing(Path(path))
        if not existing.is_dir():
            where = (f"{what} {str(path)!r} is a file" if existing == Path(path)
                     else f"{str(existing)!r}, on the way to {what} {str(path)!r}, is a file")
            raise ConfigError(f"{key}={shown(value)}: {where}; expected a directory (move the file away, or choose "
                              f"another {key})")


class Progress:
    """A compact progress line on `stream`, from the run directories: runs done / running /
    failed / queued, environment steps and their rate over this session."""

    def __init__(self, tasks: list[RunTask], stream: TextIO | None = None, every: float = 10.0) -> None:
        self.tasks, self.stream, self.every = tasks, stream or sys.stderr, every
        self.directories = [RunDirectory.of(task.config).path for task in tasks]
        self.target = sum(steps_at_end(task.config, Run(d).timesteps() if task.resume else 0)
                          for task, d in zip(tasks, self.directories, strict=True))
        self.started = time.time()
        self.steps_at_start = self._steps()
        self.last_counts: tuple[int, ...] = ()
        self.last_time = 0.0

    def _steps(self) -> int:
        return sum(Run(directory).timesteps() for directory in self.directories)

    def counts(self, results: dict[int, dict[str, Any]]) -> tuple[int, int, int, int]:
        """Runs done, running (a worker of this session has started them), failed and queued."""
        states = Counter(result["state"] for result in results.values())
        statuses = [Run(directory).status or {} for directory in self.directories]
        running = sum(1 for i, status in enumerate(statuses) if i not in results
                      and status.get("session") == self.tasks[i].session and status.get("state") == RUNNING)
        return (states[FINISHED], running, states[DIVERGED] + states[FAILED],
                len(self.tasks) - len(results) - running)

    def line(self, counts: tuple[int, int, int, int]) -> str:
        steps = self._steps()
        elapsed = time.time() - self.started
        rate = (steps - self.steps_at_start) / max(elapsed, 1e-9)
        eta = (self.target - steps) / rate if rate > 0 and steps < self.target else None
        done, running, failed, queued = counts
        return (f"[{_duration(elapsed)}] {done}/{len(self.tasks)} done, {running} running, {failed} failed, "
                f"{queued} queued | {steps:,}/{self.target:,} steps, "
                + (f"{rate:,.0f} steps/s" if rate > 0 else "– steps/s")
                + ("" if eta is None else f", about {_duration(eta)} left"))

    def update(self, results: dict[int, dict[str, Any]]) -> None:
        """Print the line when the counts changed, or every `every` seconds."""
        counts = self.counts(results)
        if counts != self.last_counts or time.time() - self.last_time >= self.every:
            print(self.line(counts), file=self.stream, flush=True)
            self.last_counts, self.last_time = counts, time.time()

    def finished(self, task: RunTask, result: dict[str, Any]) -> None:
        """One line per run as it ends."""
        if result["state"] == FINISHED:
            rate, speed = result["final_success_rate"], result["steps_per_second"]
            detail = (f"mean return {result['final_mean_return']:.3f}" + ("" if rate is None else
                      f", success rate {rate:.2f}") + (", nothing left to train" if speed is None
                                                       else f", {speed:.0f} steps/s"))
        else:
            detail = result["error"].splitlines()[0] if result.get("error") else ""
        print(f"  {result['state']} {task.config.run_name()}: {detail}", file=self.stream, flush=True)

    def lost(self, task: RunTask, lost: Lost, max_retries: int) -> None:
        """One line when a run's worker is lost: what happened, and where the run goes on from."""
        if lost.retried:
            checkpoint = Run.of(task.config).checkpoint()
            where = f"its checkpoint at {checkpoint[1]:,} steps" if checkpoint else "the start (no checkpoint yet)"
            then = f"retry {lost.losses} of {max_retries}, from {where}"
        else:
            then = f"given up after {max_retries} retries (--max-retries)"
        print(f"  lost {task.config.run_name()}: {lost.reason}; {then}", file=self.stream, flush=True)


def give_up(task: RunTask, lost: Lost) -> dict[str, Any]:
    """Record a run lost once more than the retries allow as `failed` (its checkpoints are kept)."""
    error = f"its worker was lost {lost.losses} time{'s' if lost.losses > 1 else ''}, last: {lost.reason}"
    write_status(RunDirectory.of(task.config).path, FAILED, session=task.session,
                 retries=task.retries + lost.losses - 1,
                 error=error)
    return {"run": task.config.run_name(), "state": FAILED, "error": error}


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@contextlib.contextmanager
def _study_lock(directory: Path) -> Iterator[None]:
    """One process per study directory at a time (the lock goes with the process, even killed)."""
    with made_folders(directory, leftovers=(STUDY_LOCK,)), (directory / STUDY_LOCK).open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise ConfigError(f"study {str(directory)!r} is being run by another process") from error
        yield


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C, so the workers are stopped as well."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _union(earlier: list[Any], now: list[Any]) -> list[Any]:
    """`earlier`, then the items of `now` it lacks, in order (items may be dicts, so not a set)."""
    return [*earlier, *(item for item in now if item not in earlier)]


def _write_record(directory: Path, name: str, grid: Grid, configs: list[RunConfig], command: str) -> None:
    """Update `study.yaml`: the grid (every task, backbone and seed any command ran: a rerun on a subset
    adds to it), every run (in grid order, earlier ones kept), and the commands, each with its own grid."""
    record = read_study_record(directory)
    runs = [RunDirectory.of(c).path.relative_to(directory).as_posix() for c in configs]
    now, earlier = grid.record(), record.get("grid") or {}
    merged = {**now, **{key: _union(earlier.get(key, []), now[key]) for key in ("tasks", "backbones", "seeds")}}
    ran = {"command": command, "time": time.strftime("%Y-%m-%d %H:%M:%S"), "grid": copy.deepcopy(now)}
    record.update(name=name, grid=merged, runs=_union(record.get("runs", []), runs),
                  commands=[*record.get("commands", []), ran])
    write_atomic(directory / STUDY_FILE, yaml.safe_dump(record, sort_keys=False))


def run_study(grid: Grid, command: str, launcher: str = "local", workers: int | None = None,
              address: str | None = None, retry_failed: bool = False, report: bool = True,
              reps: int = DEFAULT_REPS, verbose: int = 0, stream: TextIO | None = None,
              max_retries: int = DEFAULT_MAX_RETRIES) -> int:
    """Run (or resume) the study and write its report; a run whose worker is lost is retried up to
    `max_retries` times. Returns the exit status: 0 when every run finished, 3 when some
    diverged or failed (or were lost too often), 130 when interrupted (rerun to resume)."""
    if not isinstance(grid, Grid):
        raise ConfigError(f"grid={shown(grid)}: expected a Grid (Grid.from_file(path) reads a study file)")
    OneOf(lambda: LAUNCHERS).check("launcher", launcher)
    for name, value in (("workers", workers), ("reps", reps), ("max_retries", max_retries), ("verbose", verbose)):
        if value is not None:
            CLI_OPTIONS[name].check(name, value)
    for name, value in (("retry_failed", retry_failed), ("report", report)):
        Flag().check(name, value)
    stream = stream or sys.stderr
    directory, configs = grid.study_configs()
    line = applied_line([config.hyperparams for config in configs])
    if line is not None:
        print(line, file=stream, flush=True)
    if report:  # a report.md the study did not write is refused before any run, not after them all
        report_target(directory, "study")
    connect(launcher, address)  # a launcher that cannot start is refused before anything is created
    with _study_lock(directory):
        check_consistency(configs)
        for config in configs:
            run = RunDirectory.of(config)
            if run.config() is None:
                with made_folders(run.path):
                    run.write_config(config_record(config))
        _write_record(directory, directory.name, grid, configs, command)
        session = f"{os.getpid()}-{time.time():.0f}"
        tasks, states = plan(configs, session, retry_failed, verbose)
        print(f"study {str(directory)!r}: {len(configs)} runs ("
              + ", ".join(f"{n} {'unfinished' if s == INTERRUPTED else s}" for s, n in states.items())
              + f"); launching {len(tasks)} on {launcher}", file=stream, flush=True)
        results: dict[int, dict[str, Any]] = {}
        if tasks:
            progress = Progress(tasks, stream)
            try:
                with _terminate_as_interrupt(), contextlib.closing(
                        launch(execute, tasks, launcher, workers, address, poll=2.0, max_retries=max_retries,
                               renew=RunTask.after_loss)) as outcomes:
                    for outcome in outcomes:
                        if outcome is not None:
                            index, result = outcome
                            if isinstance(result, Lost):
                                progress.lost(tasks[index], result, max_retries)
                                result = None if result.retried else give_up(tasks[index], result)
                            if result is not None:
                                results[index] = result
                                progress.finished(tasks[index], result)
                        progress.update(results)
            except KeyboardInterrupt:
                print(f"study interrupted; rerun the same command to resume it ({str(directory)!r})",
                      file=stream, flush=True)
                return EXIT_INTERRUPTED
        if report:
            print(f"report: {build_report(directory, reps=reps)}", file=stream, flush=True)
        final = Counter(Run.of(c).state(c.total_timesteps) for c in configs)
        return EXIT_FAILED_RUNS if final[DIVERGED] + final[FAILED] else EXIT_OK
