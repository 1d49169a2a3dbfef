"""A trained agent with its run's settings: where its model is, loading it with the learner that saved it,
scoring it over episodes as the run's own evaluations do, and playing episodes to render or record them.

Scores use the run's evaluation set-up by default (`n_eval_envs` copies seeded `seed + 10000`,
`n_eval_episodes` episodes, the most probable action), which is what the run's final evaluation
(`summary.json`) ran, so the same model scores the same numbers. The run's settings are its `config.yaml` as
written, which holds every setting and the hyper-parameter entry it was made from; an environment given in its
place starts from the settings of its own entry (`experiments.hyperparams`). Which model is scored (the final
`model.zip`, `best_model.zip`, a checkpoint) is named with the step it was saved at.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agents import ALGOS, saved_learner
from envs.atomic import write_new
from envs.imports import cause
from envs.rules import Device, Entries, Items, Text, short, shown
from experiments.config import FIELDS, ConfigError, RunConfig, build_config
from experiments.evaluation import EvalResult, evaluate
from experiments.model_files import damage
from experiments.rules import PathName
from experiments.run_dir import BEST_MODEL, BEST_RECORD, CHECKPOINT_PREFIX, MODEL_FILE, RunDirectory, read_json
from experiments.training import EVAL_SEED_OFFSET, make_run_env, scoring_vec_env
from experiments.video import rgb_frames
from policies.spaces import ObservationError

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

    @property
    def kind(self) -> str:
        """Which of its run's models this is: `final` (`model.zip`), `best` (`best_model.zip`, the model of
        the run's best evaluation, as SB3's `EvalCallback` keeps it), `checkpoint`, else `saved`."""
        name, folder = self.model_path.name, self.model_path.parent.name
        if name == MODEL_FILE and self.model_path.parent == self.directory:
            return "final"
        if name == BEST_MODEL:
            return "best"
        return "checkpoint" if folder == "checkpoints" and name.startswith(CHECKPOINT_PREFIX) else "saved"

    def described(self) -> str:
        """The model scored, in words: `the final model (model.zip), saved at 320 steps`; for `best_model.zip`
        also the step of the evaluation that chose it."""
        steps = int(self.model.num_timesteps)
        what = {"final": "the final model", "best": "the best evaluation's model", "checkpoint": "a checkpoint",
                "saved": "a saved model"}[self.kind]
        text = f"{what} ({self.model_path.name}), saved at {steps:,} steps"
        record = read_json(self.model_path.parent / BEST_RECORD) if self.kind == "best" else None
        if record is not None:
            text += f" (the evaluation at {int(record['timesteps']):,} steps, mean return {record['mean_return']:.3f})"
        return text


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """The model file and run directory (holding `config.yaml`) of a run directory (its final
    `model.zip`) or of a `.zip` (a run's `best_model.zip`, a checkpoint, or a model anywhere); `ConfigError`
    naming it for any other path, the empty one included."""
    PathName().check("path", path)
    path = Path(path)
    if path.is_dir():
        if not (path / MODEL_FILE).is_file():
            if RunDirectory(path).reader() == "lm eval":
                raise ConfigError(f"{str(path)!r} is a language-model run: `lm eval {path}` reads it")
            raise ConfigError(f"{str(path)!r} holds no {MODEL_FILE}: give a finished run directory or a saved .zip")
        return path / MODEL_FILE, path
    if path.suffix != ".zip" or not path.is_file():
        raise ConfigError(f"{str(path)!r} is neither a run directory nor a saved model (.zip)")
    run = next((p for p in (path.parent, path.parent.parent) if (p / "config.yaml").is_file()), None)
    return path, run


def load_agent(path: str | Path, device: str = "auto", env: str | None = None,
               env_kwargs: dict[str, Any] | None = None, env_wrapper: Any = None,
               gym_packages: list[str] | None = None, hyperparams: str = "auto") -> SavedAgent:
    """Load the model at `path` with the learner class that saved it (recorded in the zip, else the run's
    `algo`), and its run's configuration (its `config.yaml` as written); `env` replaces the environment, its
    keyword arguments and (where that entry has them) wrappers by those of its hyper-parameter entry, found as
    training finds it with `hyperparams` (a model without a run takes every setting of the entry);
    `env_kwargs` are set over them, `env_wrapper` (`[]`: none) replaces the wrappers and `gym_packages` are
    imported after the run's. A device this machine lacks, a model that does not load (truncated, damaged, not
    SB3's), or an environment that does not build or whose spaces are not the model's (`check_agent_env`) raises
    `ConfigError` naming it; so does `hyperparams` other than `auto` without `env`, which it would not change."""
    Device().check("device", device)
    Entries().check("env_kwargs", env_kwargs)
    Items(Text(), empty_ok=True, optional=True).check("gym_packages", gym_packages)
    if env is not None:
        FIELDS["env"].metadata["rule"].check("env", env)
    elif hyperparams != "auto":  # it names the entry `env` starts from; without one it would change nothing
        raise ConfigError(f"hyperparams={shown(hyperparams)}: only with env (the run's environment settings are "
                          "those of its config.yaml, made from the entry it names)")
    model_path, run = locate(path)
    if run is None and env is None:
        raise ConfigError(f"no config.yaml beside {str(model_path)!r}: give the environment with --env")
    if (why := damage(model_path)) is not None:
        raise ConfigError(f"model {str(model_path)!r} does not load: {why}")
    config = build_config(run / "config.yaml", entries=False) if run is not None else RunConfig()
    if run is not None:
        _check_run_settings(config, run / "config.yaml")
    try:
        learner = saved_learner(model_path) or ALGOS[config.algo].__name__
    except Exception as error:  # a zip whose data is not SB3's JSON
        raise unloadable(model_path, error) from error
    if run is not None and learner != ALGOS[config.algo].__name__:
        raise ConfigError(f"{str(run / 'config.yaml')!r}: algo={shown(config.algo)}, but {str(model_path)!r} holds "
                          f"a {learner} model (changed since training?)")
    if env is not None:
        algo = next((name for name, cls in ALGOS.items() if cls.__name__ == learner), config.algo)
        config = scored_on(config, env, env_kwargs or {}, algo, hyperparams, whole=run is None)
    config.env_kwargs.update(env_kwargs or {})
    if env_wrapper is not None:
        config.env_wrapper = env_wrapper or None
    config.gym_packages = [*config.gym_packages, *(gym_packages or [])]
    learners = {cls.__name__: cls for cls in ALGOS.values()}
    try:
        model = learners[learner].load(model_path, device=device)
    except Exception as error:  # pickle, torch and key errors alike: the file is no model engram loads
        raise unloadable(model_path, error) from error
    if run is None:  # no config.yaml: the learner and the backbone are the model's own, not the defaults
        config.algo = next(name for name, cls in ALGOS.items() if cls.__name__ == learner)
        config.backbone = model.policy.backbone_name
    agent = SavedAgent(model, config, model_path, run if run is not None else model_path.parent)
    check_agent_env(agent)  # at load, as the commands check it: not first when the model predicts
    return agent


def _check_run_settings(config: RunConfig, file: Path) -> None:
    """Each setting of a run's `config.yaml` against its rule, as training checked it (a file edited since is
    named with the setting)."""
    from experiments.validation import check_settings

    try:
        check_settings(config)
    except ConfigError as error:
        raise ConfigError(f"{str(file)!r}: {error}") from None


def unloadable(model_path: Path, error: Exception) -> ConfigError:
    """The one-line error of a model that does not load, naming the file and the exception."""
    return ConfigError(f"model {str(model_path)!r} does not load ({type(error).__name__}: {short(str(error), 200)})")


def scored_on(config: RunConfig, env: str, env_kwargs: dict[str, Any], algo: str, hyperparams: str,
              whole: bool) -> RunConfig:
    """`config` with `env` in place of its environment: `env_kwargs` over the keyword arguments, and the
    wrappers where it has some, of the hyper-parameter entry training would start `algo` on `env` with
    `env_kwargs` from (none: `env_kwargs` alone, the run's wrappers); `whole`: every setting of that entry (a
    model without a run). `hyperparams` then names that entry."""
    entry = build_config(None, {"algo": algo, "env": env, "env_kwargs": env_kwargs, "hyperparams": hyperparams})
    if whole:
        return entry
    config.env, config.env_kwargs, config.hyperparams = env, entry.env_kwargs, entry.hyperparams
    if entry.env_wrapper is not None:
        config.env_wrapper = entry.env_wrapper
    return config


def load_agent_with_env(options: Any, device: str) -> SavedAgent:
    """`load_agent` with a command's environment options (`experiments.cli.parser.add_env_options`); the
    hyper-parameter entry an `--env` starts from is named on one line (stderr)."""
    from experiments.config import parse_override
    from experiments.hyperparams import applied_line

    kwargs = dict(parse_override(text, "--env-kwargs") for text in options.env_kwargs)
    hyperparams = "auto" if options.hyperparams is None else options.hyperparams
    agent = load_agent(options.path, device, options.env, kwargs, options.env_wrapper, options.gym_packages,
                       hyperparams)
    line = applied_line([agent.config.hyperparams], under="--env-kwargs") if options.env is not None else None
    if line is not None:
        print(line, file=sys.stderr)
    return agent


def check_agent_env(agent: SavedAgent) -> None:
    """The agent's environment passes the run settings' rules (`experiments.validation.check_env`) and has
    the observation and action spaces the model was trained on; else `ConfigError` naming the env."""
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
    """`episodes` episodes per policy (`deterministic`, `stochastic`), one after the other on one
    VecEnv of `n_envs` copies seeded `seed`, as the run's evaluations do; sampling is seeded too."""
    torch.manual_seed(seed)
    env = make_run_env(agent.config, n_envs, seed, scoring_vec_env(agent.config))
    try:
        return {policy: evaluate(agent.model, env, episodes, deterministic=policy == "deterministic")
                for policy in policies}
    finally:
        env.close()


