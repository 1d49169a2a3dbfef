"""A trained agent with its run's settings: where its model is, loading it with the learner that saved it,
scoring it over episodes as the run's own evaluations do, and playing episodes to render or record them.

Scores use the run's evaluation set-up by default (``n_eval_envs`` copies seeded ``seed + 10000``,
``n_eval_episodes`` episodes, the most probable action), which is what the run's final evaluation
(``summary.json``) ran, so the same model scores the same numbers.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents import ALGOS, saved_learner
from experiments.config import ConfigError, RunConfig, build_config
from experiments.evaluation import EvalResult, evaluate
from experiments.rules import short
from experiments.training import EVAL_SEED_OFFSET, make_run_env

MODEL_FILE = "model.zip"
POLICIES = {"deterministic": ("deterministic",), "stochastic": ("stochastic",),
            "both": ("deterministic", "stochastic")}
"""``--deterministic``, ``--stochastic``, ``--both``: the policies scored, in order"""


@dataclass
class SavedAgent:
    """A loaded model, the run configuration it was trained with, and where it came from."""

    model: Any
    config: RunConfig
    model_path: Path
    directory: Path
    """where results are written: the run directory, else the folder of the ``.zip``"""

    @property
    def eval_seed(self) -> int:
        """The seed of the run's evaluation environment."""
        return self.config.seed + EVAL_SEED_OFFSET


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """The model file and run directory (holding ``config.yaml``) of a run directory (its final
    ``model.zip``) or of a ``.zip`` (a run's ``best_model.zip``, a checkpoint, or a model anywhere)."""
    path = Path(path)
    if path.is_dir():
        if not (path / MODEL_FILE).is_file():
            raise ConfigError(f"{str(path)!r} holds no {MODEL_FILE}: give a finished run directory or a saved .zip")
        return path / MODEL_FILE, path
    if path.suffix != ".zip" or not path.is_file():
        raise ConfigError(f"{str(path)!r} is neither a run directory nor a saved model (.zip)")
    run = next((p for p in (path.parent, path.parent.parent) if (p / "config.yaml").is_file()), None)
    return path, run


def load_agent(path: str | Path, device: str = "auto", env: str | None = None,
               env_kwargs: dict[str, Any] | None = None, env_wrapper: Any = None,
               gym_packages: list[str] | None = None) -> SavedAgent:
    """Load the model at ``path`` with the learner class that saved it (recorded in the zip, else the run's
    ``algo``), and its run's configuration; ``env`` replaces the environment (and its keyword arguments),
    ``env_kwargs`` are set over them, ``env_wrapper`` (``[]``: none) replaces the run's wrappers and
    ``gym_packages`` are imported after the run's."""
    model_path, run = locate(path)
    if run is None and env is None:
        raise ConfigError(f"no config.yaml beside {str(model_path)!r}: give the environment with --env")
    config = build_config(run / "config.yaml") if run is not None else RunConfig()
    if env is not None:
        config.env, config.env_kwargs = env, {}
    config.env_kwargs.update(env_kwargs or {})
    if env_wrapper is not None:
        config.env_wrapper = env_wrapper or None
    config.gym_packages = [*config.gym_packages, *(gym_packages or [])]
    learners = {cls.__name__: cls for cls in ALGOS.values()}
    learner = saved_learner(model_path) or ALGOS[config.algo].__name__
    model = learners[learner].load(model_path, device=device)
    return SavedAgent(model, config, model_path, run if run is not None else model_path.parent)


def check_agent_env(agent: SavedAgent) -> None:
    """The agent's environment passes the run settings' rules (:func:`experiments.validation.check_env`) and has
    the observation and action spaces the model was trained on; else :class:`ConfigError` naming the env."""
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.utils import check_for_correct_spaces

    from experiments.validation import check_env

    env = check_env(agent.config)
    try:
        wrapped = BaseAlgorithm._wrap_env(env, verbose=0, monitor_wrapper=False)  # as the learner saw its env
        check_for_correct_spaces(wrapped, agent.model.observation_space, agent.model.action_space)
    except ValueError as error:
        raise ConfigError(f"env={agent.config.env!r} does not fit the model {str(agent.model_path)!r}: "
                          f"{short(str(error), 300)}") from None
    finally:
        env.close()


def score(agent: SavedAgent, episodes: int, seed: int, n_envs: int, policies: tuple[str, ...]) -> dict[str, EvalResult]:
    """``episodes`` episodes per policy (``deterministic``, ``stochastic``), one after the other on one
    VecEnv of ``n_envs`` copies seeded ``seed``, as the run's evaluations do; sampling is seeded too."""
    torch.manual_seed(seed)
    env = make_run_env(agent.config, n_envs, seed)
    try:
        return {policy: evaluate(agent.model, env, episodes, deterministic=policy == "deterministic")
                for policy in policies}
    finally:
        env.close()


def play(agent: SavedAgent, episodes: int, seed: int, deterministic: bool, render_mode: str) -> Iterator[Any]:
    """Play ``episodes`` episodes (the i-th seeded ``seed + i``) on one gymnasium copy of the environment,
    which does not reset itself, and yield ``render()`` at each episode's start and after every step, its
    last one included."""
    from envs import make_env

    config = agent.config
    try:
        env = make_env(config.env, env_wrapper=config.env_wrapper, gym_packages=config.gym_packages,
                       render_mode=render_mode, **config.env_kwargs)
    except (ValueError, TypeError) as error:
        raise ConfigError(str(error)) from error
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            state, start, over = None, np.ones(1, dtype=bool), False
            yield env.render()
            while not over:
                action, state = agent.model.predict(observation, state=state, episode_start=start,
                                                    deterministic=deterministic)
                observation, _, terminated, truncated, _ = env.step(action)
                start, over = np.zeros(1, dtype=bool), terminated or truncated
                yield env.render()
    finally:
        env.close()


def result_record(agent: SavedAgent, results: dict[str, EvalResult], episodes: int, seed: int,
                  n_envs: int) -> dict[str, Any]:
    """The JSON record of an evaluation: what was scored, on what, and every episode."""
    record: dict[str, Any] = {
        "model": str(agent.model_path), "learner": type(agent.model).__name__, "algo": agent.config.algo,
        "backbone": agent.config.backbone, "env": agent.config.env, "env_kwargs": agent.config.env_kwargs,
        "episodes": episodes, "seed": seed, "n_envs": n_envs, "model_timesteps": int(agent.model.num_timesteps),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    for policy, result in results.items():
        record[policy] = {
            "mean_return": float(result.returns.mean()), "std_return": float(result.returns.std()),
            "success_rate": result.success_rate, "mean_length": float(result.lengths.mean()),
            "std_length": float(result.lengths.std()), "returns": result.returns.tolist(),
            "lengths": result.lengths.tolist(),
            "successes": None if result.successes is None else result.successes.tolist(),
        }
    return record


def write_result(directory: Path, record: dict[str, Any], prefix: str = "evaluate") -> Path:
    """Write ``record`` to a new ``{prefix}_<date>-<time>.json`` in ``directory`` (``-2``, ``-3``, ... where
    that name is taken: an earlier result is never overwritten, even by a process writing at the same time)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in itertools.count(1):
        path = directory / (f"{prefix}_{stamp}.json" if n == 1 else f"{prefix}_{stamp}-{n}.json")
        try:
            with path.open("x") as f:
                json.dump(record, f, indent=2)
            return path
        except FileExistsError:
            continue
    raise AssertionError("unreachable")
