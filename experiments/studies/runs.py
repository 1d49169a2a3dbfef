"""Runs as studies and reports read them: each run's state, score and learning curve, from the files its
`RunDirectory` holds and the `status.json` a study's worker writes around it.

Any launcher (process pool, Ray, a shell loop) and any moment (a study still running, or killed) gives the same
answer:

- `finished`: `summary.json` exists (and, when a step target is given, reaches it);
- `diverged` / `failed`: `status.json` says so (a non-finite loss, gradient or parameter, or any other
  exception, with its message);
- `interrupted`: a checkpoint exists but no summary, so the run resumes from it;
- `new`: nothing to resume from.

A study puts the runs of each task in a folder named after the task (`task_folders`) when two tasks share an
environment id, and keeps its record in `study.yaml` (`STUDY_FILE`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from envs.atomic import made_folders
from envs.rules import one_line, shown
from envs.wrappers import parse_env_wrapper
from experiments.config import RunConfig
from experiments.run_dir import (
    CONFIG_FILE,
    EVALUATIONS_FILE,
    PROGRESS_FILE,
    STATUS_FILE,
    STUDY_RECORD,
    SUMMARY_FILE,
    RunDirectory,
    json_problem,
    read_json,
    summary_problem,
)
from experiments.strict_yaml import load as load_yaml_text

STUDY_FILE = STUDY_RECORD
FINISHED, DIVERGED, FAILED, INTERRUPTED, NEW = "finished", "diverged", "failed", "interrupted", "new"
RUNNING = "running"
"""what a worker writes in ``status.json`` while it trains a run"""
UNSUCCESSFUL = (DIVERGED, FAILED)


def task_label(config: dict[str, Any]) -> str:
    """The task of a run configuration, as reports name it: `env (key=value, ...)`, followed by its wrappers
    (`+ MaskVelocity`, `+ TimeLimit(max_episode_steps=100)`) where it has some."""
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted((config.get("env_kwargs") or {}).items()))
    label = f"{config.get('env', '?')} ({kwargs})" if kwargs else str(config.get("env", "?"))
    for wrapper in parse_env_wrapper(config.get("env_wrapper")):
        arguments = ", ".join(f"{k}={v}" for k, v in sorted(wrapper.kwargs.items()))
        label += f" + {wrapper.path.replace(':', '.').rsplit('.', 1)[-1]}" + (f"({arguments})" if arguments else "")
    return label


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` with `noun` in the number it takes: `1 run`, `2 runs` (`plural`: the plural when not `noun + "s"`)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


SLUG_LENGTH = 200
"""the longest slug: with a figure's prefix and suffix (`scores_….png`) a name stays within 255 bytes"""


def slug(text: str) -> str:
    """`text` as a file or folder name (letters, digits, dots and underscores); a longer one than `SLUG_LENGTH` is
    cut, and ends in a digest of the whole, so that two long texts stay two names."""
    name = re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")
    if len(name) <= SLUG_LENGTH:
        return name
    return f"{name[:SLUG_LENGTH - 13]}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def task_folders(tasks: Sequence[dict[str, Any]]) -> list[str]:
    """The folder inside a study directory of each run of `tasks` (its configuration, in the study's order): the
    slug of its task's label, with a digest of the label where an earlier, other task has that slug already (`g: 10`
    and `g: -10` both read `g_10`)."""
    owners: dict[str, str] = {}
    folders = []
    for task in tasks:
        label = task_label(task)
        name = slug(label)
        if owners.setdefault(name, label) != label:
            name = f"{name}_{hashlib.sha256(label.encode()).hexdigest()[:8]}"
        folders.append(name)
    return folders


def read_study_record(directory: Path) -> dict[str, Any]:
    """A study directory's `study.yaml` (name, grid, runs, commands); empty when there is none."""
    path = Path(directory) / STUDY_FILE
    return (load_yaml_text(path.read_text()) or {}) if path.exists() else {}


def listed_runs(directory: Path) -> list[str]:
    """The runs that the `study.yaml` of `directory`, then of every study below it, lists, as paths relative to
    `directory`: a report of a parent folder counts its studies' missing runs too."""
    directory = Path(directory)
    listed = []
    for folder in sorted(folders_holding(directory, STUDY_FILE), key=lambda path: (path != directory, path)):
        prefix = folder.relative_to(directory).as_posix()
        listed += [str(name) if prefix == "." else f"{prefix}/{name}"
                   for name in read_study_record(folder).get("runs") or []]
    return list(dict.fromkeys(listed))


