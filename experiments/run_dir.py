"""Run directories on disk: where a run lives, how its files are written, and its state, score and
learning curve as studies and reports read them.

A run lives in ``{log_dir}/{env}__{algo}-{backbone}__{seed}/`` (:func:`run_dir`); a study puts the
runs of each task in a folder named after the task (:func:`task_folder`) when two tasks share an
environment id, and keeps its record in ``study.yaml`` (:data:`STUDY_FILE`). Every file is
written atomically and durably (:mod:`experiments.atomic`), and one process at a time writes a run
directory (:func:`run_lock`); docs/run-directories.md says what that guarantees.

Reading needs only the files a run writes (:mod:`experiments.training`) plus ``status.json``, which a
study's worker writes around each run, so any launcher (process pool, Ray, a shell loop) and any
moment (a study still running, or killed) gives the same answer:

- ``finished``: ``summary.json`` exists (and, when a step target is given, reaches it);
- ``diverged`` / ``failed``: ``status.json`` says so (a non-finite loss, gradient or parameter,
  or any other exception, with its message);
- ``interrupted``: a checkpoint exists but no summary, so the run resumes from it;
- ``new``: nothing to resume from (at most the logs of a run killed before its first checkpoint).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import math
import os
import re
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.wrappers import parse_env_wrapper
from experiments.atomic import write_atomic
from experiments.strict_yaml import load as load_yaml_text

if TYPE_CHECKING:
    from experiments.config import RunConfig


STUDY_FILE = "study.yaml"
CHECKPOINT_PREFIX = "model_"
STATUS_FILE = "status.json"
PROGRESS_FILE = "progress.json"
LOCK_FILE = "run.lock"
"""held (``flock``) by the one process writing the run; holds its PID and host"""
FINISHED, DIVERGED, FAILED, INTERRUPTED, NEW = "finished", "diverged", "failed", "interrupted", "new"
RUNNING = "running"
"""what a worker writes in ``status.json`` while it trains a run"""
UNSUCCESSFUL = (DIVERGED, FAILED)


def run_dir(config: RunConfig) -> Path:
    """The directory of the run ``config`` describes."""
    return Path(config.log_dir) / config.run_name()


def task_label(config: dict[str, Any]) -> str:
    """The task of a run configuration, as reports name it: ``env (key=value, ...)``, followed by its wrappers
    (``+ MaskVelocity``, ``+ TimeLimit(max_episode_steps=100)``) where it has some."""
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted((config.get("env_kwargs") or {}).items()))
    label = f"{config.get('env', '?')} ({kwargs})" if kwargs else str(config.get("env", "?"))
    for wrapper in parse_env_wrapper(config.get("env_wrapper")):
        arguments = ", ".join(f"{k}={v}" for k, v in sorted(wrapper.kwargs.items()))
        label += f" + {wrapper.path.replace(':', '.').rsplit('.', 1)[-1]}" + (f"({arguments})" if arguments else "")
    return label


def slug(text: str) -> str:
    """``text`` as a file or folder name (letters, digits, dots and underscores)."""
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def task_folder(config: dict[str, Any]) -> str:
    """The folder of a task's runs inside a study directory."""
    return slug(task_label(config))


class RunBusyError(RuntimeError):
    """Another process holds the run directory's lock."""


def _busy(handle: Any, directory: Path) -> RunBusyError | None:
    """``None`` once this process holds the lock on ``handle``, else the error naming the holder."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().split()
        who = (f"process {holder[0]} on {holder[1]}" if len(holder) == 2
               else "another process (starting: its PID is not written yet)")
        return RunBusyError(f"run directory {str(directory)!r} is being written by {who}; wait for it to end, "
                            "or stop it and rerun with --resume")
    return None


@contextlib.contextmanager
def run_lock(directory: Path) -> Iterator[None]:
    """Hold the exclusive lock of a run directory (``flock`` on :data:`LOCK_FILE`, which records
    this process's PID and host) while the block runs; the kernel releases it when the process
    ends, even killed. Raises :class:`RunBusyError`, naming the holder, when another process has it."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / LOCK_FILE).open("a+") as handle:
        busy = _busy(handle, directory)
        if busy is not None:
            raise busy
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} {socket.gethostname()}\n")
        handle.flush()
        yield


