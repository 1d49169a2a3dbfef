"""One training run from a `RunConfig`: build the environments and the model, learn, evaluate, and write
everything into the run's directory through `experiments.run_dir.RunDirectory` (its layout is described
there)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.utils import get_device

from agents import ALGOS, NonFiniteError
from envs import make_vec_env
from envs.atomic import write_error
from envs.conformance import EnvBreakError
from envs.imports import ImportPathError, load_object
from envs.rules import VERBOSITY, Flag, one_line, short, shown
from experiments.config import ConfigError, RunConfig, reread
from experiments.evaluation import RunCallback, evaluate_both
from experiments.model_files import damage
from experiments.run_dir import RunBusyError, RunDirectory, notify
from experiments.run_identity import config_record
from policies.policy_options import ACTIVATIONS

EVAL_SEED_OFFSET = 10_000


def make_run_env(config: RunConfig, n_envs: int, seed: int, vec_env: str | None = None, **extra_kwargs: Any) -> Any:
    """A VecEnv of `n_envs` copies of the run's environment, wrapped and vectorised as the run says (`vec_env`
    replaces its `vec_env`; torch tasks on the run's device); bad specs or kwargs become `ConfigError`."""
    try:
        return make_vec_env(config.env, n_envs, seed, env_wrapper=config.env_wrapper,
                            vec_env=vec_env or config.vec_env, device=get_device(config.device),
                            gym_packages=config.gym_packages, **config.env_kwargs, **extra_kwargs)
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(one_line(error)) from error


def scoring_vec_env(config: RunConfig) -> str | None:
    """The vec env that scores a policy: as in training, but torch tasks are scored on their numpy twins."""
    return "dummy" if config.vec_env == "torch" else None


def make_envs(config: RunConfig) -> tuple[Any, Any]:
    """Training and evaluation VecEnvs (the evaluation copies seeded `seed + EVAL_SEED_OFFSET`)."""
    return (make_run_env(config, config.n_envs, config.seed),
            make_run_env(config, config.n_eval_envs, config.seed + EVAL_SEED_OFFSET, scoring_vec_env(config)))


def policy_kwargs(config: RunConfig) -> dict[str, Any]:
    """The policy's keyword arguments: `backbone` and its options, and the `policy` section with names turned
    into what they name (`activation_fn`, the class at `features_extractor_class`'s import path)."""
    options = dict(config.policy)
    if "activation_fn" in options:
        options["activation_fn"] = ACTIVATIONS[options["activation_fn"]]
    if options.get("features_extractor_class") is not None:
        options["features_extractor_class"] = _features_extractor(options["features_extractor_class"])
    return {"backbone": config.backbone, "backbone_kwargs": config.backbone_options(), **options}


