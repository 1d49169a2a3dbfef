"""What MemoryPPO and V-MPO share: memory-carrying rollouts, the segment buffer, auxiliary
losses of the backbone, and the guard against non-finite losses, gradients and parameters."""

from __future__ import annotations

import inspect
import io
import json
import os
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any, NamedTuple, Self

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.save_util import json_to_data
from stable_baselines3.common.type_aliases import MaybeCallback, Schedule
from stable_baselines3.common.utils import check_for_correct_spaces, obs_as_tensor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper
from torch import Tensor

from agents.advantages import SUSTAINED_ROLLOUTS, normalized, sustained_scale
from agents.buffer import (
    MINIBATCH_ORDERS,
    DeviceRolloutBuffer,
    MemoryBatch,
    MemoryDictRolloutBuffer,
    MemoryRolloutBuffer,
)
from agents.exploration import FINITE, check_action_space, uniform_kl
from envs.atomic import atomic_path, creation_error, made_folders, nearest_existing
from envs.conformance import Conformant, api_problem
from envs.rules import (
    FLOAT32_MAX,
    ConfigError,
    Count,
    Device,
    Entries,
    Flag,
    InputNotFoundError,
    OneOf,
    Range,
    Switch,
    Text,
    fitting_in_memory,
    one_line,
    short,
    shown,
)
from policies.backbone import Aux
from policies.options import Relation, checked, is_checked, option_rules, relations
from policies.policy import GSDE_OPTIONS, GSDE_REFUSED, MemoryActorCriticPolicy, PolicyState, PolicyStep
from policies.registry import saved_options
from policies.spaces import check_spaces, env_actions

DEFAULT_UNIFORM_KL = 0.01
"""``c_U`` on finite action spaces unless set: chosen by the T-Maze seed studies (docs/notes/tuned-defaults.md)"""


PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
"""Compute dtype of the update's forward pass. ``bf16``: the features extractor and the backbone run
under ``torch.autocast`` (Micikevicius et al. 2018's mixed precision, with bfloat16's float32 range,
so no loss scaling); parameters, gradients, the optimizer, the heads and the losses stay float32, and
rollouts are computed in float32 as before."""

LearningRate = Annotated[float | Schedule, Range(0.0, FLOAT32_MAX, schedule=True,
                                                 note="0: the policy stays as it starts, e.g. from init_from")]
AuxCoefs = Annotated[dict[str, float] | None, Entries(Range(0.0))]
UniformKLCoef = Annotated[float | None, Range(0.0, optional=True)]
MinibatchOrder = Annotated[str, OneOf(lambda: MINIBATCH_ORDERS)]
Precision = Annotated[str, OneOf(lambda: PRECISIONS)]
AdvantageScaleDecay = Annotated[float, Range(0.0, 1.0, note="0: SB3's per-minibatch standardisation")]


def _whole_segments(option: str) -> Relation:
    return Relation(option, (option, "segment_length"), lambda o: o[option] % o["segment_length"] == 0,
                    lambda o: f"a multiple of the training segment, {o.show('segment_length')}")


WHOLE_SEGMENTS = (_whole_segments("n_steps"), _whole_segments("batch_size"))
"""``n_steps`` and ``batch_size`` are multiples of ``segment_length``: the buffer cuts both into segments"""


def default_batch_size(default: int, n_steps: int, n_envs: int) -> int:
    """The minibatch when `batch_size` is not given: `default`, or the whole rollout where that is smaller."""
    return min(default, n_steps * n_envs)


def check_aux_coefs(aux_coefs: Mapping[str, float] | None, policy: MemoryActorCriticPolicy, prefix: str = "") -> None:
    """`ValueError` naming a key of `aux_coefs` that is no auxiliary loss of `policy`'s backbone."""
    losses = policy.backbone.aux_loss_coefs
    if unknown := sorted(set(aux_coefs or {}) - set(losses)):
        raise ValueError(f"{prefix}aux_coefs: {unknown[0]!r} is not an auxiliary loss of backbone "
                         f"{policy.backbone_name!r}; its losses: {', '.join(losses) or 'none'}")


def check_batch_size(batch_size: int, n_steps: int, n_envs: int, prefix: str = "") -> None:
    """Refuse (`ConfigError`) a minibatch larger than the rollout of `n_steps` × `n_envs` steps, which SB3 would
    train on as one minibatch; `prefix` names the learner's options in the message (`ppo.`). The one rule of the
    learners (their constructor and `learn`) and of a run's settings (`experiments.validation`)."""
    rollout = n_steps * n_envs
    if batch_size > rollout:
        raise ConfigError(f"{prefix}batch_size={shown(batch_size)}: expected at most the rollout, {prefix}n_steps="
                          f"{shown(n_steps)} x n_envs={n_envs} = {rollout} steps")


def _check_callback(callback: Any) -> None:
    """`learn`'s `callback` as SB3 takes it: `None`, a `BaseCallback`, a function of `(locals, globals)` or a list
    of `BaseCallback`s; `ConfigError` otherwise."""
    if isinstance(callback, list):
        wrong = [each for each in callback if not isinstance(each, BaseCallback)]
    else:
        wrong = [] if callback is None or isinstance(callback, BaseCallback) or (
            callable(callback) and not isinstance(callback, type)) else [callback]
    if wrong:
        raise ConfigError(f"callback={short(repr(callback))}: expected None, an SB3 callback (a BaseCallback), a "
                          "function of (locals, globals) or a list of BaseCallbacks")
    for each in _nested(callback):
        if isinstance(each, EvalCallback) and getattr(each.eval_env, "on_device", False):
            raise ConfigError(f"callback={short(repr(callback))}: its EvalCallback's eval_env is a torch VecEnv "
                              "(vec_env='torch'), and SB3's evaluation takes NumPy ones: make it with vec_env='dummy'")


def _nested(callback: Any) -> Iterator[Any]:
    """`callback` and every callback it holds (a list's, `CallbackList`'s, an `EventCallback`'s)."""
    for each in callback if isinstance(callback, list) else [callback]:
        yield each
        yield from _nested(getattr(each, "callbacks", []))
        if (child := getattr(each, "callback", None)) is not None:
            yield from _nested(child)


RUN_MODEL = "model.zip"
"""the model a run directory holds, which `load` loads when given the directory"""
_MODEL_PATH = ("expected the path of a model save wrote (a .zip, or the name it was saved under) or a directory "
               f"holding {RUN_MODEL}")


class ModelNotFoundError(InputNotFoundError):
    """No saved model where `load` looked: a `ConfigError`, and the `FileNotFoundError` SB3's `load` raises."""