def act(model: Any, observation: Any, state: Any, start: np.ndarray, deterministic: bool) -> tuple[Any, Any]:
    """`predict` on one env's observation, an observation it cannot act on (a NaN) named as the env's."""
    try:
        return model.predict(observation, state=state, episode_start=start, deterministic=deterministic)
    except ObservationError as error:
        raise ObservationError(f"the env's {error}") from None


def env_action(action_space: Any, action: Any) -> Any:
    """`predict`'s action as one gymnasium env takes it (a Python int where toy-text envs index a table)."""
    return int(action) if isinstance(action_space, spaces.Discrete) else action


def has_display() -> bool:
    """Whether a window can be opened: on macOS and Windows always, elsewhere where DISPLAY (X11) or
    WAYLAND_DISPLAY names one."""
    return sys.platform in ("darwin", "win32", "cygwin") or bool(os.environ.get("DISPLAY")
                                                                 or os.environ.get("WAYLAND_DISPLAY"))


def headless_sdl() -> None:
    """Without a display, SDL's dummy video and audio drivers (unless others are set) for the pygame that
    gymnasium's envs draw frames with: SDL probes no window system, whose libraries print to stderr
    (`error: XDG_RUNTIME_DIR is invalid or not set`)."""
    if not has_display():
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")


def open_player(agent: SavedAgent, render_mode: str, flag: str) -> Any:
    """One gymnasium copy of the agent's environment that renders in `render_mode` (a first frame is drawn to
    check it); `ConfigError` naming `flag` and the env when it cannot, before any episode is scored."""
    from envs import make_env

    headless_sdl()
    config = agent.config
    try:
        env = make_env(config.env, env_wrapper=config.env_wrapper, gym_packages=config.gym_packages,
                       **{**config.env_kwargs, "render_mode": render_mode})  # the run's own render_mode gives way
    except Exception as error:  # an env constructor that takes no render_mode, or fails with one
        raise ConfigError(f"{flag}: env={shown(config.env)} cannot render in {render_mode!r} mode "
                          f"({short(cause(error), 200)})") from None
    try:
        env.reset(seed=agent.eval_seed)
        frame = env.render()
        if getattr(env, "render_mode", None) != render_mode or (frame is None and render_mode != "human"):
            raise ValueError(f"its render_mode is {getattr(env, 'render_mode', None)!r}")
        if render_mode == "rgb_array":
            rgb_frames([frame])  # an image that a video can hold
    except Exception as error:
        env.close()
        raise ConfigError(f"{flag}: env={shown(config.env)} cannot render in {render_mode!r} mode "
                          f"({short(cause(error), 200)})") from None
    return env