def _features_extractor(path: str) -> type[BaseFeaturesExtractor]:
    """The features extractor class at import `path`; a ConfigError naming the key and the import's failure."""
    key = f"policy.features_extractor_class={shown(path)}"
    try:
        cls = load_object(path)
    except ImportPathError as error:
        raise ConfigError(f"{key}: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseFeaturesExtractor)):
        raise ConfigError(f"{key}: {shown(cls)} is not a features extractor (a subclass of SB3's "
                          "BaseFeaturesExtractor)")
    return cls


def build_model(config: RunConfig, env: Any, tensorboard_log: str) -> Any:
    try:
        return ALGOS[config.algo]("MemoryPolicy", env, policy_kwargs=policy_kwargs(config), seed=config.seed,
                                  device=config.device, precision=config.precision, tensorboard_log=tensorboard_log,
                                  **config.algo_options())
    except (ValueError, TypeError) as error:
        raise ConfigError(f"cannot build {config.algo} with backbone {config.backbone}: {error}") from error


def saved_policy_weights(source: str) -> dict[str, torch.Tensor]:
    """The policy weights of the model saved at `source` (a run directory or a `.zip`), on the CPU; `ConfigError`
    naming `init_from` when there is none or it does not load."""
    path = Path(source)
    if path.is_dir():
        path = path / "model.zip"
    if not path.is_file():
        raise ConfigError(f"init_from={source!r}: no saved model there (a run directory with model.zip, or a .zip)")
    if (why := damage(path)) is not None:
        raise ConfigError(f"init_from={source!r}: {str(path)!r} does not load: {why}")
    try:
        _, params, _ = load_from_zip_file(path, device="cpu")
        weights = params["policy"]
        if not isinstance(weights, dict):
            raise TypeError(f"its policy is a {type(weights).__name__}, not a state dict")
    except Exception as error:  # pickle, torch and key errors alike: the file is no model of this kind
        raise ConfigError(f"init_from={source!r}: {str(path)!r} does not load ({type(error).__name__}: "
                          f"{short(one_line(error), 200)})") from None
    return weights


def check_policy_fits(policy: torch.nn.Module, weights: dict[str, torch.Tensor], source: str) -> None:
    """`ConfigError` naming `init_from` unless `weights` has exactly `policy`'s entries, each of its shape (`policy`
    may live on the meta device: only shapes are compared)."""
    own = policy.state_dict()
    reshaped = sorted(f"{key} {list(weights[key].shape)} where the policy has {list(own[key].shape)}"
                      for key in own.keys() & weights.keys() if weights[key].shape != own[key].shape)
    problems = [f"{what} {entries[0]}" + (f" and {len(entries) - 1} more" if len(entries) > 1 else "")
                for what, entries in (("missing", sorted(own.keys() - weights.keys())),
                                      ("unexpected", sorted(weights.keys() - own.keys())), ("shape of", reshaped))
                if entries]
    if problems:
        raise ConfigError(f"init_from={source!r} holds a policy of another architecture: {'; '.join(problems)}")


def load_policy_weights(model: Any, source: str) -> None:
    """Copy the policy weights of the model saved at `source` (a run directory or a `.zip`) into
    `model`; the optimizer, schedules and step count start afresh."""
    weights = saved_policy_weights(source)
    check_policy_fits(model.policy, weights, source)
    model.policy.load_state_dict(weights)


@contextmanager
def using_threads(threads: int) -> Iterator[None]:
    """torch's CPU threads set to `torch_threads(threads)` while the block runs, and back to the caller's after."""
    before = torch.get_num_threads()
    torch.set_num_threads(torch_threads(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def torch_threads(threads: int) -> int:
    """The thread count a run uses: `threads`, or with 0 every core this process may run on."""
    if threads < 0:
        raise ConfigError(f"threads={threads}: expected a positive number of threads, or 0 for every core")
    if threads:
        return threads
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def checked_run(config: RunConfig, resume: bool, progress_bar: bool, verbose: int,
                extra_callback: BaseCallback | None) -> RunConfig:
    """`config` as `train` runs it (`reread`), validated as the command line validates a run, with `train`'s
    other arguments checked against their rules; `ConfigError` naming the first that is bad."""
    from experiments.validation import validate  # it builds a policy with `policy_kwargs`: imported when used

    for name, value in (("resume", resume), ("progress_bar", progress_bar)):
        Flag().check(name, value)
    VERBOSITY.check("verbose", verbose)
    if extra_callback is not None and not isinstance(extra_callback, BaseCallback):
        raise ConfigError(f"extra_callback={shown(extra_callback)}: expected an SB3 callback (a BaseCallback), "
                          "or None")
    config = reread(config)
    validate(config)
    return config


def train(config: RunConfig, resume: bool = False, progress_bar: bool = False, verbose: int = 0,
          extra_callback: BaseCallback | None = None) -> dict[str, Any]:
    """Train (or resume) the run of `config` in its directory and return its summary.

    A new run refuses a directory that already holds one. `resume` refuses another configuration than the run's,
    returns the summary of a finished run and touches nothing, and otherwise continues from the newest checkpoint
    that loads (step 0 when none does), every record after it dropped first. The directory's lock is held
    throughout. `extra_callback` runs after the run's own at every step, and may stop it by returning False.
    A write that fails raises `envs.atomic.WriteError` naming the file (or the run directory).

    `config` is checked first as the command line checks it (`experiments.validation.validate`, after reading it
    back as a configuration file of its settings: `experiments.config.reread`), so a bad setting, made by hand in
    Python too, raises `ConfigError` (one line naming the key, the value and what is valid) before anything is
    created; so do arguments of another type than these.
    """
    config = checked_run(config, resume=resume, progress_bar=progress_bar, verbose=verbose,
                         extra_callback=extra_callback)
    with using_threads(config.threads):
        run = RunDirectory.of(config)
        try:
            run.check_not_busy()  # first: a run being written is refused as such, whatever else holds
            if not resume:
                run.refuse_existing(config.env)
            else:
                run.check_same_run(config)
                finished = run.finished(config.total_timesteps)
                if finished is not None:
                    notify(f"{str(run.path)!r} already finished ({finished['env_steps']} steps of "
                           f"{config.total_timesteps}): nothing to resume, nothing changed")
                    return finished
            with run.claimed(resume, lambda: run.refuse_existing(config.env)):
                return _train_locked(config, run, resume, progress_bar, verbose, extra_callback)
        except RunBusyError as error:
            raise ConfigError(str(error)) from error
        except OSError as error:
            raise (write_error(error, run.path) if error.filename is None else error) from error


def _train_locked(config: RunConfig, run: RunDirectory, resume: bool, progress_bar: bool, verbose: int,
                  extra_callback: BaseCallback | None) -> dict[str, Any]:
    record = config_record(config)
    if not resume:
        run.write_config(record)  # first, so that a run failing from here on is listed
    env, eval_env = make_envs(config)
    loaded, wall_offset = None, 0.0
    if resume:
        loaded = run.load_newest_checkpoint(lambda path: ALGOS[config.algo].load(path, env=env, device=config.device))
        if loaded is None:
            notify(f"--resume: nothing to resume in {str(run.path)!r} (no checkpoint); starting from step 0"
                   + (", its logs cleared" if run.holds_run() else ""))
        wall_offset = run.rewind(0 if loaded is None else loaded[1])
        run.write_config(record)  # once the checkpoints are known to load
    if loaded is not None:
        model = loaded[0]
        model.tensorboard_log = str(run.path)
    else:
        model = build_model(config, env, str(run.path))
        if config.init_from:
            load_policy_weights(model, config.init_from)
    callback = RunCallback(run, eval_env, config.eval_freq, config.n_eval_episodes, config.checkpoint_freq,
                           wall_offset, config.stop_when_solved, config.success_threshold, config.solved_lr_factor,
                           config.solved_lr_streak, config.keep_checkpoints, record)
    model.verbose = verbose
    started, steps_before = time.time(), model.num_timesteps
    remaining = config.total_timesteps - model.num_timesteps
    if remaining > 0:
        try:
            model.learn(remaining, callback=[callback, extra_callback] if extra_callback else callback,
                        progress_bar=progress_bar, tb_log_name=type(model).__name__,
                        reset_num_timesteps=loaded is None)
        except NonFiniteError as error:
            raise NonFiniteError(f"{error}; {run.checkpoint_note()}") from error
        except EnvBreakError as error:
            raise EnvBreakError(f"{error}; {run.checkpoint_note()}", error.problem) from error
        model.logger.close()  # tensorboard's events on disk now: a write that fails fails here, not unseen at exit
    else:  # the checkpoint resumed from reaches the budget: the run ends there, and it holds that checkpoint
        notify(f"{str(run.path)!r}: its newest checkpoint ({model.num_timesteps} steps) reaches "
               f"total_timesteps={config.total_timesteps}: nothing to train; the run ends there (final model, "
               "evaluation and summary)")
        callback.init_callback(model)
    elapsed = time.time() - started
    run.save_model(model, record=record)
    if remaining > 0:
        callback.save_checkpoint()
    eval_env.seed(config.seed + EVAL_SEED_OFFSET)  # the episodes of a fresh evaluation env: train_rl.py evaluate's
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
        "resumed_from": None if loaded is None else loaded[1],
        "stopped_solved": callback.stopped_solved,
        "parameters": int(sum(p.numel() for p in model.policy.parameters())),
        "buffer_bytes_per_step": model.rollout_buffer.bytes_per_step() if remaining > 0 else None,
        "torch_threads": torch.get_num_threads(), "device": str(model.device),
    }
    run.write_summary(summary)
    env.close()
    eval_env.close()
    return summary
