"""Evaluation during training runs, and the callback that evaluates and checkpoints: nothing written is ever
half-written.

Every evaluation scores two policies. The *deterministic* one takes the most probable action
(SB3's ``EvalCallback`` default; the run's score). The *stochastic* one samples, like the
policy PPO and V-MPO train and collect rollouts with. In a partially observable task the two
can differ a lot: where the memory leaves a state ambiguous, the most probable action can
repeat for ever (turning on the spot, walking into a wall) while sampling walks out. A
collapse in the deterministic score alone is then not a collapse of what was learned (docs/concepts.md,
"Evaluation: two policies", and docs/notes/evaluation-modes.md). The stochastic evaluation draws from
a forked random state, so adding it does not change the training that follows.

Files are written to a temporary name, flushed to disk and renamed into place (``os.replace`` is
atomic on POSIX; :mod:`experiments.atomic`), so a run killed at any moment, or a
machine that loses power, leaves the previous checkpoint, CSV or summary intact. ``evaluations.csv``
is rewritten whole at each evaluation rather than appended to: it holds a few hundred rows at most,
so the rewrite costs far less than the evaluation, and no reader ever sees half a row.
"""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecEnv

from experiments.atomic import write_atomic
from experiments.checkpointing import prune_checkpoints, save_model_atomic
from experiments.run_dir import CHECKPOINT_PREFIX, checkpoint_walls, read_json, record_progress
from experiments.solved_lr import solved_schedule

BEST_MODEL, BEST_RECORD = "best_model.zip", "best_model.json"
"""the model of the best evaluation, and that evaluation's step and mean return"""
EVAL_COLUMNS = ["timesteps", "mean_return", "std_return", "mean_length", "success_rate", "wall_seconds",
                "stochastic_mean_return", "stochastic_success_rate"]


@dataclass
class EvalResult:
    """Per-episode returns, lengths and successes (``None`` where the task reports none)."""

    returns: np.ndarray
    lengths: np.ndarray
    successes: np.ndarray | None

    @property
    def success_rate(self) -> float | None:
        return None if self.successes is None else float(self.successes.mean())

    def row(self, timesteps: int, wall_seconds: float, stochastic: EvalResult) -> dict[str, Any]:
        """The ``evaluations.csv`` row of this (deterministic) result and its ``stochastic`` twin."""
        return {"timesteps": timesteps, "mean_return": float(self.returns.mean()),
                "std_return": float(self.returns.std()), "mean_length": float(self.lengths.mean()),
                "success_rate": _blank_if_none(self.success_rate), "wall_seconds": round(wall_seconds, 2),
                "stochastic_mean_return": float(stochastic.returns.mean()),
                "stochastic_success_rate": _blank_if_none(stochastic.success_rate)}


def _blank_if_none(value: float | None) -> float | str:
    return "" if value is None else value


def evaluate(model: BaseAlgorithm, env: VecEnv, n_episodes: int, deterministic: bool = True) -> EvalResult:
    """Run ``n_episodes`` with SB3's ``evaluate_policy`` (memory state carried by ``predict``)."""
    successes: list[float] = []

    def record_success(local: dict[str, Any], _: dict[str, Any]) -> None:
        if local["done"] and "is_success" in local["info"]:
            successes.append(float(local["info"]["is_success"]))

    returns, lengths = evaluate_policy(model, env, n_eval_episodes=n_episodes, deterministic=deterministic,
                                       return_episode_rewards=True, callback=record_success, warn=False)
    return EvalResult(np.asarray(returns, dtype=np.float64), np.asarray(lengths, dtype=np.float64),
                      np.asarray(successes) if successes else None)


def evaluate_both(model: BaseAlgorithm, env: VecEnv, n_episodes: int) -> tuple[EvalResult, EvalResult]:
    """The deterministic and the stochastic policy, ``n_episodes`` each. The stochastic one samples
    from a forked torch random state: the global one, which training draws from, is left as it was."""
    deterministic = evaluate(model, env, n_episodes)
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        stochastic = evaluate(model, env, n_episodes, deterministic=False)
    return deterministic, stochastic