def check_not_busy(directory: Path) -> None:
    """Raise :class:`RunBusyError` when another process holds the run's lock; changes no file."""
    try:
        handle = (directory / LOCK_FILE).open()
    except FileNotFoundError:
        return
    with handle:
        busy = _busy(handle, directory)
    if busy is not None:
        raise busy


def holds_run(directory: Path) -> bool:
    """Whether ``directory`` holds (part of) a run: anything but its lock and a study's status file."""
    return directory.is_dir() and any(p.name not in (LOCK_FILE, STATUS_FILE) for p in directory.iterdir())


def checkpoints(directory: Path, prefix: str = CHECKPOINT_PREFIX,
                suffix: str = "_steps.zip") -> list[tuple[Path, int]]:
    """Every checkpoint ``{prefix}{steps}{suffix}`` in ``directory``, as ``(path, steps)``, fewest steps first."""
    found = []
    for path in directory.glob(f"{prefix}*{suffix}"):
        steps = path.name.removeprefix(prefix).removesuffix(suffix)
        if steps.isdigit():
            found.append((int(steps), path))
    return [(path, steps) for steps, path in sorted(found)]


def latest_checkpoint(directory: Path, prefix: str = CHECKPOINT_PREFIX,
                      suffix: str = "_steps.zip") -> tuple[Path, int] | None:
    """The checkpoint ``{prefix}{steps}{suffix}`` with the most steps, as ``(path, steps)``."""
    found = checkpoints(directory, prefix, suffix)
    return found[-1] if found else None


def best_checkpoint(found: list[tuple[Path, int]], rows: list[dict[str, str]]) -> tuple[Path, int] | None:
    """The checkpoint of ``found`` with the best evaluation (highest mean return, the earliest of equals,
    as for ``best_model.zip``): a checkpoint is scored by the last evaluation at or before its step
    (the same step when ``checkpoint_freq`` is a multiple of ``eval_freq``). ``None`` without evaluations."""
    scored = sorted((int(float(r["timesteps"])), float(r["mean_return"])) for r in rows)
    best, best_score = None, -math.inf
    for path, steps in found:
        before = [score for step, score in scored if step <= steps]
        if before and before[-1] > best_score:
            best, best_score = (path, steps), before[-1]
    return best


def read_study_record(directory: Path) -> dict[str, Any]:
    """A study directory's ``study.yaml`` (name, grid, runs, commands); empty when there is none."""
    path = Path(directory) / STUDY_FILE
    return (load_yaml_text(path.read_text()) or {}) if path.exists() else {}