def folders_holding(directory: Path, name: str) -> list[Path]:
    """The folders at or below `directory` that hold a file `name`, sorted, through folder links too, each folder
    once (one reached by two paths, or through a link cycle, is read once)."""
    seen: set[str] = set()
    found = []
    for folder, names, files in os.walk(directory, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            names.clear()  # reached before
            continue
        seen.add(real)
        if name in files:
            found.append(Path(folder))
    return sorted(found)


def write_status(directory: Path, state: str, **fields: Any) -> None:
    """Record a run's state in its `status.json` (atomically) with the writing process and host."""
    record = {"state": state, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), **fields}
    with made_folders(directory):
        RunDirectory(directory).write(STATUS_FILE, json.dumps(record, indent=2))


@dataclass(frozen=True)
class Run:
    """One run directory as a report reads it (read lazily; build a new one to see newer files)."""

    directory: Path

    @classmethod
    def of(cls, config: RunConfig) -> Run:
        """The run `config` describes."""
        return cls(RunDirectory.of(config).path)

    @property
    def name(self) -> str:
        return self.directory.name

    @cached_property
    def files(self) -> RunDirectory:
        return RunDirectory(self.directory)

    @cached_property
    def config(self) -> dict[str, Any]:
        return self.files.config() or {}

    @cached_property
    def summary(self) -> dict[str, Any] | None:
        """`summary.json`; `None` where there is none, or it is not a training run's whole summary
        (`summary_problem`)."""
        summary = self.files.summary()
        return None if summary is None or summary_problem(summary) else summary

    @cached_property
    def status(self) -> dict[str, Any] | None:
        return read_json(self.files / STATUS_FILE)

    def state(self, total_timesteps: int | None = None) -> str:
        """`finished`, `diverged`, `failed`, `interrupted` or `new` (see the module doc).

        A finished run whose summary holds a non-finite score counts as diverged; one that stopped short of
        `total_timesteps` (by default its own configuration's: a run resumed to a larger budget is not finished
        until it reaches it) as interrupted, unless it stopped there solved (`stop_when_solved`).
        """
        if total_timesteps is None and isinstance(own := self.config.get("total_timesteps"), int):
            total_timesteps = own
        if self.summary is not None:
            if not all(math.isfinite(self.summary[k]) for k in ("final_mean_return", "final_std_return")):
                return DIVERGED
            if (total_timesteps is None or self.summary["env_steps"] >= total_timesteps
                    or self.summary.get("stopped_solved")):
                return FINISHED
        elif self.status is not None and self.status.get("state") in UNSUCCESSFUL:
            return self.status["state"]
        return INTERRUPTED if self.checkpoint() is not None else NEW

    def checkpoint(self) -> tuple[Path, int] | None:
        return self.files.latest_checkpoint()

    def timesteps(self) -> int:
        """Environment steps done so far (from the summary, else the last checkpoint's progress)."""
        if self.summary is not None:
            return int(self.summary["env_steps"])
        progress = self.files.progress()
        return 0 if progress is None else int(progress["timesteps"])

    @cached_property
    def evaluations(self) -> list[dict[str, str]]:
        return self.files.evaluations.rows()

    def has_success(self) -> bool:
        """Whether the task reports success (the final evaluation, else the logged ones, have a rate)."""
        if self.summary is not None:
            return self.summary["final_success_rate"] is not None
        return bool(self.evaluations) and all(row["success_rate"] != "" for row in self.evaluations)

    def curve(self, success: bool, stochastic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Evaluation timesteps and scores (success rate or mean return) from `evaluations.csv`, of the
        deterministic policy or, with `stochastic`, the sampling one."""
        column = _score_column(success, stochastic)
        rows = [r for r in self.evaluations if r.get(column)]
        steps = np.array([int(float(r["timesteps"])) for r in rows], dtype=np.int64)
        return steps, np.array([float(r[column]) for r in rows], dtype=np.float64)

    def lowest_after_solving(self, success: bool, threshold: float, stochastic: bool = False) -> float | None:
        """The lowest evaluation from the first one scoring ≥ `threshold` on, the final one included; `None`
        for a run that never reached it."""
        _, values = self.curve(success, stochastic)
        final = None
        if self.state() == FINISHED:
            assert self.summary is not None
            final = self.summary.get(f"final_{_score_column(success, stochastic)}")
        if final is not None:
            values = np.append(values, final)
        return lowest_after_reaching(values, threshold)

    def score(self, success: bool) -> float | None:
        """The final score: the summary's final evaluation; for a run that diverged or failed, its last evaluation
        before it stopped; `None` when there is none."""
        state = self.state()
        if state == FINISHED:
            assert self.summary is not None
            return float(self.summary[f"final_{_score_column(success, stochastic=False)}"])
        if state in UNSUCCESSFUL:
            _, values = self.curve(success)
            finite = values[np.isfinite(values)]
            return float(finite[-1]) if finite.size else None
        return None

    def error(self) -> str:
        """The message of a run that diverged or failed (empty otherwise)."""
        return "" if self.status is None else str(self.status.get("error", ""))

    def problem(self) -> str | None:
        """Why a report cannot read this run (a summary, status or progress file that holds no JSON object, a
        configuration that is not a mapping or not a training run's, evaluation steps that repeat or go back, a
        summary without its scores, a file that is not a regular one, such as a pipe or a device), else `None`."""
        for name in (CONFIG_FILE, EVALUATIONS_FILE, SUMMARY_FILE, STATUS_FILE, PROGRESS_FILE):
            if (self.files / name).exists() and not (self.files / name).is_file():  # a read would block or not end
                return f"{name} is not a regular file"
        for name in (SUMMARY_FILE, STATUS_FILE, PROGRESS_FILE):
            if (problem := json_problem(self.files / name)) is not None:
                return problem
        try:
            if not isinstance(self.config, dict):
                return "config.yaml is not a mapping"
            if self.files.reader() == "lm eval":
                return "a language-model run (`lm eval` reads it)"
            missing = [key for key in ("algo", "backbone", "env") if key not in self.config]
            if missing:
                return f"config.yaml names no {' or '.join(missing)}"
            if (problem := config_problem(self.config)) is not None:
                return f"config.yaml {problem}"
            task_label(self.config)
            if (summary := self.files.summary()) is not None and (problem := summary_problem(summary)) is not None:
                return f"{SUMMARY_FILE} {problem}"
            success = self.has_success()
            for column in ((rate, stochastic) for rate in (True, False) for stochastic in (False, True)):
                steps, _ = self.curve(*column)  # every score column a report or plot reads, not the plotted one only
                back = np.flatnonzero(np.diff(steps) <= 0)
                if back.size:
                    return (f"evaluations.csv repeats or rewinds its steps ({steps[back[0]]} then "
                            f"{steps[back[0] + 1]})")
            self.score(success)
            self.timesteps()
            self.lowest_after_solving(success, 0.0)
        except Exception as error:  # any file the report cannot read: name it rather than stop the report
            return f"{type(error).__name__}: {error}"
        return None


def config_problem(config: dict[str, Any]) -> str | None:
    """What of a training run's `config.yaml` a report reads holds a value of another kind: the learner, backbone
    and env not names, the seed not an integer, env_kwargs or the run's own sections not mappings; else `None`."""
    wrong = [f"{key}={shown(config[key])}, not a name" for key in ("algo", "backbone", "env")
             if not isinstance(config[key], str)]
    if not wrong and not (isinstance(config.get("seed", 0), int) and not isinstance(config.get("seed"), bool)):
        wrong.append(f"seed={shown(config['seed'])}, not an integer")
    if not wrong:
        wrong = [f"{key}={shown(config[key])}, not a mapping"
                 for key in ("env_kwargs", "policy", config["algo"], config["backbone"])
                 if config.get(key) is not None and not isinstance(config[key], dict)]
    return "holds " + "; ".join(wrong) if wrong else None


def lowest_after_reaching(values: Sequence[float] | np.ndarray, threshold: float) -> float | None:
    """The lowest of `values` from the first one ≥ `threshold` on; `None` if none reaches it."""
    values = np.asarray(values, dtype=np.float64)
    reached = np.flatnonzero(values >= threshold)
    return float(values[reached[0]:].min()) if reached.size else None


def _score_column(success: bool, stochastic: bool) -> str:
    return ("stochastic_" if stochastic else "") + ("success_rate" if success else "mean_return")


def unreadable(runs: list[Run], command: str) -> dict[Run, str]:
    """The runs `command` (`report`, `plot`) cannot read, each with why (`Run.problem`) and named on one line of
    stderr as it is skipped."""
    problems = {run: problem for run in runs if (problem := run.problem()) is not None}
    for run, problem in problems.items():
        print(f"{command}: skipping run {str(run.directory)!r}: {one_line(problem)}", file=sys.stderr)
    return problems


def readable(runs: list[Run], command: str) -> list[Run]:
    """The runs `command` can read; every other one is named on one line of stderr and skipped (`unreadable`)."""
    problems = unreadable(runs, command)
    return [run for run in runs if run not in problems]


def find_runs(directory: Path) -> list[Run]:
    """Every run directory (one holding `config.yaml`) at or below `directory` (`folders_holding`)."""
    return [Run(path) for path in folders_holding(directory, "config.yaml")]
