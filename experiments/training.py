"""One training run from a :class:`RunConfig`, in ``{log_dir}/{env}__{algo}-{backbone}__{seed}/``:

- ``config.yaml``: the resolved configuration;
- ``MemoryPPO_1/`` (or the learner's name): tensorboard events;
- ``evaluations.csv``: timesteps, mean/std return, mean length, success rate, wall seconds;
- ``checkpoints/model_<steps>_steps.zip`` and ``progress.json``: for ``--resume``;
- ``best_model.zip`` (best evaluation), ``model.zip`` (final) and ``summary.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.save_util import load_from_zip_file

from agents import ALGOS
from envs import make_vec_env
from experiments.config import ACTIVATIONS, ConfigError, RunConfig, load_yaml, plain, save_config
from experiments.evaluation import RunCallback, evaluate_both, save_model_atomic
from experiments.run_dir import latest_checkpoint, run_dir, write_atomic
from policies import BACKBONES

EVAL_SEED_OFFSET = 10_000


def make_envs(config: RunConfig) -> tuple[Any, Any]:
    """Training and evaluation VecEnvs; bad ids or kwargs become :class:`ConfigError`."""
    try:
        env = make_vec_env(config.env, config.n_envs, config.seed, **config.env_kwargs)
        eval_env = make_vec_env(config.env, config.n_eval_envs, config.seed + EVAL_SEED_OFFSET, **config.env_kwargs)
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(str(error)) from error
    return env, eval_env


def policy_kwargs(config: RunConfig) -> dict[str, Any]:
    options = dict(config.policy)
    if "activation_fn" in options:
        options["activation_fn"] = ACTIVATIONS[options["activation_fn"]]
    return {"backbone": config.backbone, "backbone_kwargs": config.backbone_options(), **options}


def build_model(config: RunConfig, env: Any, tensorboard_log: str) -> Any:
    try:
        return ALGOS[config.algo]("MemoryPolicy", env, policy_kwargs=policy_kwargs(config), seed=config.seed,
                                  device=config.device, precision=config.precision, tensorboard_log=tensorboard_log,
                                  **config.algo_options())
    except (ValueError, TypeError) as error:
        raise ConfigError(f"cannot build {config.algo} with backbone {config.backbone}: {error}") from error


def load_policy_weights(model: Any, source: str) -> None:
    """Copy the policy weights of the model saved at ``source`` (a run directory or a ``.zip``) into
    ``model``; the optimizer, schedules and step count start afresh."""
    path = Path(source)
    if path.is_dir():
        path = path / "model.zip"
    if not path.is_file():
        raise ConfigError(f"init_from={source!r}: no saved model there (a run directory with model.zip, or a .zip)")
    _, params, _ = load_from_zip_file(path, device=model.device)
    try:
        model.policy.load_state_dict(params["policy"])
    except RuntimeError as error:
        raise ConfigError(f"init_from={source!r} holds a policy of another architecture: {error}") from error


def torch_threads(threads: int) -> int:
    """The thread count a run uses: ``threads``, or with 0 every core this process may run on."""
    if threads < 0:
        raise ConfigError(f"threads={threads}: expected a positive number of threads, or 0 for every core")
    if threads:
        return threads
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def train(config: RunConfig, resume: bool = False, progress_bar: bool = False, verbose: int = 0,
          extra_callback: BaseCallback | None = None) -> dict[str, Any]:
    """Train (or resume) the run and return its summary; ``extra_callback`` runs after the run's own (evaluation and
    checkpoints) at every step, and may stop the run early by returning False."""
    torch.set_num_threads(torch_threads(config.threads))
    directory = run_dir(config)
    resumed = latest_checkpoint(directory / "checkpoints") if resume else None
    if resume and (directory / "config.yaml").exists():
        check_same_config(config, directory / "config.yaml")
    if not resume and (directory / "summary.json").exists():
        raise ConfigError(f"run directory {str(directory)!r} already holds a finished run; "
                          "use --resume to extend it, or another --seed / --log-dir")
    directory.mkdir(parents=True, exist_ok=True)
    save_config(config, directory / "config.yaml")
    env, eval_env = make_envs(config)
    wall_offset = 0.0
    if resumed is not None:
        path, steps = resumed
        model = ALGOS[config.algo].load(path, env=env, device=config.device)
        model.tensorboard_log = str(directory)
        progress = directory / "progress.json"
        wall_offset = json.loads(progress.read_text())["wall_seconds"] if progress.exists() else 0.0
    else:
        model = build_model(config, env, str(directory))
        if config.init_from:
            load_policy_weights(model, config.init_from)
    callback = RunCallback(directory, eval_env, config.eval_freq, config.n_eval_episodes, config.checkpoint_freq,
                           wall_offset, config.stop_when_solved, config.success_threshold, config.solved_lr_factor,
                           config.solved_lr_streak)
    if resumed is not None:
        callback.eval_log.truncate_after(steps)
    model.verbose = verbose
    started, steps_before = time.time(), model.num_timesteps
    remaining = config.total_timesteps - model.num_timesteps
    if remaining > 0:
        model.learn(remaining, callback=[callback, extra_callback] if extra_callback else callback,
                    progress_bar=progress_bar, tb_log_name=type(model).__name__,
                    reset_num_timesteps=resumed is None)
    else:
        callback.init_callback(model)
    elapsed = time.time() - started
    save_model_atomic(model, directory / "model.zip")
    callback.save_checkpoint()
    final, final_stochastic = evaluate_both(model, eval_env, config.n_eval_episodes)
    summary = {
        "run": config.run_name(), "env": config.env, "algo": config.algo, "backbone": config.backbone,
        "seed": config.seed, "env_steps": int(model.num_timesteps),
        "final_mean_return": float(final.returns.mean()), "final_std_return": float(final.returns.std()),
        "final_success_rate": final.success_rate,
        "solved": None if final.success_rate is None else final.success_rate >= config.success_threshold,
        "final_stochastic_mean_return": float(final_stochastic.returns.mean()),
        "final_stochastic_success_rate": final_stochastic.success_rate,
        "n_eval_episodes": config.n_eval_episodes,
        "wall_seconds": round(wall_offset + elapsed, 2),
        "steps_per_second": round((model.num_timesteps - steps_before) / max(elapsed, 1e-9), 1),
        "resumed_from": None if resumed is None else resumed[1],
        "stopped_solved": callback.stopped_solved,
        "parameters": int(sum(p.numel() for p in model.policy.parameters())),
        "buffer_bytes_per_step": model.rollout_buffer.bytes_per_step() if remaining > 0 else None,
        "torch_threads": torch.get_num_threads(), "device": str(model.device),
    }
    write_atomic(directory / "summary.json", json.dumps(summary, indent=2))
    env.close()
    eval_env.close()
    return summary


def check_same_config(config: RunConfig, saved: Path) -> None:
    """Refuse to continue a run directory with another configuration (``ConfigError`` naming the keys).

    Compared: every setting that shapes this run. Not compared: the budget (and the early stop), device and threads,
    where the run is written (``log_dir``: a run directory may be moved or copied into a study),
    and the sections of the other learners and backbones (a task config that gains a section for
    a new backbone still resumes the runs it already holds). A run setting that the saved file lacks
    was added after the run was made, which behaved as its default does (``precision``: fp32).
    """
    previous = {**plain(RunConfig().to_dict()), **plain(load_yaml(saved))}
    current = plain(config.to_dict())
    other_sections = (set(ALGOS) | set(BACKBONES)) - {config.algo, config.backbone}
    ignored = {"total_timesteps", "stop_when_solved", "device", "threads", "log_dir"} | other_sections
    changed = sorted(k for k in set(previous) | set(current)
                     if k not in ignored and previous.get(k) != current.get(k))
    if changed:
        raise ConfigError(f"--resume with a configuration that differs from {str(saved)!r} in: {', '.join(changed)}")

