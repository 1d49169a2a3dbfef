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
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from agents import ALGOS, NonFiniteError
from envs import make_vec_env
from envs.imports import ImportPathError, load_object
from experiments.atomic import write_error
from experiments.checkpointing import save_model_atomic
from experiments.config import ConfigError, RunConfig, load_yaml, plain, save_config, with_every_option
from experiments.evaluation import RunCallback, evaluate_both
from experiments.model_files import damage
from experiments.rewind import rewind
from experiments.run_dir import (
    Run,
    RunBusyError,
    check_not_busy,
    checkpoints,
    holds_run,
    latest_checkpoint,
    run_dir,
    run_lock,
    write_atomic,
)
from experiments.run_identity import config_record, read_record
from policies import BACKBONES
from policies.policy_options import ACTIVATIONS
from policies.rules import one_line, short

EVAL_SEED_OFFSET = 10_000


def make_run_env(config: RunConfig, n_envs: int, seed: int, vec_env: str | None = None, **extra_kwargs: Any) -> Any:
    """A VecEnv of ``n_envs`` copies of the run's environment, wrapped and vectorised as the run says (``vec_env``
    replaces its ``vec_env``); bad specs or kwargs become :class:`ConfigError`."""
    try:
        return make_vec_env(config.env, n_envs, seed, env_wrapper=config.env_wrapper,
                            vec_env=vec_env or config.vec_env, gym_packages=config.gym_packages,
                            **config.env_kwargs, **extra_kwargs)
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(one_line(error)) from error


def make_envs(config: RunConfig) -> tuple[Any, Any]:
    """Training and evaluation VecEnvs (the evaluation copies seeded ``seed + EVAL_SEED_OFFSET``)."""
    return (make_run_env(config, config.n_envs, config.seed),
            make_run_env(config, config.n_eval_envs, config.seed + EVAL_SEED_OFFSET))


def policy_kwargs(config: RunConfig) -> dict[str, Any]:
    """The policy's keyword arguments: ``backbone`` and its options, and the ``policy`` section with names turned
    into what they name (``activation_fn``, the class at ``features_extractor_class``'s import path)."""
    options = dict(config.policy)
    if "activation_fn" in options:
        options["activation_fn"] = ACTIVATIONS[options["activation_fn"]]
    if "features_extractor_class" in options:
        options["features_extractor_class"] = _features_extractor(options["features_extractor_class"])
    return {"backbone": config.backbone, "backbone_kwargs": config.backbone_options(), **options}


