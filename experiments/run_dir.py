"""Run directories on disk: where a run lives, how its files are written, and its state, score and
learning curve as studies and reports read them.

A run lives in ``{log_dir}/{env}__{algo}-{backbone}__{seed}/`` (:func:`run_dir`); a study puts the
runs of each task in a folder named after the task (:func:`task_folder`) when two tasks share an
environment id, and keeps its record in ``study.yaml`` (:data:`STUDY_FILE`). Every file is
written atomically (:func:`write_atomic`).

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

import csv
import json
import math
import os
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

if TYPE_CHECKING:
    from experiments.config import RunConfig


STUDY_FILE = "study.yaml"
CHECKPOINT_PREFIX = "model_"
STATUS_FILE = "status.json"
FINISHED, DIVERGED, FAILED, INTERRUPTED, NEW = "finished", "diverged", "failed", "interrupted", "new"
RUNNING = "running"
"""what a worker writes in ``status.json`` while it trains a run"""
UNSUCCESSFUL = (DIVERGED, FAILED)


def run_dir(config: RunConfig) -> Path:
    """The directory of the run ``config`` describes."""
    return Path(config.log_dir) / config.run_name()


def task_label(config: dict[str, Any]) -> str:
    """The task of a run configuration, as reports name it: ``env (key=value, ...)``."""
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted((config.get("env_kwargs") or {}).items()))
    return f"{config.get('env', '?')} ({kwargs})" if kwargs else str(config.get("env", "?"))


def slug(text: str) -> str:
    """``text`` as a file or folder name (letters, digits, dots and underscores)."""
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def task_folder(config: dict[str, Any]) -> str:
    """The folder of a task's runs inside a study directory."""
    return slug(task_label(config))


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary name, then rename it over ``path`` (atomic on POSIX)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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


def read_study_record(directory: Path) -> dict[str, Any]:
    """A study directory's ``study.yaml`` (name, grid, runs, commands); empty when there is none."""
    path = Path(directory) / STUDY_FILE
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def write_status(directory: Path, state: str, **fields: Any) -> None:
    """Record a run's state (atomically) with the writing process and host."""
    directory.mkdir(parents=True, exist_ok=True)
    record = {"state": state, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), **fields}
    write_atomic(directory / STATUS_FILE, json.dumps(record, indent=2))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


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
        return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}

    @cached_property
    def summary(self) -> dict[str, Any] | None:
        return _read_json(self.directory / "summary.json")

    @cached_property
    def status(self) -> dict[str, Any] | None:
        return _read_json(self.directory / STATUS_FILE)

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
        progress = _read_json(self.directory / "progress.json")
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