class EvalLog:
    """``evaluations.csv``: one row per evaluation, flushed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def columns(self) -> list[str]:
        """The file's own header (a run started before a column was added keeps its layout), else ``EVAL_COLUMNS``."""
        if not self.path.exists():
            return EVAL_COLUMNS
        with self.path.open(newline="") as f:
            return next(csv.reader(f), EVAL_COLUMNS)

    def truncate_after(self, timesteps: int) -> None:
        """Drop rows newer than a checkpoint being resumed from (that training is redone)."""
        if self.path.exists():
            self._write([r for r in self.rows() if int(float(r["timesteps"])) <= timesteps])

    def append(self, row: dict[str, Any]) -> None:
        """Add a row: the file is rewritten atomically with it (see the module doc)."""
        self._write([*self.rows(), row])

    def _write(self, rows: list[dict[str, Any]]) -> None:
        text = io.StringIO()
        writer = csv.DictWriter(text, self.columns(), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        write_atomic(self.path, text.getvalue())

    def rows(self) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        with self.path.open(newline="") as f:
            return list(csv.DictReader(f))


class RunCallback(BaseCallback):
    """Periodic evaluation (``evaluations.csv``, ``eval/*`` in tensorboard, ``best_model.zip``),
    periodic checkpoints (``checkpoints/model_<steps>_steps.zip``, the newest ``keep_checkpoints`` and the
    best kept) and ``progress.json``. Every model it saves holds ``record``, the settings of its run
    (:mod:`experiments.run_identity`).

    Frequencies count environment steps (not calls per env, unlike SB3's callbacks). The
    evaluation row of a step is written before its checkpoint; resuming from a checkpoint drops
    rows newer than it, which the resumed training evaluates again. With ``stop_when_solved`` = n > 0,
    training stops after n evaluations in a row with a success rate of at least ``success_threshold``
    (the streak carries over a resume), and the run ends as at the end of its budget (final model,
    checkpoint, final evaluation and summary, whose ``stopped_solved`` says so). With ``solved_lr_factor``
    f < 1, the learning rate is ``f`` times its schedule once ``solved_lr_streak`` evaluations in a row have
    reached ``success_threshold`` (:mod:`experiments.solved_lr`; also after a resume, from the evaluations logged
    before it).
    """

    def __init__(self, run_dir: Path, eval_env: VecEnv | None, eval_freq: int, n_eval_episodes: int,
                 checkpoint_freq: int, wall_offset: float = 0.0, stop_when_solved: int = 0,
                 success_threshold: float = 0.9, solved_lr_factor: float = 1.0, solved_lr_streak: int = 1,
                 keep_checkpoints: int = 0, record: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.eval_env = eval_env
        self.eval_freq, self.n_eval_episodes, self.checkpoint_freq = eval_freq, n_eval_episodes, checkpoint_freq
        self.stop_when_solved, self.success_threshold = stop_when_solved, success_threshold
        self.solved_lr_factor, self.solved_lr_streak = solved_lr_factor, solved_lr_streak
        self.eval_log = EvalLog(run_dir / "evaluations.csv")
        self.checkpoints = run_dir / "checkpoints"
        self.keep_checkpoints = keep_checkpoints
        self.record = record
        self.wall_offset = wall_offset
        self.started = time.time()
        self.best_return = -np.inf
        self.solved_streak = 0
        self._next_eval = self._next_checkpoint = 0

    def _on_training_start(self) -> None:
        now = self.num_timesteps
        self._next_eval = _next_multiple(now, self.eval_freq)
        self._next_checkpoint = _next_multiple(now, self.checkpoint_freq)
        rows = self.eval_log.rows()
        self.best_return = self._best_saved_return(rows)
        self.solved_streak = 0
        for row in rows:
            self._count(float(row["success_rate"]) if row.get("success_rate") not in (None, "") else None)

    def _best_saved_return(self, rows: list[dict[str, str]]) -> float:
        """The mean return of the evaluation ``best_model.zip`` holds (-inf when there is none: a resume
        dropped it with the evaluations after its checkpoint, and the next evaluation saves a new one)."""
        best = read_json(self.run_dir / BEST_RECORD)
        if best is not None:
            return float(best["mean_return"])
        if (self.run_dir / BEST_MODEL).exists():  # a run from before best_model.json
            return max((float(r["mean_return"]) for r in rows), default=-np.inf)
        return -np.inf

    def _count(self, success_rate: float | None) -> None:
        """Extend or break the streak of evaluations at the success threshold; a streak of ``solved_lr_streak``
        also scales the learning rate by ``solved_lr_factor`` (once: the schedule is wrapped a single time)."""
        solved = success_rate is not None and success_rate >= self.success_threshold
        self.solved_streak = self.solved_streak + 1 if solved else 0
        if self.solved_streak >= self.solved_lr_streak:
            self.model.lr_schedule = solved_schedule(self.model.lr_schedule, self.solved_lr_factor)

    @property
    def stopped_solved(self) -> bool:
        """Whether the streak of solved evaluations has reached ``stop_when_solved``."""
        return 0 < self.stop_when_solved <= self.solved_streak

    def wall_seconds(self) -> float:
        return self.wall_offset + time.time() - self.started

    def _on_step(self) -> bool:
        if self.eval_env is not None and self.eval_freq and self.num_timesteps >= self._next_eval:
            self._count(self.evaluate().success_rate)
            self._next_eval = _next_multiple(self.num_timesteps, self.eval_freq)
        if self.checkpoint_freq and self.num_timesteps >= self._next_checkpoint:
            self.save_checkpoint()
            self._next_checkpoint = _next_multiple(self.num_timesteps, self.checkpoint_freq)
        return not self.stopped_solved

    def save_checkpoint(self) -> None:
        """Save a checkpoint, prune the older ones (``keep_checkpoints``) and record ``progress.json``."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        wall = self.wall_seconds()
        save_model_atomic(self.model, self.checkpoints / f"{CHECKPOINT_PREFIX}{self.num_timesteps}_steps.zip",
                          self.record)
        kept = prune_checkpoints(self.checkpoints, self.keep_checkpoints, self.eval_log.rows())
        walls = {**checkpoint_walls(self.run_dir), self.num_timesteps: wall}
        record_progress(self.run_dir, self.num_timesteps, wall, {k: v for k, v in walls.items() if k in kept})

    def evaluate(self) -> EvalResult:
        assert self.eval_env is not None
        result, stochastic = evaluate_both(self.model, self.eval_env, self.n_eval_episodes)
        row = result.row(self.num_timesteps, self.wall_seconds(), stochastic)
        self.logger.record("eval/mean_reward", row["mean_return"])
        self.logger.record("eval/mean_ep_length", row["mean_length"])
        self.logger.record("eval/stochastic_mean_reward", row["stochastic_mean_return"])
        if result.success_rate is not None:
            self.logger.record("eval/success_rate", result.success_rate)
            self.logger.record("eval/stochastic_success_rate", stochastic.success_rate)
        self.logger.dump(self.num_timesteps)
        if row["mean_return"] > self.best_return:
            self.best_return = row["mean_return"]
            # the record first: a kill between the two leaves it newer than the model, so a resume from an
            # earlier step drops both rather than keep a model from the steps it discards
            write_atomic(self.run_dir / BEST_RECORD, json.dumps({"timesteps": self.num_timesteps,
                                                                 "mean_return": row["mean_return"]}))
            save_model_atomic(self.model, self.run_dir / BEST_MODEL, self.record)
        self.eval_log.append(row)
        return result


def _next_multiple(now: int, every: int) -> int:
    return (now // every + 1) * every if every else 0