def write_status(directory: Path, state: str, **fields: Any) -> None:
    """Record a run's state (atomically) with the writing process and host."""
    directory.mkdir(parents=True, exist_ok=True)
    record = {"state": state, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), **fields}
    write_atomic(directory / STATUS_FILE, json.dumps(record, indent=2))


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` when there is none (or it is not JSON)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def record_progress(directory: Path, timesteps: int, wall_seconds: float, checkpoint_walls: dict[int, float]) -> None:
    """Write ``progress.json``: the steps of the newest checkpoint, the training wall-clock seconds then, and
    those of every kept checkpoint (what a resume from an older one, when the newest does not load, starts at)."""
    record = {"timesteps": timesteps, "wall_seconds": wall_seconds,
              "checkpoints": {str(k): v for k, v in sorted(checkpoint_walls.items())}}
    write_atomic(directory / PROGRESS_FILE, json.dumps(record))


def checkpoint_walls(directory: Path) -> dict[int, float]:
    """The training wall-clock seconds at each kept checkpoint, from ``progress.json`` (steps → seconds)."""
    progress = read_json(directory / PROGRESS_FILE) or {}
    walls = {int(k): float(v) for k, v in (progress.get("checkpoints") or {}).items()}
    if progress.get("timesteps") is not None:  # a run from before the per-checkpoint record
        walls.setdefault(int(progress["timesteps"]), float(progress["wall_seconds"]))
    return walls


@dataclass(frozen=True)
class Run:
    """One run directory (read lazily; build a new one to see newer files)."""

    directory: Path

    @property
    def name(self) -> str:
        return self.directory.name

    @cached_property
    def config(self) -> dict[str, Any]:
        path = self.directory / "config.yaml"
        return (load_yaml_text(path.read_text()) or {}) if path.exists() else {}

    @cached_property
    def summary(self) -> dict[str, Any] | None:
        return read_json(self.directory / "summary.json")

    @cached_property
    def status(self) -> dict[str, Any] | None:
        return read_json(self.directory / STATUS_FILE)

    def state(self, total_timesteps: int | None = None) -> str:
        """``finished``, ``diverged``, ``failed``, ``interrupted`` or ``new`` (see the module doc).

        A finished run whose summary holds a non-finite score counts as diverged; one that stopped
        short of ``total_timesteps`` (a study extended to more steps) as interrupted, unless it stopped
        there because it was solved (``stop_when_solved``).
        """
        if self.summary is not None:
            if not all(math.isfinite(self.summary[k]) for k in ("final_mean_return", "final_std_return")):
                return DIVERGED
            if (total_timesteps is None or self.summary["env_steps"] >= total_timesteps
                    or self.summary.get("stopped_solved")):
                return FINISHED
        elif self.status is not None and self.status["state"] in UNSUCCESSFUL:
            return self.status["state"]
        return INTERRUPTED if self.checkpoint() is not None else NEW

    def checkpoint(self) -> tuple[Path, int] | None:
        return latest_checkpoint(self.directory / "checkpoints")

    def timesteps(self) -> int:
        """Environment steps done so far (from the summary, else the last checkpoint's progress)."""
        if self.summary is not None:
            return int(self.summary["env_steps"])
        progress = read_json(self.directory / PROGRESS_FILE)
        return 0 if progress is None else int(progress["timesteps"])

    @cached_property
    def evaluations(self) -> list[dict[str, str]]:
        path = self.directory / "evaluations.csv"
        if not path.exists():
            return []
        with path.open(newline="") as f:
            return list(csv.DictReader(f))

    def has_success(self) -> bool:
        """Whether the task reports success (the final evaluation, else the logged ones, have a rate)."""
        if self.summary is not None:
            return self.summary["final_success_rate"] is not None
        return bool(self.evaluations) and all(row["success_rate"] != "" for row in self.evaluations)

    def curve(self, success: bool, stochastic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Evaluation timesteps and scores (success rate or mean return) from ``evaluations.csv``, of
        the deterministic policy or, with ``stochastic``, the sampling one (empty for a run that
        predates those columns)."""
        column = _score_column(success, stochastic)
        rows = [r for r in self.evaluations if r.get(column)]
        steps = np.array([int(float(r["timesteps"])) for r in rows], dtype=np.int64)
        return steps, np.array([float(r[column]) for r in rows], dtype=np.float64)

    def lowest_after_solving(self, success: bool, threshold: float, stochastic: bool = False) -> float | None:
        """The lowest evaluation from the first one scoring ≥ ``threshold`` on, the final one
        included (how far a run that solved its task fell back afterwards); ``None`` for a run
        that never reached it. ``stochastic``: the same for the sampling policy's evaluations."""
        _, values = self.curve(success, stochastic)
        final = None
        if self.state() == FINISHED:
            assert self.summary is not None
            final = self.summary.get(f"final_{_score_column(success, stochastic)}")
        if final is not None:
            values = np.append(values, final)
        return lowest_after_reaching(values, threshold)

    def score(self, success: bool) -> float | None:
        """The final score: the summary's final evaluation; for a run that diverged or failed, its
        last evaluation before it stopped (the policy it leaves); ``None`` when there is none."""
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
        """Why a report cannot read this run (files it does not expect: a configuration that is not a
        mapping, evaluation steps that repeat or go back, a summary without its scores), else ``None``."""
        try:
            if not isinstance(self.config, dict):
                return "config.yaml is not a mapping"
            success = self.has_success()
            for stochastic in (False, True):
                steps, _ = self.curve(success, stochastic)
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


def lowest_after_reaching(values: Sequence[float] | np.ndarray, threshold: float) -> float | None:
    """The lowest of ``values`` from the first one ≥ ``threshold`` on; ``None`` if none reaches it."""
    values = np.asarray(values, dtype=np.float64)
    reached = np.flatnonzero(values >= threshold)
    return float(values[reached[0]:].min()) if reached.size else None


def _score_column(success: bool, stochastic: bool) -> str:
    return ("stochastic_" if stochastic else "") + ("success_rate" if success else "mean_return")


def find_runs(directory: Path) -> list[Run]:
    """Every run directory (one holding ``config.yaml``) at or below ``directory``, sorted."""
    return [Run(path.parent) for path in sorted(Path(directory).rglob("config.yaml"))]