def _check_learner_set(learner: str, policy_kwargs: Any, own: tuple[str, ...]) -> None:
    """Refuse (`ConfigError`) a policy option that the learner sets itself: the spaces and the learning-rate
    schedule, from the env and `learning_rate`, and the learner's `own` options (VMPO's `popart`)."""
    if not isinstance(policy_kwargs, Mapping):
        return  # the policy refuses what is no mapping
    if given := [name for name in ("observation_space", "action_space", "lr_schedule") if name in policy_kwargs]:
        raise ConfigError(f"policy_kwargs[{given[0]!r}]: {learner} sets it from the env and learning_rate; leave it "
                          "out")
    if given := [name for name in own if name in policy_kwargs]:
        raise ConfigError(f"policy_kwargs[{given[0]!r}]: {learner} sets it from its own option; pass "
                          f"{learner}({given[0]}=...)")


ModelSource = Path | io.BufferedIOBase
"""a saved model: its zip file, or an open binary file (SB3's `load` takes both)"""


def model_file(path: Any, key: str = "path") -> Path:
    """The saved model `path` names: a zip file (`.zip` added where missing, as SB3 adds it) or a directory holding
    `model.zip`; `ConfigError` naming `key` for any other value (`ModelNotFoundError` where nothing is there)."""
    name = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(name, str) or not name or "\0" in name:
        raise ConfigError(f"{key}={shown(path)}: {_MODEL_PATH}")
    file = Path(name)
    if file.is_dir():
        file = file / RUN_MODEL
        if not file.is_file():
            raise ConfigError(f"{key}={name!r}: a directory holding no {RUN_MODEL}; {_MODEL_PATH}")
    elif not file.exists():
        file = Path(f"{name}.zip")
        if not file.is_file():
            raise ModelNotFoundError(f"{key}: no saved model there (nor with .zip added): {name!r}; {_MODEL_PATH}")
    _check_saved_data(file, key, name)
    return file


SAVED_ENTRIES = ("policy_class", "observation_space", "action_space")
"""what SB3's `save` writes into a model's `data` and its `load` reads"""


def _check_saved_data(file: ModelSource, key: str, name: str) -> None:
    """`ConfigError` naming `key` and `name` where `file` is no zip holding the `data` entry SB3's `save` writes."""
    try:
        data = _saved_data(file)
    except zipfile.BadZipFile:
        raise ConfigError(f"{key}={name!r}: not a zip file (or one cut short); {_MODEL_PATH}") from None
    except ValueError:  # an entry that is not JSON
        raise ConfigError(f"{key}={name!r}: its 'data' entry is not the JSON save writes (cut short or changed); "
                          f"{_MODEL_PATH}") from None
    if not data:
        raise ConfigError(f"{key}={name!r}: a zip file without the 'data' entry save writes (JSON); {_MODEL_PATH}")
    if not isinstance(data, dict):
        raise ConfigError(f"{key}={name!r}: its 'data' entry is {type(data).__name__}, not the mapping save writes "
                          f"(changed since); {_MODEL_PATH}")
    if missing := [entry for entry in SAVED_ENTRIES if entry not in data]:
        raise ConfigError(f"{key}={name!r}: its 'data' entry lacks {', '.join(map(repr, missing))}, which save "
                          f"writes (changed since); {_MODEL_PATH}")


def source_name(file: ModelSource) -> str:
    """A saved model as messages name it: its path, or the name of the open file it is read from."""
    return str(getattr(file, "name", "an open file")) if isinstance(file, io.BufferedIOBase) else str(file)


def _check_load_mappings(custom_objects: Any, kwargs: Mapping[str, Any]) -> None:
    """`load`'s `custom_objects` and the `policy_kwargs` it or `kwargs` give are dicts; `ConfigError` naming them."""
    if custom_objects is not None and not (isinstance(custom_objects, Mapping)
                                           and all(isinstance(name, str) for name in custom_objects)):
        raise ConfigError(f"custom_objects={shown(custom_objects)}: expected None or a dict of saved names (options "
                          "such as learning_rate, SB3's objects such as lr_schedule) to the values to load instead")
    for key, given in (("policy_kwargs", kwargs), ("custom_objects['policy_kwargs']", custom_objects or {})):
        if "policy_kwargs" in given and not isinstance(given["policy_kwargs"], Mapping):
            raise ConfigError(f"{key}={shown(given['policy_kwargs'])}: expected a dict of the policy's options")


def _check_saved_policy_kwargs(file: ModelSource, given: Mapping[str, Any], resolved: Mapping[str, Any],
                               saved: Mapping[str, Any]) -> None:
    """`ConfigError` where the `policy_kwargs` given to `load` (`resolved`: with every default) are not the `saved`
    ones, naming each option that differs as given (or not given) and as saved."""
    if resolved == saved:
        return
    missing = object()
    differing = [name for name in dict.fromkeys([*resolved, *saved])
                 if resolved.get(name, missing) != saved.get(name, missing)]
    parts = ", ".join((f"{name}={shown(given[name])}" if name in given else f"{name} not given")
                      + f" (stored: {shown(saved[name]) if name in saved else 'none'})" for name in differing)
    raise ConfigError(f"policy_kwargs do not equal the stored policy kwargs of the model {source_name(file)!r}: "
                      f"{parts}; load builds the policy it was saved with, so leave policy_kwargs out (or give the "
                      "stored ones)")


def _saved_data(path: ModelSource) -> dict[str, Any]:
    """The JSON `data` entry of a model saved by SB3 (`{}` where it has none), its objects still serialised."""
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("data")) if "data" in archive.namelist() else {}


def _decoded(path: ModelSource, entries: dict[str, Any]) -> dict[str, Any]:
    """`entries` of the saved data of the model at `path` with their objects deserialised (SB3's `json_to_data`);
    `ConfigError` naming the model and the entries for one that does not deserialise (changed since)."""
    try:
        return json_to_data(json.dumps(entries))
    except Exception as error:  # base64's, cloudpickle's or a class's own words
        names = ", ".join(map(repr, entries))
        entry = "entry does" if len(entries) == 1 else "entries do"
        raise ConfigError(f"path={source_name(path)!r}: its saved {names} {entry} not load ({type(error).__name__}: "
                          f"{short(one_line(error), 120)}; changed since)") from None


def _model_source(path: Any) -> tuple[ModelSource, str]:
    """The saved model `path` gives, checked, and its name in messages: an open binary file, or `model_file`'s."""
    if isinstance(path, io.BufferedIOBase):
        _check_saved_data(path, "path", source_name(path))
        return path, source_name(path)
    return model_file(path), os.fspath(path)


def saved_learner(path: Any) -> str | None:
    """The learner class recorded in the model `path` gives, as `load` takes it (`None`: none recorded); a
    `ConfigError` naming a path that holds no model."""
    name = _saved_data(_model_source(path)[0]).get("learner_class")
    return name if isinstance(name, str) else None


def saved_policy_class(path: ModelSource) -> Any:
    """The policy class of the model at `path` (`None` where its data holds none)."""
    data = _saved_data(path)
    if "policy_class" not in data:
        return None
    return _decoded(path, {"policy_class": data["policy_class"]})["policy_class"]