def play(agent: SavedAgent, env: Any, episodes: int, seed: int, deterministic: bool) -> Iterator[Any]:
    """Play `episodes` episodes (the i-th seeded `seed + i`) on `env` (`open_player`), which does not reset
    itself, and yield `render()` at each episode's start and after every step, its last one included; closes
    `env` at the end."""
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            state, start, over = None, np.ones(1, dtype=bool), False
            yield env.render()
            while not over:
                action, state = act(agent.model, observation, state, start, deterministic)
                observation, _, terminated, truncated, _ = env.step(env_action(env.action_space, action))
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
        "model_kind": agent.kind, "model_timesteps": int(agent.model.num_timesteps),
        "hyperparams": None if agent.config.hyperparams == "auto" else agent.config.hyperparams,  # auto: unrecorded
        "episodes": episodes, "seed": seed, "n_envs": n_envs,
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
    """Write `record` to a new `{prefix}_<date>-<time>.json` in `directory` (`-2`, `-3`, ... where
    that name is taken: an earlier result is never overwritten, even by a process writing at the same time), whole
    or not at all (`envs.atomic.write_new`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    text = json.dumps(record, indent=2)
    for n in itertools.count(1):
        path = directory / (f"{prefix}_{stamp}.json" if n == 1 else f"{prefix}_{stamp}-{n}.json")
        try:
            write_new(path, text)
            return path
        except FileExistsError:
            continue
    raise AssertionError("unreachable")
