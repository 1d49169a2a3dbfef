"""Evaluation during a run, and the callback that evaluates and checkpoints it.

Every evaluation scores two policies: the *deterministic* one takes the most probable action (SB3's
`EvalCallback` default; the run's score), the *stochastic* one samples, as the policy that collects rollouts does.
Where the memory leaves a state ambiguous the most probable action can repeat for ever while sampling walks out, so
the two can differ a lot (docs/concepts.md, "Evaluation: two policies"). The stochastic evaluation draws from a
forked random state, so it does not change the training that follows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.utils import check_for_correct_spaces
from stable_baselines3.common.vec_env import VecEnv

from envs.rules import ConfigError, Flag, Range, one_line, short
from experiments.run_dir import RunDirectory
from experiments.solved_lr import solved_schedule
from policies.spaces import ObservationError


@dataclass
class EvalResult:
    """Per-episode returns, lengths and successes (`None` where the task reports none)."""

    returns: np.ndarray
    lengths: np.ndarray
    successes: np.ndarray | None

    @property
    def success_rate(self) -> float | None:
        return None if self.successes is None else float(self.successes.mean())

    def row(self, timesteps: int, wall_seconds: float, stochastic: EvalResult) -> dict[str, Any]:
        """The `evaluations.csv` row of this (deterministic) result and its `stochastic` twin."""
        return {"timesteps": timesteps, "mean_return": float(self.returns.mean()),
                "std_return": float(self.returns.std()), "mean_length": float(self.lengths.mean()),
                "success_rate": _blank_if_none(self.success_rate), "wall_seconds": round(wall_seconds, 2),
                "stochastic_mean_return": float(stochastic.returns.mean()),
                "stochastic_success_rate": _blank_if_none(stochastic.success_rate)}


def _blank_if_none(value: float | None) -> float | str:
    return "" if value is None else value


STALL_STEPS = 100_000
"""steps of every copy without an episode ending after which an evaluation stops (`StalledEvaluationError`)"""


class StalledEvaluationError(ValueError):
    """No episode of the evaluation env ends: an env without a time limit whose episodes never terminate."""


def evaluate(model: BaseAlgorithm, env: VecEnv, n_episodes: int, deterministic: bool = True) -> EvalResult:
    """Run `n_episodes` with SB3's `evaluate_policy` (memory state carried by `predict`); `StalledEvaluationError`
    when no episode ends within `STALL_STEPS` steps of every copy; `ConfigError` naming `model` where it is no SB3
    model, `n_episodes` (at least one) or `deterministic` (true or false) where either is not one, or `env` where it
    is no VecEnv."""
    if not isinstance(model, BaseAlgorithm):
        hint = " (a loaded agent's is .model)" if hasattr(model, "model") else ""
        raise ConfigError(f"model={short(repr(model))}: expected an SB3 model, such as MemoryPPO.load(path){hint}")
    Range(1, integer=True).check("n_episodes", n_episodes)
    Flag().check("deterministic", deterministic)
    if not isinstance(env, VecEnv):
        raise ConfigError(f"env={short(repr(env))}: expected a VecEnv (envs.make_vec_env)")
    try:
        check_for_correct_spaces(model._wrap_env(env, verbose=0, monitor_wrapper=False), model.observation_space,
                                 model.action_space)  # as `set_env` compares them: images may be channel-last
    except ValueError as error:
        raise ConfigError(f"env: {one_line(str(error))}") from None
    successes: list[float] = []
    since_end = [0]

    def record_success(local: dict[str, Any], _: dict[str, Any]) -> None:
        since_end[0] = 0 if local["done"] else since_end[0] + 1
        if since_end[0] > STALL_STEPS * env.num_envs:
            raise StalledEvaluationError(f"evaluation: no episode ended within {STALL_STEPS:,} steps of each of "
                                    f"{env.num_envs} copies; give the env a time limit (env_kwargs "
                                    "max_episode_steps, or a gymnasium.wrappers.TimeLimit env_wrapper)")
        if local["done"] and "is_success" in local["info"]:
            successes.append(float(local["info"]["is_success"]))

    try:
        returns, lengths = evaluate_policy(model, env, n_eval_episodes=n_episodes, deterministic=deterministic,
                                           return_episode_rewards=True, callback=record_success, warn=False)
    except ObservationError as error:  # the env's, as `env` fits the model's spaces
        raise ObservationError(f"evaluation: the env's {error}") from None
    return EvalResult(np.asarray(returns, dtype=np.float64), np.asarray(lengths, dtype=np.float64),
                      np.asarray(successes) if successes else None)


def evaluate_both(model: BaseAlgorithm, env: VecEnv, n_episodes: int) -> tuple[EvalResult, EvalResult]:
    """The deterministic and the stochastic policy, `n_episodes` each. The stochastic one samples
    from a forked torch random state: the global one, which training draws from, is left as it was."""
    deterministic = evaluate(model, env, n_episodes)
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        stochastic = evaluate(model, env, n_episodes, deterministic=False)
    return deterministic, stochastic


class RunCallback(BaseCallback):
    """Evaluate every `eval_freq` environment steps (`evaluations.csv`, `eval/*` in tensorboard,
    `best_model.zip`) and checkpoint every `checkpoint_freq` (the newest `keep_checkpoints` and the best
    kept), into `run`; every model saved holds `record`, the run's settings.

    A step's evaluation row is written before its checkpoint. `stop_when_solved` = n > 0 stops training after n
    evaluations in a row with a success rate of at least `success_threshold`; `solved_lr_factor` f < 1 scales
    the learning rate by f once `solved_lr_streak` evaluations in a row reach it. Both streaks count the
    evaluations logged before a resume too.
    """

    def __init__(self, run: RunDirectory, eval_env: VecEnv | None, eval_freq: int, n_eval_episodes: int,
                 checkpoint_freq: int, wall_offset: float = 0.0, stop_when_solved: int = 0,
                 success_threshold: float = 0.9, solved_lr_factor: float = 1.0, solved_lr_streak: int = 1,
                 keep_checkpoints: int = 0, record: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.run = run
        self.eval_env = eval_env
        self.eval_freq, self.n_eval_episodes, self.checkpoint_freq = eval_freq, n_eval_episodes, checkpoint_freq
        self.stop_when_solved, self.success_threshold = stop_when_solved, success_threshold
        self.solved_lr_factor, self.solved_lr_streak = solved_lr_factor, solved_lr_streak
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
        self.best_return = self.run.best_return()
        self.solved_streak = 0
        for row in self.run.evaluations.rows():
            self._count(float(row["success_rate"]) if row.get("success_rate") not in (None, "") else None)

    def _count(self, success_rate: float | None) -> None:
        """Extend or break the streak of solved evaluations; at `solved_lr_streak`, scale the learning rate
        (once: the schedule is wrapped a single time)."""
        solved = success_rate is not None and success_rate >= self.success_threshold
        self.solved_streak = self.solved_streak + 1 if solved else 0
        if self.solved_streak >= self.solved_lr_streak:
            self.model.lr_schedule = solved_schedule(self.model.lr_schedule, self.solved_lr_factor)

    @property
    def stopped_solved(self) -> bool:
        """Whether the streak of solved evaluations has reached `stop_when_solved`."""
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
        self.run.save_checkpoint(self.model, self.num_timesteps, self.wall_seconds(), self.keep_checkpoints,
                                 self.record)

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
            self.run.save_best(self.model, self.num_timesteps, row["mean_return"], self.record)
        self.run.evaluations.append(row)
        return result


def _next_multiple(now: int, every: int) -> int:
    return (now // every + 1) * every if every else 0