def saved_spaces(path: ModelSource) -> dict[str, Any]:
    """The observation and action spaces of the model at `path` (those its data holds)."""
    data = _saved_data(path)
    return _decoded(path, {key: data[key] for key in ("observation_space", "action_space") if key in data})


def saved_policy_kwargs(path: ModelSource) -> dict[str, Any]:
    """The `policy_kwargs` of the model at `path`, with every backbone option it was trained with: a model
    saved before options were recorded whole gets the defaults of its time (`policies.registry.saved_options`)."""
    kwargs = _decoded(path, {"policy_kwargs": _saved_data(path).get("policy_kwargs", {})})["policy_kwargs"]
    if not isinstance(kwargs, Mapping | None):
        raise ConfigError(f"path={source_name(path)!r}: its saved policy_kwargs={shown(kwargs)}: expected a dict of "
                          "the policy's options (changed since)")
    kwargs = dict(kwargs or {})
    backbone = kwargs.get("backbone", "gtrxl")
    kwargs["backbone_kwargs"] = saved_options(backbone, kwargs.get("backbone_kwargs") or {})
    return kwargs


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity; the message says where it first appeared."""


def check_finite_observation(obs: np.ndarray | dict[str, np.ndarray], timestep: int) -> None:
    """Raise `NonFiniteError` when a float observation from the env holds a NaN, an infinity, or a value beyond
    float32, which the policy computes in (it would act on it, and sampling fails on a non-finite probability)."""
    for key, value in obs.items() if isinstance(obs, dict) else [(None, obs)]:
        if value.dtype.kind == "f" and not (finite := _float32_finite(value)).all():
            envs = np.flatnonzero(~finite.reshape(len(value), -1).all(axis=1)).tolist()
            name = "observation" if key is None else f"observation {key!r}"
            raise NonFiniteError(f"non-finite {name} from the env at timestep {timestep} (envs {envs[:5]}): the env "
                                 "gave a NaN or an infinity (or a value float32 cannot hold); fix the env or wrap it "
                                 "to clean its observations")


def _float32_finite(value: np.ndarray) -> np.ndarray:
    """Where the float array `value` is finite once float32."""
    finite = np.isfinite(value)
    return finite if value.dtype.itemsize <= 4 else finite & (np.abs(value) <= np.finfo(np.float32).max)


def non_finite_tensors(tensors: dict[str, Tensor], shown: int = 5) -> str:
    """Which of `tensors` make a norm over them non-finite, for a guard's message: those holding a NaN or
    an infinity, else those finite but so large that their norm overflows (`max |x|` given); never empty.
    The first `shown` are named, then how many more."""
    bad = [name for name, tensor in tensors.items() if not torch.isfinite(tensor).all()]
    if bad:
        return "NaN or infinite values in " + _first(bad, shown)
    huge = [f"{name} (max |x| = {tensor.abs().max().item():.3g})" for name, tensor in tensors.items()
            if not torch.isfinite(torch.linalg.vector_norm(tensor))]
    if huge:
        return "finite values whose norm overflows in " + _first(huge, shown)
    return f"every one of the {len(tensors)} tensors is finite on its own, their total norm overflows"


def _first(names: list[str], shown: int) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


class Recomputed(NamedTuple):
    """A minibatch recomputed with the current parameters."""

    actions: Tensor
    values: Tensor
    distribution: Distribution
    log_prob: Tensor
    advantages: Tensor  # normalised per minibatch when the learner asks for it
    aux_loss: Tensor | float  # weighted sum of the backbone's auxiliary losses and the KL(U ‖ π) barrier


def _check_env_spaces(env: gym.Env | VecEnv, spec: str | None = None) -> None:
    """`ConfigError` naming the observation or action space of `env` (made from `spec`, where given) that a memory
    policy cannot take."""
    try:
        check_spaces(env.observation_space, env.action_space)
    except ValueError as error:
        raise ConfigError(f"env{'' if spec is None else '=' + shown(spec)}: {error}") from None


def _check_spaces_fit(env: VecEnv, observation_space: gym.Space, action_space: gym.Space, model: str) -> None:
    """`ConfigError` naming the space of `env` that is not the one `model` was trained on (SB3's check of each
    space alone: an image's channels may come first or last)."""
    trained = {"observation": observation_space, "action": action_space}
    for kind in trained:
        spaces_given = {**{name: getattr(env, f"{name}_space") for name in trained}, kind: trained[kind]}
        try:
            check_for_correct_spaces(env, spaces_given["observation"], spaces_given["action"])
        except ValueError:
            given = " ".join(str(getattr(env, f"{kind}_space")).split())
            raise ConfigError(f"env: its {kind} space {short(given)} is not the {kind} space {model} was trained "
                              f"on, {short(' '.join(str(trained[kind]).split()))}") from None


def _check_env_api(env: gym.Env, seed: int | None, spec: str | None = None) -> None:
    """`ConfigError` naming the first break of gymnasium's API in one `reset` and `step` of `env`
    (`envs.conformance.api_problem`), before SB3 steps it inside a VecEnv."""
    if (problem := api_problem(env, seed)) is not None:
        raise ConfigError(f"env{'' if spec is None else '=' + shown(spec)}: breaks gymnasium's API: {problem}")


def _conformant(env: gym.Env) -> gym.Env:
    """`env` checked at every reset and step (`envs.conformance.Conformant`), named by its spec or class."""
    if isinstance(env, Conformant):
        return env
    return Conformant(env, env.spec.id if env.spec is not None else type(env.unwrapped).__name__)


def _check_copies(env: VecEnv) -> None:
    """Check every reset and step of the copies of a user's `DummyVecEnv` (under any `VecEnvWrapper`) as an env
    object's are (`_conformant`); copies in other processes are stepped as they are."""
    while isinstance(env, VecEnvWrapper):
        env = env.venv
    if isinstance(env, DummyVecEnv):
        env.envs = [_conformant(copy) for copy in env.envs]


class MemoryOnPolicyAlgorithm(OnPolicyAlgorithm):
    """An SB3 on-policy algorithm whose policy carries an episode memory.

    Rollouts step the backbone with its memory state (kept across rollout boundaries, cleared
    by episode starts), store each step's memory record once (`agents.buffer`), and
    bootstrap truncated episodes from the terminal observation seen through the memory.
    Subclasses implement `train`: `rollout_buffer.segments` yields minibatches of stored
    segments, `_recompute` recomputes one with gradients and `_optimize` takes a
    guarded gradient step. `_act` decides what a rollout step takes and stores.

    :param segment_length: steps per training segment `T`; `T = 1` makes every step its own
        sample with its stored window, `T > 1` recomputes segments with gradients inside them.
        `n_steps` and `batch_size` must be multiples of it, and a `batch_size` given at most the rollout,
        `n_steps` × the env's copies (`check_batch_size`: the constructor and `learn` refuse a larger one); the
        default is cut to the rollout where that is smaller (`default_batch_size`).
    :param aux_coefs: coefficient of each auxiliary loss the backbone reports (e.g.
        `{"ponder_cost": 0.01}`); defaults to the backbone's `aux_loss_coefs`.
    :param normalize_advantage: standardise advantages per minibatch, dividing by their std or by the scale the run
        has sustained, whichever is larger (`agents.advantages`).
    :param advantage_scale_decay: `δ`, the factor by which that sustained scale may fall per rollout; 0 gives
        SB3's per-minibatch standardisation, which amplifies the value function's residue once a task is solved.
    :param minibatch_order: `shuffled` (SB3's, the default) or `by-env`: minibatches of whole
        envs, whose windows share their records, so each record is projected once for many
        samples (`policies.window.shared_windows`); its effect on learning is in docs/benchmarks/speed.md.
    :param uniform_kl_coef: `c_U` of the log-barrier `c_U·KL(U ‖ π)` added to the loss
        (`agents.exploration.uniform_kl`; finite action spaces). Its pull on an action
        whose probability collapsed does not vanish, unlike the entropy bonus's, so a decision
        settled early on a wrong or no-op action (T-Maze's junction) can still be revised.
        `None`: `DEFAULT_UNIFORM_KL` for finite action spaces, 0 for continuous ones.
    :param precision: a key of `PRECISIONS`, the compute dtype of the update's forward pass.
        With `bf16` the recomputed log-probabilities differ from the rollout's by bfloat16's
        rounding (`train/rollout_logp_gap`), not the float32 1e-5 of rollout equals training.

    SB3's gSDE options (`use_sde`, `sde_sample_freq`, as learner or policy options) are refused in one line
    (`__new__`).
    """

    policy: MemoryActorCriticPolicy
    rollout_buffer: MemoryRolloutBuffer | MemoryDictRolloutBuffer
    learner_policy_options: tuple[str, ...] = ()
    """policy options the learner sets from options of its own (saved with it), not from ``policy_kwargs``"""

    @checked(*WHOLE_SEGMENTS)
    def __init__(self, policy: str | type[MemoryActorCriticPolicy], env: Any, *, n_steps: Count, batch_size: Count,
                 segment_length: Count, aux_coefs: AuxCoefs, normalize_advantage: Switch,
                 uniform_kl_coef: UniformKLCoef, advantage_scale_decay: AdvantageScaleDecay = 0.999,
                 minibatch_order: MinibatchOrder = "shuffled", precision: Precision = "fp32", **kwargs: Any) -> None:
        Device().check("device", kwargs.get("device", "auto"))  # a missing accelerator is an error, not the CPU
        if not isinstance(policy, str) and not (isinstance(policy, type) and issubclass(policy, BasePolicy)):
            raise ConfigError(f"policy={shown(policy)}: expected 'MemoryPolicy' or a MemoryActorCriticPolicy class")
        if env is None and kwargs.get("_init_setup_model", True):
            raise ConfigError(f"env=None: expected an env id, a gymnasium env or a VecEnv (a saved model loads "
                              f"without one: {type(self).__name__}.load)")
        if env is not None and not isinstance(env, str | gym.Env | VecEnv):
            raise ConfigError(f"env={short(repr(env))}: expected an env id, a gymnasium env or a VecEnv")
        if (log := kwargs.get("tensorboard_log")) is not None:
            if not isinstance(log, str | os.PathLike):
                raise ConfigError(f"tensorboard_log={shown(log)}: expected a folder path, or None for no TensorBoard "
                                  "log")
            folder = nearest_existing(Path(log).absolute())
            if (error := creation_error(folder) if folder.is_dir() else NotADirectoryError(20, "Not a directory")):
                raise ConfigError(f"tensorboard_log={str(log)!r}: cannot write in {str(folder)!r}: [Errno "
                                  f"{error.errno}] {error.strerror}; expected a folder path, or None")
        Range(0, 2**32 - 1, integer=True, optional=True).check("seed", kwargs.get("seed"))  # numpy's seeds
        if kwargs.get("seed") is not None:
            kwargs["seed"] = int(kwargs["seed"])  # Python's `random.seed` takes no NumPy integer
        if not isinstance(policy, str) and not issubclass(policy, MemoryActorCriticPolicy):
            raise ConfigError(f"policy={policy.__name__}: {type(self).__name__} takes 'MemoryPolicy' or a subclass of "
                              "MemoryActorCriticPolicy")
        _check_learner_set(type(self).__name__, kwargs.get("policy_kwargs"), self.learner_policy_options)
        if isinstance(env, str):  # any spec the command line takes (engram ids, module:Class), not only gym.make's
            from envs import make_env, make_vec_env

            probe = make_env(env)
            try:
                _check_env_spaces(probe, env)  # before a VecEnv allocates buffers for a space it cannot hold
                _check_env_api(probe, kwargs.get("seed"), env)
            finally:
                probe.close()
            env = make_vec_env(env, 1, kwargs.get("seed"))
        if env is not None:
            _check_env_spaces(env)  # before SB3 asserts on (or wraps) a space no memory policy takes
        if isinstance(env, gym.Env):  # a user's env object: SB3 resets it again before learning
            _check_env_api(env, kwargs.get("seed"))
            env = _conformant(env)
        elif isinstance(env, VecEnv):
            _check_copies(env)
        self.precision = precision
        self.batch_size = batch_size
        self.segment_length = segment_length
        self.minibatch_order = minibatch_order
        self.aux_coefs = aux_coefs
        self.normalize_advantage = normalize_advantage
        self.advantage_scale_decay = advantage_scale_decay
        self.advantage_scale = 0.0
        """σ̄, the sustained advantage scale (:mod:`agents.advantages`), saved with the model"""
        self._advantage_stds: list[float] = []
        self.uniform_kl_coef = uniform_kl_coef
        self._last_state: PolicyState | None = None
        self.learner_class = type(self).__name__
        """saved with the model, so that loading it with another learner names both (:meth:`load`)"""
        super().__init__(policy, env, n_steps=n_steps, use_sde=False, sde_sample_freq=-1,
                         supported_action_spaces=(spaces.Box, spaces.Discrete, spaces.MultiDiscrete,
                                                  spaces.MultiBinary), **kwargs)
        if kwargs.get("_init_setup_model", True):  # `load` sets up later, and may take fewer envs to predict with
            if self._batch_size_by_default:
                self.batch_size = default_batch_size(self.batch_size, self.n_steps, self.n_envs)
            check_batch_size(self.batch_size, self.n_steps, self.n_envs)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Refuse SB3's gSDE options, learner or policy ones, with `policies.policy.GSDE_REFUSED`, and any other
        option the learner does not take (`ConfigError` naming the valid ones), rather than the `TypeError` of an
        unexpected keyword; notes whether `batch_size` is given (`default_batch_size` applies where it is not)."""
        policy_kwargs = kwargs.get("policy_kwargs")
        given = [f"{name}={kwargs[name]!r}" for name in GSDE_OPTIONS if name in kwargs]
        given += [f"policy_kwargs {name}={value!r}" for name, value in
                  (policy_kwargs.items() if isinstance(policy_kwargs, Mapping) else ()) if name in GSDE_OPTIONS]
        if given:
            raise ValueError(f"{', '.join(given)}: {GSDE_REFUSED}")
        cls._check_known(kwargs, "")
        learner = super().__new__(cls)
        try:
            given = inspect.signature(inspect.unwrap(cls.__init__)).bind_partial(learner, *args, **kwargs).arguments
        except TypeError:
            given = kwargs  # the constructor names the mistake
        learner._batch_size_by_default = "batch_size" not in given
        return learner

    @classmethod
    def _options(cls) -> list[str] | None:
        """The keyword options of the learner's constructor (`None` where it passes any on, `**kwargs`)."""
        parameters = inspect.signature(inspect.unwrap(cls.__init__)).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return None
        return [p.name for p in parameters if p.name not in ("self", "policy", "env") and not p.name.startswith("_")]

    @classmethod
    def _check_known(cls, options: Mapping[str, Any], where: str) -> None:
        """Refuse (`ConfigError`) an option the learner's constructor does not take, naming the valid ones."""
        valid = cls._options()
        if valid is not None and (unknown := [name for name in options if name not in valid
                                              and name not in ("policy", "env", "_init_setup_model")]):
            raise ConfigError(f"unknown option {unknown[0]!r} of {cls.__name__}{where}; valid options: "
                              + ", ".join(valid))

    @classmethod
    def _option_rules(cls) -> dict[str, Any]:
        """The rule of each option the learner's constructors annotate, its own over its bases'."""
        rules: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            if is_checked(init := vars(klass).get("__init__")):
                rules.update(option_rules(init))
        return rules

    @classmethod
    def _check_loaded_options(cls, file: ModelSource, custom_objects: Mapping[str, Any],
                              kwargs: Mapping[str, Any]) -> None:
        """The options `load` sets over the saved ones (`custom_objects`, keyword arguments), checked as the
        constructor checks them: each against its rule, and the relations with the saved options. A keyword
        argument must be an option; `custom_objects` may also replace SB3's other saved objects (`lr_schedule`)."""
        cls._check_known({name: value for name, value in kwargs.items() if name != "policy_kwargs"}, ".load")
        given = {**custom_objects, **kwargs}
        given.pop("policy_kwargs", None)
        rules = {**cls._option_rules(), "n_envs": Range(1, integer=True)}  # n_envs: SB3's, from the env
        for name, value in given.items():
            if name in rules and not (callable(value) and name not in kwargs):
                rules[name].check(name, value)  # a schedule in custom_objects: checked when `learn` starts
        saved = _saved_data(file)
        for name, value in saved.items():  # as saved, unless replaced: a value changed in the file since
            if name in rules and name not in given and not (isinstance(value, dict) and ":type:" in value):
                try:
                    rules[name].check(name, value)
                except ConfigError as error:
                    raise ConfigError(f"path={source_name(file)!r}: its saved {error}") from None
        merged = {**saved, **given}
        for relation in relations(cls):
            relation.check(merged)

    @classmethod
    def _check_env_fits(cls, file: ModelSource, env: Any) -> Any:
        """`env` for loading the model at `file` (an env spec made one copy, as the constructor makes it), refused
        with `ConfigError` naming the space where its observation or action space is not the model's (SB3's load
        would raise a bare ValueError), or where it is no env."""
        if isinstance(env, str):
            from envs import make_vec_env

            env = make_vec_env(env, 1)
        saved = saved_spaces(file)
        try:
            wrapped = cls._wrap_env(env, verbose=0, monitor_wrapper=False)
        except ValueError:
            raise ConfigError(f"env={shown(env)}: expected an env id, a gymnasium env or a VecEnv") from None
        if len(saved) < 2:
            return env  # SB3's load names what the file lacks
        _check_spaces_fit(wrapped, saved["observation_space"], saved["action_space"],
                          f"the model {source_name(file)!r}")
        return env

    def set_logger(self, logger: Logger) -> None:
        """SB3's `set_logger`, refusing (`ConfigError`) what is no SB3 `Logger` (`learn` would fail on it later)."""
        if not isinstance(logger, Logger):
            raise ConfigError(f"logger={shown(logger)}: expected an SB3 Logger "
                              "(stable_baselines3.common.logger.configure makes one)")
        super().set_logger(logger)

    def set_random_seed(self, seed: int | None = None) -> None:
        """SB3's `set_random_seed`, refusing (`ConfigError`) a seed numpy does not take."""
        Range(0, 2**32 - 1, integer=True, optional=True).check("seed", seed)
        super().set_random_seed(None if seed is None else int(seed))

    def set_env(self, env: Any, force_reset: bool = True) -> None:
        """SB3's `set_env` (`env` also an env spec, made with this model's number of copies), refusing with
        `ConfigError` what is no env, an env that breaks gymnasium's API, another number of copies than the
        model's, or other spaces (SB3 asserts or raises a bare ValueError)."""
        Flag().check("force_reset", force_reset)
        if isinstance(env, str):
            from envs import make_vec_env

            env = make_vec_env(env, self.n_envs)
        if not isinstance(env, gym.Env | VecEnv):
            raise ConfigError(f"env={short(repr(env))}: expected an env id, a gymnasium env or a VecEnv")
        if isinstance(env, gym.Env):
            _check_env_api(env, None)
            env = _conformant(env)
        else:
            _check_copies(env)
        wrapped = self._wrap_env(env, verbose=0)
        if wrapped.num_envs != self.n_envs:
            raise ConfigError(f"env: {wrapped.num_envs} cop{'y' if wrapped.num_envs == 1 else 'ies'}; this model "
                              f"steps {self.n_envs} (set_env keeps the number; {type(self).__name__}.load(path, env) "
                              "takes another)")
        _check_spaces_fit(wrapped, self.observation_space, self.action_space, "this model")
        super().set_env(wrapped, force_reset)
        if (kind := self._buffer_class(wrapped)) is not self.rollout_buffer_class:  # a torch VecEnv, or from one
            self.rollout_buffer_class = kind
            self.rollout_buffer = kind(self.n_steps, self.observation_space, self.action_space, device=self.device,
                                       gamma=self.gamma, gae_lambda=self.gae_lambda, n_envs=self.n_envs,
                                       **self.rollout_buffer_kwargs)

    def set_parameters(self, load_path_or_dict: Any, exact_match: bool = True, device: Any = "auto") -> None:
        """SB3's `set_parameters` from a saved model (its path, as `load` takes it, or an open binary file) or a
        dict as `get_parameters` gives it, refusing with `ConfigError` parameters that are not this policy's (SB3
        raises torch's RuntimeError or a KeyError)."""
        Flag().check("exact_match", exact_match)
        Device().check("device", device)
        given = short(repr(load_path_or_dict))
        if not isinstance(load_path_or_dict, dict | io.BufferedIOBase):
            load_path_or_dict = model_file(load_path_or_dict, "load_path_or_dict")
            given = repr(str(load_path_or_dict))
        try:
            super().set_parameters(load_path_or_dict, exact_match, device)
        except (RuntimeError, KeyError, ValueError, TypeError, AttributeError) as error:
            raise ConfigError(f"load_path_or_dict={given}: its parameters are not this "
                              f"policy's ({short(one_line(error), 160)}); expected a model saved with this policy, or "
                              "get_parameters()") from None

    def save(self, path: Any, exclude: Iterable[str] | None = None, include: Iterable[str] | None = None) -> None:
        """SB3's `save`, written whole or not at all (`envs.atomic.atomic_path`): a save that fails (a full disk)
        keeps the file it would replace and raises `WriteError` naming it. A path without a suffix gets `.zip`, and
        missing folders are made, as in SB3; an open binary file is written as SB3 writes it. A path under a file,
        or an `exclude`/`include` that is no list of names, is a `ConfigError`."""
        for name, names in (("exclude", exclude), ("include", include)):
            if names is not None and (isinstance(names, str | bytes) or not isinstance(names, Iterable)
                                      or not all(isinstance(item, str) for item in names)):
                raise ConfigError(f"{name}={shown(names)}: expected a list of the model's attribute names "
                                  "(strings), or None")
        if isinstance(path, io.BufferedIOBase):
            return super().save(path, exclude, include)
        if not isinstance(path, str | os.PathLike) or not str(path):
            raise ConfigError(f"path={shown(path)}: expected a file path or an open binary file")
        file = Path(path) if Path(path).suffix else Path(path).with_suffix(".zip")
        if file.is_symlink():  # written through the link, as SB3 writes: the link stays
            file = Path(os.path.realpath(file))
        if Path(path).is_dir() or file.is_dir() or str(path).endswith(os.sep):
            raise ConfigError(f"path={str(path)!r}: is a directory; expected a file path (such as "
                              f"{str(Path(path) / RUN_MODEL)!r} when no file is there)")
        folder = next(folder for folder in file.absolute().parents if os.path.lexists(folder))
        if not folder.is_dir():
            raise ConfigError(f"path={str(path)!r}: {str(folder)!r} is a file; expected a path in a directory")
        with made_folders(file.parent), atomic_path(file) as tmp:  # the folders made go again when the save fails
            super().save(tmp, exclude, include)
        return None

    @classmethod
    def load(cls, path: Any, env: Any = None, device: Any = "auto", custom_objects: dict[str, Any] | None = None,
             print_system_info: bool = False, force_reset: bool = True, **kwargs: Any) -> Any:
        """SB3's `load`, of the model `path` names (`model_file`: a saved `.zip`, or a run directory holding
        `model.zip`; SB3's open binary file too), refusing (`ConfigError` naming both classes) a model saved by
        another learner, and building the backbone with the options it was saved with
        (`policies.registry.saved_options`), whatever today's defaults are. `policy_kwargs`, as SB3 allows, must be
        the policy's saved options; both are compared with every default resolved
        (`MemoryActorCriticPolicy.resolve_kwargs`), so the options a model was trained with are accepted as given
        then. `env` may be an env spec, as the constructor's; one whose observation or action space is not the
        model's is refused here, naming the space (`_check_env_fits`). A bad argument is a `ConfigError` naming it."""
        Device().check("device", device)
        if str(device).startswith("cpu:"):
            device = "cpu"  # torch maps saved tensors to the CPU, not to an indexed one
        Flag().check("print_system_info", print_system_info)
        Flag().check("force_reset", force_reset)
        _check_load_mappings(custom_objects, kwargs)
        file, name = _model_source(path)
        saved, policy_class = saved_learner(file), saved_policy_class(file)
        if saved is not None and saved != cls.__name__:
            raise ConfigError(f"path={name!r}: holds a {saved} model, which {cls.__name__}.load cannot load: use "
                              f"{saved}.load (agents.ALGOS maps --algo names to the learners)")
        if isinstance(policy_class, type) and not issubclass(policy_class, MemoryActorCriticPolicy):
            raise ConfigError(f"path={name!r}: holds a model of the policy {policy_class.__name__}, not a memory "
                              f"learner's (MemoryPolicy): load it with the learner that saved it")
        cls._check_loaded_options(file, custom_objects or {}, kwargs)
        saved_spaces(file)  # each deserialises
        if env is not None:
            env = cls._check_env_fits(file, env)
        custom_objects = {"policy_kwargs": saved_policy_kwargs(file), **(custom_objects or {})}
        if "policy_kwargs" in kwargs and isinstance(policy_class, type):
            data = _saved_data(file)
            given = kwargs["policy_kwargs"]
            kwargs["policy_kwargs"] = policy_class.resolve_kwargs(
                {**given, **{name: data[name] for name in cls.learner_policy_options if name in data}})
            custom_objects["policy_kwargs"] = policy_class.resolve_kwargs(custom_objects["policy_kwargs"])
            _check_saved_policy_kwargs(file, given, kwargs["policy_kwargs"], custom_objects["policy_kwargs"])
        try:
            return super().load(file, env, device, custom_objects, print_system_info, force_reset, **kwargs)
        except ConfigError:
            raise
        except Exception as error:  # torch's, pickle's or SB3's words for an entry damaged or changed since
            raise ConfigError(f"path={name!r}: {source_name(file)!r} does not load ({type(error).__name__}: "
                              f"{short(one_line(error), 200)})") from None

    def _get_policy_from_name(self, policy_name: str) -> type[BasePolicy]:
        """The policy class of an alias; an unknown alias (SB3's `MlpPolicy`, `CnnPolicy`, sb3-contrib's
        `MlpLstmPolicy`) is refused naming `MemoryPolicy`, the policy every memory learner takes."""
        if policy_name not in self.policy_aliases:
            raise ValueError(f"policy {policy_name!r} is not one of {type(self).__name__}'s "
                             f"({', '.join(self.policy_aliases)}): memory learners take 'MemoryPolicy', which picks "
                             "SB3's features extractor for the observation space; with policy_kwargs={'backbone': "
                             "'lstm'} it is sb3-contrib's MlpLstmPolicy, with {'backbone': 'mlp'} a memoryless MLP "
                             "like SB3's MlpPolicy")
        return self.policy_aliases[policy_name]

    def _setup_model(self) -> None:
        self.rollout_buffer_class = self._buffer_class(self.env)
        with fitting_in_memory(f"n_steps={self.n_steps}, n_envs={self.n_envs}: the rollout buffer and the envs' "
                               "memory state", "choose a smaller n_steps or n_envs, or backbone_kwargs sizes"):
            super()._setup_model()
            self._last_state = self.policy.initial_state(self.n_envs)
        # saved with the model: every memory option, so that a later default cannot change how it loads
        self.policy_kwargs = type(self.policy).resolve_kwargs(self.policy_kwargs)
        check_aux_coefs(self.aux_coefs, self.policy)
        if self.aux_coefs is None:
            self.aux_coefs = dict(self.policy.backbone.aux_loss_coefs)
        if self.uniform_kl_coef is None:
            self.uniform_kl_coef = DEFAULT_UNIFORM_KL if isinstance(self.action_space, FINITE) else 0.0
        if self.uniform_kl_coef:
            check_action_space(self.action_space, "uniform_kl_coef")

    def _buffer_class(self, env: VecEnv | None) -> type[RolloutBuffer]:
        """The rollout buffer of `env`'s steps: on the device for a torch VecEnv, else NumPy's (a dict's for `Dict`
        observations)."""
        return (DeviceRolloutBuffer if getattr(env, "on_device", False)
                else MemoryDictRolloutBuffer if isinstance(self.observation_space, spaces.Dict)
                else MemoryRolloutBuffer)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_last_state", "_batch_size_by_default"]

    def learn(self, total_timesteps: int, callback: MaybeCallback = None, log_interval: int = 1,
              tb_log_name: str | None = None, reset_num_timesteps: bool = True, progress_bar: bool = False) -> Self:
        """SB3's `learn`, its TensorBoard run named after the learner (`MemoryPPO_1`) unless `tb_log_name` names
        one. The budget is a whole number of steps, `0 ≤ n ≤ 2³¹ − 1` as the command line takes it (SB3's float
        budgets such as `1e5` included); any other is refused (SB3 would train nothing, or for ever), and so is a
        `batch_size` larger than the rollout of the env it trains on (`check_batch_size`)."""
        whole = isinstance(total_timesteps, float) and total_timesteps.is_integer()
        Range(0, integer=True).check("total_timesteps", int(total_timesteps) if whole else total_timesteps)
        _check_callback(callback)
        Range(1, integer=True).check("log_interval", log_interval)
        if tb_log_name is not None:
            Text().check("tb_log_name", tb_log_name)
        for name, value in (("reset_num_timesteps", reset_num_timesteps), ("progress_bar", progress_bar)):
            Flag().check(name, value)
        if self.env is None:
            raise ConfigError(f"env=None: a model loaded without an env has none to learn on; pass "
                              f"{type(self).__name__}.load(path, env=...) or call set_env(env) first")
        check_batch_size(self.batch_size, self.n_steps, self.n_envs)  # the env may have changed since (`set_env`)
        for name, rule in self._option_rules().items():  # a schedule may have been set since (`load`'s custom_objects)
            if getattr(rule, "schedule", False):
                rule.check(name, getattr(self, name))
        return super().learn(total_timesteps, callback, log_interval, tb_log_name or type(self).__name__,
                             reset_num_timesteps, progress_bar)

    # -- rollouts ------------------------------------------------------------------------
    def collect_rollouts(self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer,
                         n_rollout_steps: int) -> bool:
        assert self._last_obs is not None and self._last_state is not None
        if getattr(env, "on_device", False):
            return self._collect_on_device(env, callback, n_rollout_steps)
        buffer = self.rollout_buffer
        self.policy.set_training_mode(False)
        buffer.reset()
        buffer.start_rollout(self._last_state)
        callback.on_rollout_start()
        n_steps = 0
        while n_steps < n_rollout_steps:
            check_finite_observation(self._last_obs, self.num_timesteps)
            with torch.inference_mode():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)
                starts = torch.as_tensor(self._last_episode_starts, device=self.device).bool()
                step = self.policy(obs_tensor, self._last_state, starts)
                values, state = step.values, step.state
                actions, log_probs, extras = self._act(step)  # now: callbacks below may run the policy again
            actions = actions.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(env_actions(actions, self.action_space))
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.reshape(-1, 1)
            rewards = self._bootstrap_truncated(rewards, dones, infos, state)
            buffer.add_records(self.policy.records(state))
            buffer.add_extras(extras)
            buffer.add(self._last_obs, actions, rewards, self._last_episode_starts, values, log_probs)
            self._last_obs, self._last_episode_starts, self._last_state = new_obs, dones, state
        with torch.inference_mode():
            last_values = self.policy.predict_values(obs_as_tensor(new_obs, self.device), self._last_state,
                                                     torch.as_tensor(dones, device=self.device).bool())
        buffer.compute_returns_and_advantage(last_values=last_values, dones=dones)
        self._track_advantage_scale(float(buffer.advantages.std()))
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _collect_on_device(self, env: Any, callback: BaseCallback, n_rollout_steps: int) -> bool:
        """`collect_rollouts` for an env that steps on the device (`envs.torch_tasks.TorchVecEnv`): observations,
        actions, rewards and dones stay tensors there, and the host reads only the rollout's finished episodes and
        its advantage std, once per rollout. A time limit's cut episodes are bootstrapped as in
        `_bootstrap_truncated`, with the values of every env's terminal observation masked by the cut."""
        buffer = self.rollout_buffer
        self.policy.set_training_mode(False)
        buffer.reset()
        buffer.start_rollout(self._last_state)
        callback.on_rollout_start()
        obs, state = self._last_obs, self._last_state
        starts = torch.as_tensor(self._last_episode_starts, device=self.device).bool()
        for _ in range(n_rollout_steps):
            with torch.inference_mode():
                step = self.policy(obs, state, starts)
                actions, log_probs, extras = self._act(step)
            with torch.no_grad():  # not inference mode: the env's own tensors stay ones its reset may change in place
                new_obs, rewards, dones, infos = env.step(actions)
            if env.can_truncate:
                with torch.inference_mode():
                    values = self.policy.predict_values(env.terminal_obs, step.state, torch.zeros_like(dones))
                rewards = rewards + self.gamma * values.flatten() * env.truncated
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            buffer.add_records(self.policy.records(step.state))
            buffer.add_extras(extras)
            buffer.add(obs, actions, rewards, starts, step.values, log_probs)
            obs, starts, state = new_obs, dones, step.state
        self._last_obs, self._last_episode_starts, self._last_state = obs, starts, state
        for episode in env.pop_episodes():
            self.ep_info_buffer.extend([episode])
            self.ep_success_buffer.append(episode["is_success"])
        with torch.inference_mode():
            last_values = self.policy.predict_values(obs, state, starts)
        buffer.compute_returns_and_advantage(last_values=last_values, dones=starts)
        self._track_advantage_scale(float(buffer.advantages.cpu().numpy().std()))
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _track_advantage_scale(self, std: float) -> None:
        """Update σ̄ with the advantage std of the rollout just collected, and log both."""
        self._advantage_stds = [*self._advantage_stds, std][-SUSTAINED_ROLLOUTS:]
        self.advantage_scale = sustained_scale(self.advantage_scale, self._advantage_stds, self.advantage_scale_decay)
        self.logger.record("train/advantage_std", std)
        self.logger.record("train/advantage_scale", self.advantage_scale)

    def _act(self, step: PolicyStep) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """The actions, their `log π_old` and the learner's extra fields; by default the policy's own sample."""
        return step.actions, step.log_prob, {}

    def _bootstrap_truncated(self, rewards: np.ndarray, dones: np.ndarray, infos: list[dict],
                             state: PolicyState) -> np.ndarray:
        """Add `γ V(terminal observation)` for episodes cut by a time limit (SB3 issue #633),
        the terminal observation being the next step of the episode's memory."""
        cut = [i for i, done in enumerate(dones) if done and infos[i].get("terminal_observation") is not None
               and infos[i].get("TimeLimit.truncated", False)]
        if not cut:
            return rewards
        terminal = [infos[i]["terminal_observation"] for i in cut]
        obs = ({k: np.stack([o[k] for o in terminal]) for k in terminal[0]} if isinstance(terminal[0], dict)
               else np.stack(terminal))
        index = torch.as_tensor(cut, device=self.device)
        sliced = PolicyState(*(None if s is None else s.rows(index) for s in state))
        with torch.inference_mode():
            obs_tensor = self.policy.obs_to_tensor(obs)[0]
            values = self.policy.predict_values(obs_tensor, sliced, torch.zeros(len(cut), dtype=torch.bool,
                                                                                device=self.device))
        rewards = rewards.astype(np.float32)  # a copy, and float: a VecEnv may stack integer rewards
        rewards[cut] += self.gamma * values.flatten().cpu().numpy()
        return rewards

    # -- training helpers -------------------------------------------------------------------
    def _recompute(self, batch: MemoryBatch, logs: defaultdict[str, list[Tensor | float]]) -> Recomputed:
        """Recompute a minibatch of segments with gradients.

        On the first minibatch of an update (before any gradient step) this logs
        `rollout_logp_gap = max |log π_recomputed − log π_rollout|`, "rollout equals training" in docs/design.md.
        """
        actions = batch.actions
        if isinstance(self.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        with self._update_precision():
            values, distribution, aux = self.policy.evaluate_segments(batch.observations, actions, batch.states,
                                                                      batch.episode_starts)
        log_prob = distribution.log_prob(actions)
        if "rollout_logp_gap" not in logs:
            logs["rollout_logp_gap"].append((log_prob - batch.old_log_prob).abs().max().detach())
        advantages = batch.advantages
        if self.normalize_advantage and len(advantages) > 1:
            advantages = normalized(advantages, self.advantage_scale)
        aux_loss = self._aux_loss(aux, logs)
        if self.uniform_kl_coef:
            barrier = uniform_kl(distribution).mean()
            logs["uniform_kl"].append(barrier.detach())
            aux_loss = aux_loss + self.uniform_kl_coef * barrier
        return Recomputed(actions, values, distribution, log_prob, advantages, aux_loss)

    def _update_precision(self) -> AbstractContextManager[Any]:
        """The autocast of the update's forward pass that `PRECISIONS` names (none for `fp32`)."""
        dtype = PRECISIONS[self.precision]
        return nullcontext() if dtype is None else torch.autocast(self.device.type, dtype=dtype)

    def _aux_loss(self, aux: Aux, logs: defaultdict[str, list[Tensor | float]]) -> Tensor | float:
        """Weighted sum of the backbone's auxiliary losses; every entry is logged as `train/aux/*`."""
        total: Tensor | float = 0.0
        assert self.aux_coefs is not None
        for name, value in aux.items():
            mean = value.mean()
            logs[f"aux/{name}"].append(mean.detach())
            coef = self.aux_coefs.get(name.removeprefix("vf/"), 0.0)
            if coef:
                total = total + coef * mean
        return total

    def _optimize(self, loss: Tensor, terms: dict[str, Tensor]) -> Tensor:
        """One guarded gradient step; returns the gradient norm before clipping, on the device.

        The guards read two flags per step: `loss + ‖g‖` before the step (finite unless either is) and the
        parameters' norms after it (`_check_parameters`, one fused norm); only a flag that is not finite
        has the loss terms, gradients or parameters searched for the cause."""
        self.policy.optimizer.zero_grad()
        loss.backward()
        parameters = self._optimized_parameters()
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
        if not torch.isfinite(loss.detach() + grad_norm):
            if not torch.isfinite(loss):
                if (problem := self._reward_problem()) is not None:
                    raise NonFiniteError(problem)
                named = {name: torch.as_tensor(value).detach() for name, value in terms.items()}
                raise NonFiniteError(f"non-finite loss ({loss.item()}) at update {self._n_updates}, "
                                     f"timestep {self.num_timesteps}: {non_finite_tensors(named)}")
            named = {n: p.grad for n, p in self.policy.named_parameters() if p.grad is not None}
            raise NonFiniteError(f"non-finite gradient norm at update {self._n_updates}, timestep "
                                 f"{self.num_timesteps}: {non_finite_tensors(named)}")
        torch.nn.utils.clip_grads_with_norm_(parameters, self.max_grad_norm, grad_norm)
        self.policy.optimizer.step()
        self._check_parameters()
        self.policy.invalidate_caches()
        return grad_norm.detach()

    def _reward_problem(self) -> str | None:
        """The first NaN or infinity among the rollout's rewards (the env's, which no update can mend), or `None`."""
        rewards = torch.as_tensor(self.rollout_buffer.rewards)  # [n_steps, n_envs]
        steps, copies = (~torch.isfinite(rewards)).nonzero(as_tuple=True)
        if not len(steps):
            return None
        step = int(steps[0])
        timestep = self.num_timesteps - (len(rewards) - 1 - step) * rewards.shape[1]
        return (f"non-finite reward ({rewards[step, copies[0]].item()}) from the env at timestep {timestep} (envs "
                f"{copies[steps == step].tolist()[:5]}): fix the env, or wrap it to clean its rewards")

    def _optimized_parameters(self) -> list[Tensor]:
        """The policy's parameters as its optimizer's groups hold them (cheaper than walking the modules)."""
        return [p for group in self.policy.optimizer.param_groups for p in group["params"]]

    def _check_parameters(self) -> None:
        """Raise where a parameter, or the norm over them, is not finite."""
        with torch.no_grad():  # one fused norm, not one recorded per parameter
            finite = torch.isfinite(torch.stack(torch._foreach_norm(self._optimized_parameters()))).all()
        if not finite:
            raise NonFiniteError(f"non-finite parameter norm after update {self._n_updates}, timestep "
                                 f"{self.num_timesteps}: {non_finite_tensors(dict(self.policy.named_parameters()))}")

    def _record_logs(self, logs: dict[str, list[Tensor | float]]) -> None:
        """Log the mean of every entry: the values stay on the device until this one read per update."""
        names = list(logs)
        means = torch.stack([torch.stack([torch.as_tensor(v, device=self.device) for v in logs[name]])
                             .double().mean() for name in names]).tolist() if names else []
        for name, mean in zip(names, means, strict=True):
            self.logger.record(f"train/{name}", mean)