def _features_extractor(path: str) -> type[BaseFeaturesExtractor]:
    """The features extractor class at import ``path``; a ConfigError naming the key and the import's failure."""
    key = f"policy.features_extractor_class={path!r}"
    try:
        cls = load_object(path)
    except ImportPathError as error:
        raise ConfigError(f"{key}: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseFeaturesExtractor)):
        raise ConfigError(f"{key}: {cls!r} is not a features extractor (a subclass of SB3's BaseFeaturesExtractor)")
    return cls


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
    if (why := damage(path)) is not None:
        raise ConfigError(f"init_from={source!r}: {str(path)!r} does not load: {why}")
    try:
        _, params, _ = load_from_zip_file(path, device=model.device)
        model.policy.load_state_dict(params["policy"])
    except RuntimeError as error:
        raise ConfigError(f"init_from={source!r} holds a policy of another architecture: {one_line(error)}") from error
    except Exception as error:  # pickle, torch and key errors alike: the file is no model of this kind
        raise ConfigError(f"init_from={source!r}: {str(path)!r} does not load ({type(error).__name__}: "
                          f"{short(str(error), 200)})") from error


def torch_threads(threads: int) -> int:
    """The thread count a run uses: ``threads``, or with 0 every core this process may run on."""
    if threads < 0:
        raise ConfigError(f"threads={threads}: expected a positive number of threads, or 0 for every core")
    if threads:
        return threads
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def train(config: RunConfig, resume: bool = False, progress_bar: bool = False, verbose: int = 0,
          extra_callback: BaseCallback | None = None) -> dict[str, Any]:
    """Train (or resume) the run and return its summary, holding the run directory's lock throughout.

    A new run refuses a directory that already holds a run (:func:`refuse_existing_run`). ``resume``
    on a finished run returns its summary and touches nothing; otherwise the run continues from its
    newest checkpoint that loads (step 0 when there is none), its logs rewound to that step first
    (:mod:`experiments.rewind`). Messages about what resuming does go to stderr. ``extra_callback`` runs
    after the run's own (evaluation and checkpoints) at every step, and may stop the run early by returning False.

    A write that fails (a full disk, a read-only file system) raises :class:`experiments.atomic.WriteError` naming
    the file, or the run directory where the library that failed does not say which file; the run resumes from its
    newest checkpoint once the fault is mended.
    """
    torch.set_num_threads(torch_threads(config.threads))
    directory = run_dir(config)
    try:
        return _train_in(directory, config, resume, progress_bar, verbose, extra_callback)
    except RunBusyError as error:
        raise ConfigError(str(error)) from error
    except OSError as error:
        raise (write_error(error, directory) if error.filename is None else error) from error


def _train_in(directory: Path, config: RunConfig, resume: bool, progress_bar: bool, verbose: int,
              extra_callback: BaseCallback | None) -> dict[str, Any]:
    check_not_busy(directory)  # first: a run being written is refused as such, whatever else holds
    if resume:
        check_same_run(config, directory)
    if not resume:
        refuse_existing_run(directory)
    elif (finished := finished_summary(directory, config.total_timesteps)) is not None:
        notify(f"{str(directory)!r} already finished ({finished['env_steps']} steps of {config.total_timesteps}): "
               "nothing to resume, nothing changed")
        return finished
    existed = directory.exists()
    try:
        with run_lock(directory):
            return _train_locked(config, directory, resume, progress_bar, verbose, extra_callback)
    except ConfigError:
        if not existed:  # refused before training: leave no directory behind
            shutil.rmtree(directory, ignore_errors=True)
        raise


def _train_locked(config: RunConfig, directory: Path, resume: bool, progress_bar: bool, verbose: int,
                  extra_callback: BaseCallback | None) -> dict[str, Any]:
    if not resume:
        refuse_existing_run(directory)  # again: another process may have started it meanwhile
        save_config(config, directory / "config.yaml")  # first, so that a run failing from here on is listed
    env, eval_env = make_envs(config)
    loaded = load_newest_checkpoint(config, directory, env) if resume else None
    wall_offset = 0.0
    if resume:
        if loaded is None:
            notify(f"--resume: nothing to resume in {str(directory)!r} (no checkpoint); starting from step 0"
                   + (", its logs cleared" if holds_run(directory) else ""))
        wall_offset = rewind(directory, 0 if loaded is None else loaded[1])
        save_config(config, directory / "config.yaml")  # once the checkpoints are known to load
    if loaded is not None:
        model = loaded[0]
        model.tensorboard_log = str(directory)
    else:
        model = build_model(config, env, str(directory))
        if config.init_from:
            load_policy_weights(model, config.init_from)
    record = config_record(config)
    callback = RunCallback(directory, eval_env, config.eval_freq, config.n_eval_episodes, config.checkpoint_freq,
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
            raise NonFiniteError(f"{error}; {checkpoint_note(directory)}") from error
        model.logger.close()  # tensorboard's events on disk now: a write that fails fails here, not unseen at exit
    else:  # the checkpoint resumed from reaches the budget: the run ends there, and it holds that checkpoint
        notify(f"{str(directory)!r}: its newest checkpoint ({model.num_timesteps} steps) reaches "
               f"total_timesteps={config.total_timesteps}: nothing to train; the run ends there (final model, "
               "evaluation and summary)")
        callback.init_callback(model)
    elapsed = time.time() - started
    save_model_atomic(model, directory / "model.zip", record)
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
    write_atomic(directory / "summary.json", json.dumps(summary, indent=2))
    env.close()
    eval_env.close()
    return summary


def notify(message: str) -> None:
    """Tell the user what a run does with its directory (stderr, so that it reaches a study's terminal too)."""
    print(message, file=sys.stderr, flush=True)


def refuse_existing_run(directory: Path) -> None:
    """Raise ``ConfigError`` when ``directory`` already holds a run: a run directory is never reused
    (its name is the run's, which studies rely on), so the user resumes it or names another."""
    if not holds_run(directory):
        return
    run = Run(directory)
    checkpoint = run.checkpoint()
    what = (f"a finished run ({run.summary['env_steps']} steps)" if run.summary is not None
            else f"an unfinished run (last checkpoint at step {checkpoint[1]})" if checkpoint is not None
            else "an unfinished run (stopped before its first checkpoint)")
    raise ConfigError(f"run directory {str(directory)!r} already holds {what}; add --resume to continue it, or "
                      "choose another --seed or --log-dir (a run directory is never overwritten)")


def finished_summary(directory: Path, total_timesteps: int) -> dict[str, Any] | None:
    """The summary of the run in ``directory`` when it has finished ``total_timesteps`` (or stopped solved)."""
    summary = Run(directory).summary
    if summary is not None and (summary["env_steps"] >= total_timesteps or summary.get("stopped_solved")):
        return summary
    return None


def load_newest_checkpoint(config: RunConfig, directory: Path, env: Any) -> tuple[Any, int] | None:
    """The newest checkpoint of the run that loads, as ``(model, steps)``; ``None`` when there is none.

    A checkpoint that fails to load (a truncated or corrupted file) is reported by name and, once an
    older one loads, renamed ``*.unloadable`` (kept for inspection; never overwritten by the resumed
    run). When checkpoints exist but none loads, ``ConfigError``: nothing is changed.
    """
    failures = []
    for path, steps in reversed(checkpoints(directory / "checkpoints")):
        try:
            model = ALGOS[config.algo].load(path, env=env, device=config.device)
        except Exception as error:  # zipfile, pickle, torch and key errors alike: the file is unusable
            failures.append(path)
            notify(f"checkpoint {str(path)!r} does not load ({type(error).__name__}: {error})")
            continue
        for failed in failures:
            os.replace(failed, failed.with_name(f"{failed.name}.unloadable"))
        if failures:
            notify(f"resuming from {str(path)!r} ({steps} steps), the newest checkpoint that loads; "
                   f"set aside: {', '.join(f'{p.name}.unloadable' for p in failures)}")
        return model, steps
    if failures:
        raise ConfigError(f"--resume: none of the {len(failures)} checkpoints in {str(directory / 'checkpoints')!r} "
                          "loads; the run directory is left as it is")
    return None


def checkpoint_note(directory: Path) -> str:
    """Where a run that stopped can restart from: its newest checkpoint, or that it has none."""
    latest = latest_checkpoint(directory / "checkpoints")
    if latest is None:
        return f"no checkpoint was saved before it ({str(directory / 'checkpoints')!r} holds none)"
    return f"the last checkpoint before it is {str(latest[0])!r} (step {latest[1]})"


def check_same_run(config: RunConfig, directory: Path) -> None:
    """Refuse to resume the run in ``directory`` with another configuration than its own (``ConfigError`` naming the
    keys): the one in its ``config.yaml``, and the one recorded inside each of its checkpoints
    (:mod:`experiments.run_identity`), so a run whose ``config.yaml`` was lost or rewritten is still checked."""
    saved = directory / "config.yaml"
    if saved.exists():
        check_same_config(config, saved)
    for path, _ in reversed(checkpoints(directory / "checkpoints")):
        record = read_record(path)
        if record is not None:
            _refuse_differences(config, record.settings, f"its checkpoint {str(path)!r}", record.partial)


def check_same_config(config: RunConfig, saved: Path) -> None:
    """Refuse to continue a run directory with another configuration than its ``config.yaml`` (``ConfigError``
    naming the keys).

    Compared: every setting that shapes this run, the learner's and backbone's options one by one. Not compared:
    the budget (and the early stop), device and threads, the checkpoints kept,
    where the run is written (``log_dir``: a run directory may be moved or copied into a study),
    and the sections of the other learners and backbones (a task config that gains a section for
    a new backbone still resumes the runs it already holds). A run setting that the saved file lacks
    was added after the run was made, which behaved as its default does (``precision``: fp32), except the
    hyper-parameter entry (``hyperparams``), which such a run did not record; a backbone option
    it lacks means what it meant then (`policies.registry.saved_options`), so a run made before a default
    changed is never resumed with the new one.
    """
    _refuse_differences(config, load_yaml(saved), repr(str(saved)))


def _refuse_differences(config: RunConfig, saved: dict[str, Any], source: str, partial: bool = False) -> None:
    """Refuse ``config`` where it differs from the configuration ``saved`` (a ``config.yaml``, or the record of a
    checkpoint), named ``source`` in the message. ``partial``: ``saved`` holds only some settings (what SB3 keeps
    of a model saved before records), and only those, where set, are compared."""
    if partial:
        previous = _compared(plain(saved), config)
    else:
        previous = _compared(plain(with_every_option({**RunConfig().to_dict(), **saved}, saved=True)), config)
    current = _compared(plain(with_every_option(config.to_dict())), config)
    if "hyperparams" not in saved:  # a run made before runs recorded their entry: its values are compared one by one
        previous.pop("hyperparams", None)
        current.pop("hyperparams", None)
    keys = {key for key in previous if current.get(key) is not None} if partial else set(previous) | set(current)
    changed = [f"{key} ({short(repr(previous.get(key)))} in the run, {short(repr(current.get(key)))} now)"
               for key in sorted(keys) if previous.get(key) != current.get(key)]
    if changed:
        raise ConfigError(f"--resume with a configuration that differs from {source} in: {', '.join(changed)}")


def _compared(data: dict[str, Any], config: RunConfig) -> dict[str, Any]:
    """The settings :func:`check_same_config` compares: the run settings, and the options of the run's learner
    and backbone as dotted keys."""
    ignored = {"total_timesteps", "stop_when_solved", "device", "threads", "log_dir", "keep_checkpoints", "vec_env"}
    flat = {key: value for key, value in data.items() if key not in ignored | set(ALGOS) | set(BACKBONES)}
    for section in (config.algo, config.backbone):
        flat.update({f"{section}.{key}": value for key, value in (data.get(section) or {}).items()})
    return flat

