"""Env specs and the two factories: `make_vec_env` (SB3 VecEnv, for training) and `make_env` (one gymnasium env).

An env spec is one of:

* an id of engram's numpy-batched tasks (`ENV_IDS`, family `engram`); `make_vec_env` steps all
  copies in one `BatchedVecEnv`. They are also registered with gymnasium as `engram/<id>`;
* any id gymnasium's registry holds, once the modules of `gym_packages` are imported: `MiniGrid-*`
  ids through `make_minigrid` (family `minigrid`), `popgym-*` ids through `make_popgym` (`popgym`),
  Memory Gym ids when its optional package is installed (`memory_gym`), and every other id, such as
  `CartPole-v1` or one a user's module registers, through `gym.make` (`gymnasium`). gymnasium's
  `module:Id` form imports the module first;
* an entry point `module.path:EnvClass` or `module.path:make_fn` (family `entry_point`), called with
  the env kwargs; `max_episode_steps` adds a `TimeLimit` where the callable does not take it itself.

Copies of gymnasium envs and entry points are wrapped by `env_wrapper` (`envs.wrappers`) and vectorised
with SB3's DummyVecEnv, or SubprocVecEnv (`vec_env="subproc"`, one process per copy; engram's tasks
then run as single copies too). Every such `make_vec_env` result is wrapped in SB3's `VecMonitor`, and copy i
of a run seeded s uses `copy_seeds(s, n)[i]`. With `vec_env="torch"`, engram's tasks that have a torch twin
(`envs.torch_tasks`) run as tensors on the learner's device, seeded alike.

Bad input to the factories and helpers is a `envs.rules.ConfigError` (a `ValueError`) whose one-line message
names the argument, the value and what is valid: `n_envs=0: expected an integer >= 1`, `device='cuda': CUDA is
not available on this machine; ...`, `gym_packages='math': expected a list, ...`; an env that fails to build with
the kwargs given is named with them and the cause, as the command line names it.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import math
import numbers
import re
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

from envs.adapters import MEMORY_GYM_IDS, import_memory_gym, make_memory_gym, make_minigrid, make_popgym
from envs.batched import RENDER_MODES, BatchedTask, check_seed
from envs.conformance import Conformant, EndsItsProcess, check_render_mode, endless_problem
from envs.count_recall import CountRecall
from envs.imports import ImportPathError, cause, import_module, import_packages, load_object
from envs.memory_chain import MemoryChain
from envs.repeat import RepeatFirst, RepeatPrevious
from envs.rules import ConfigError, Device, OneOf, Range, Text, one_line, shown
from envs.spaces import observation_space_problem
from envs.tmaze import ActiveTMaze, PassiveTMaze
from envs.wrappers import EnvWrapperError, WrapperSpec, apply_wrappers, parse_env_wrapper

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

ENV_IDS: dict[str, type[BatchedTask]] = {
    "TMaze-v0": PassiveTMaze,
    "TMazeActive-v0": ActiveTMaze,
    "RepeatFirst-v0": RepeatFirst,
    "RepeatPrevious-v0": RepeatPrevious,
    "CountRecall-v0": CountRecall,
    "MemoryChain-v0": MemoryChain,
}
"""engram's own ids and their numpy-batched task classes."""

GYM_NAMESPACE = "engram"
FAMILIES: tuple[str, ...] = ("engram", "minigrid", "popgym", "memory_gym", "gymnasium")
"""the families of ids `list_env_ids` lists; entry points (``module:Class``) are specs of family ``entry_point``"""
VEC_ENVS: tuple[str, ...] = ("dummy", "subproc", "torch")
"""``dummy``: every copy in this process (engram's tasks numpy-batched); ``subproc``: a process per copy; ``torch``:
engram's tasks as torch tensors on the learner's device (`envs.torch_tasks`), so a rollout never leaves it"""
TIME_LIMIT = "max_episode_steps"
ENV_SPEC = Text(note="an env id, or an entry point module.path:EnvClass; list_env_ids() lists the ids")
"""the rule of an env spec's type (what it names is checked by `env_family`)"""
N_ENVS = Range(1, integer=True)


class EnvKwargsError(ConfigError, TypeError):
    """A keyword argument the env does not take; a `TypeError` too, as Python calls an unexpected keyword."""


def _register_with_gymnasium() -> None:
    """`gym.make("engram/TMaze-v0", length=...)` gives the single-copy view."""
    for env_id, task in ENV_IDS.items():
        gym.register(f"{GYM_NAMESPACE}/{env_id}", entry_point=task.as_env)


_register_with_gymnasium()


def _import_adapted_packages(env_id: str = "") -> None:
    """Import MiniGrid and POPGym, whose ids gymnasium knows only then (all of them, or the one `env_id` needs;
    MiniGrid also registers BabyAI's `BabyAI-*`)."""
    if not env_id or env_id.startswith(("MiniGrid-", "BabyAI-")):
        import minigrid  # noqa: F401
    if not env_id or env_id.startswith("popgym-"):
        import popgym  # noqa: F401


def _registered(prefix: str) -> list[str]:
    return sorted(env_id for env_id in gym.registry if env_id.startswith(prefix))


def _other_gymnasium_ids() -> list[str]:
    _import_adapted_packages()
    adapted = ("MiniGrid-", "popgym-", f"{GYM_NAMESPACE}/")
    return sorted(env_id for env_id in gym.registry
                  if not env_id.startswith(adapted) and env_id not in MEMORY_GYM_IDS)


def list_env_ids(family: str | None = None) -> list[str]:
    """Every id `make_vec_env` accepts, or those of one family of `FAMILIES` (`gymnasium`: every id in
    gymnasium's registry outside the other families, including those registered by modules imported so far)."""
    lists: dict[str, Callable[[], list[str]]] = {
        "engram": lambda: list(ENV_IDS),
        "minigrid": lambda: (_import_adapted_packages("MiniGrid-"), _registered("MiniGrid-"))[1],
        "popgym": lambda: (_import_adapted_packages("popgym-"), _registered("popgym-"))[1],
        "memory_gym": lambda: list(MEMORY_GYM_IDS),
        "gymnasium": _other_gymnasium_ids,
    }
    if family is None:
        return [env_id for name in FAMILIES for env_id in lists[name]()]
    if not isinstance(family, str) or family not in lists:
        raise ConfigError(f"family={shown(family)}: expected one of the families {', '.join(FAMILIES)} "
                          "(or None for all of them)")
    return lists[family]()


def _unknown_id_message(env_id: str, module: str | None = None) -> str:
    """One line: the unknown id, the closest registered ones, and the forms an env spec takes."""
    close = difflib.get_close_matches(env_id, list_env_ids(), n=3, cutoff=0.7)
    memory_ids = [i for i in list_env_ids("minigrid") if i.startswith("MiniGrid-Memory")]
    head = (f"module {module!r} has no attribute {env_id!r}, and gymnasium's registry holds no id {env_id!r}"
            if module else f"Unknown env id {env_id!r}: gymnasium's registry does not hold it")
    if versions := sorted((i for i in gym.registry if re.fullmatch(re.escape(env_id) + r"-v\d+", i)),
                          key=lambda i: int(i.rsplit("-v", 1)[1])):
        head += f" without a version, only as {', '.join(versions)}: name one, so that the run records which"
        close = []
    return (head + "." + (f" Did you mean {', '.join(close)}?" if close else "")
            + f" An env is one of engram's tasks ({', '.join(ENV_IDS)}), any registered gymnasium id (MiniGrid-*, "
            f"e.g. {', '.join(memory_ids[:2])}, ...; popgym-<Task><Easy|Medium|Hard>-v0; CartPole-v1; ids that "
            "--gym-packages modules register), or an entry point module.path:EnvClass; `list envs` lists the ids")


def env_family(env_id: str) -> str:
    """The family of the spec `env_id` (`engram`, `minigrid`, `popgym`, `memory_gym`, `gymnasium` or
    `entry_point`); `ConfigError` naming it and the closest registered ids if it names nothing."""
    ENV_SPEC.check("env_id", env_id)
    if env_id in ENV_IDS:
        return "engram"
    if env_id in MEMORY_GYM_IDS:
        return "memory_gym"
    if ":" in env_id and _is_entry_point(env_id):
        return "entry_point"
    _import_adapted_packages(env_id)
    registered_id = _registered_id(env_id)
    if registered_id not in gym.registry:
        raise ConfigError(_unknown_id_message(registered_id, env_id.split(":", 1)[0] if ":" in env_id else None))
    return ("minigrid" if registered_id.startswith("MiniGrid-") else "popgym" if registered_id.startswith("popgym-")
            else "gymnasium")


def _is_entry_point(spec: str) -> bool:
    """Whether `module:Name` names an attribute of the module (else it is gymnasium's `module:Id` form)."""
    module_name, name = spec.split(":", 1)
    target = import_module(module_name)
    for part in name.split("."):
        if not part.isidentifier() or not hasattr(target, part):
            return False
        target = getattr(target, part)
    return True


def _registered_id(env_id: str) -> str:
    """The registry id of `env_id`, after importing the module of gymnasium's `module:Id` form."""
    if ":" in env_id:
        module_name, name = env_id.split(":", 1)
        import_module(module_name)
        return name
    return env_id


MINIGRID_SET_BY_TASK = ("mission_space", "grid_size", "width", "height", "render_mode")
"""`MiniGridEnv` keywords a MiniGrid task sets itself (from its `size`), or the adapter does, not the user"""


class Keywords(NamedTuple):
    """The keyword arguments a callable takes: named ones with their defaults (`None` where the signature gives
    none), and whether it also takes any other name (`**kwargs`, checked only when it is called)."""

    named: dict[str, Any]
    open: bool = False
    integers: frozenset[str] = frozenset()
    """the names annotated `int`: a whole number only (an unannotated int default may hold a float too, as
    MountainCar's `goal_velocity=0`)"""


def _keywords(fn: Callable[..., Any], skip: tuple[str, ...] = ()) -> Keywords:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or extension without a signature
        return Keywords({}, open=True)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = {p.name: None if p.default is inspect.Parameter.empty else p.default
             for p in parameters if p.kind in kinds and p.name not in skip}
    integers = frozenset(p.name for p in parameters if p.name in named and p.annotation in (int, "int"))
    return Keywords(named, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters), integers)


def _entry_point(spec: str) -> Callable[..., Any]:
    """The class or function `module.path:Name` names; `ConfigError` if it is neither an env class nor callable."""
    target = load_object(spec)
    if inspect.isclass(target) and not issubclass(target, gym.Env):
        raise ConfigError(f"{spec!r} is the class {target.__name__}, which is not a gymnasium.Env subclass")
    if not callable(target):
        raise ConfigError(f"{spec!r} is a {type(target).__name__}, not an env class or a function returning an env")
    return target


def keywords(env_id: str) -> Keywords:
    """The keyword arguments `make_env` / `make_vec_env` accept for `env_id`."""
    family = env_family(env_id)
    if family == "engram":
        own = _keywords(ENV_IDS[env_id], skip=("n_copies",))
        return Keywords({**own.named, "render_mode": None}, integers=own.integers)
    if family == "entry_point":
        own = _keywords(_entry_point(env_id))
        return Keywords({**own.named, TIME_LIMIT: own.named.get(TIME_LIMIT)}, own.open, own.integers)
    if family == "memory_gym":
        import_memory_gym(env_id)
    if family == "minigrid":
        import minigrid  # noqa: F401  (registers the MiniGrid-* and BabyAI-* ids)
    spec = gym.spec(_registered_id(env_id))
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    own = _keywords(creator, skip=("render_mode",))
    factory = {"memory_gym": make_memory_gym, "popgym": make_popgym, "minigrid": make_minigrid}.get(family)
    forwarded = ({TIME_LIMIT: spec.max_episode_steps, "render_mode": None} if factory is None
                 else _keywords(factory, skip=("env_id",)).named)
    if family == "minigrid" and own.open:  # a MiniGrid task hands its **kwargs to MiniGridEnv, whose names are known
        from minigrid.minigrid_env import MiniGridEnv

        base = _keywords(MiniGridEnv, skip=(*MINIGRID_SET_BY_TASK, *passed_on(creator)))
        own = Keywords({**{name: value for name, value in base.named.items() if name not in forwarded}, **own.named},
                       integers=base.integers | own.integers)
    return Keywords({**forwarded, **own.named, **spec.kwargs}, own.open, own.integers)


@functools.cache
def passed_on(cls: Any) -> frozenset[str]:
    """The keywords `cls.__init__` itself gives its base's `__init__` (read from its source): a user cannot give
    them too (MiniGrid's Memory task sets `see_through_walls`)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    except (OSError, TypeError, SyntaxError):  # no source to read
        return frozenset()
    return frozenset(keyword.arg for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"
                     for keyword in node.keywords if keyword.arg is not None)


def kwarg_defaults(env_id: str) -> dict[str, Any]:
    """The named keyword arguments `make_env` / `make_vec_env` accept for `env_id`, with their defaults."""
    return keywords(env_id).named


def env_kwargs(env_id: str) -> list[str]:
    """The named keyword arguments `make_env` / `make_vec_env` accept for `env_id` (`**kwargs`: see `keywords`)."""
    return list(kwarg_defaults(env_id))


def check_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """`TypeError` naming every keyword argument `env_id` does not take, with the closest valid one."""
    accepted = keywords(env_id)
    valid = list(accepted.named)
    unknown = [] if accepted.open else [name for name in kwargs if name not in valid]
    if unknown:
        hints = []
        by_lower = {name.lower(): name for name in valid}
        for name in unknown:
            close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {by_lower[close[0]]!r}?)" if close else ""))
        raise TypeError(f"{env_id} got unexpected keyword argument(s) {', '.join(hints)}; "
                        f"valid keyword arguments: {', '.join(valid) or '(none)'}")


def declared_render_modes(env_id: str, family: str) -> list[str] | None:
    """The render modes the class of `env_id` declares (`metadata["render_modes"]`) before any env is made, or `None`
    where only the env made tells (an adapter's wrappers, a function returning an env)."""
    if family == "engram":
        return list(RENDER_MODES)  # every task renders through `envs.batched.SingleCopyEnv`
    if family == "entry_point":
        target: Any = _entry_point(env_id)
    elif family == "gymnasium":
        entry = gym.spec(_registered_id(env_id)).entry_point
        target = load_env_creator(entry) if isinstance(entry, str) else entry
    else:
        return None
    modes = getattr(target, "metadata", {}).get("render_modes") if inspect.isclass(target) else None
    return None if modes is None else list(modes)


def typed_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with a whole number for an int keyword (or `max_episode_steps`) as that int (`4.0` → `4`, as an option
    is read); `ConfigError` naming a keyword argument whose value is not of its default's type: true or false for a
    bool, an integer for one annotated `int` (`max_episode_steps`: one >= 1, or null), a finite number for a float
    or an unannotated int (a keyword whose default is anything else takes any value but NaN, and no text that reads
    as NaN or an infinity, as `float()` would)."""
    given, typed = keywords(env_id), dict(kwargs)
    for name, value in kwargs.items():
        default = given.named.get(name)
        number = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
        integer = name in given.integers or name == TIME_LIMIT  # gymnasium's own int keyword, default None
        if (integer or type(default) is int) and number and math.isfinite(value) and float(value).is_integer():
            value = typed[name] = int(value)
        if (expected := _expected(name, default, value, integer)) is not None:
            raise ConfigError(f"env_kwargs.{name}={shown(value)}: expected {expected}")
    return typed


def _expected(name: str, default: Any, value: Any, integer: bool) -> str | None:
    """What a keyword argument `name` (its default `default`; `integer`: annotated `int`) expects where `value` is
    not that, else `None`."""
    if isinstance(default, bool):
        return None if isinstance(value, bool | np.bool_) else "true or false"
    number = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if name == TIME_LIMIT:
        return None if value is None or (isinstance(value, numbers.Integral) and number and value >= 1) else (
            "an integer >= 1 (or null: the registered limit)")
    if integer and value is not None and not (number and isinstance(value, numbers.Integral)):
        return "an integer"
    if isinstance(default, float | int):
        return "a number" if not number else None if math.isfinite(value) else "a finite number"
    if number and math.isnan(value):
        return "a number, not NaN"
    return "a finite number" if isinstance(value, str) and _non_finite_text(value) else None


def _non_finite_text(text: str) -> bool:
    """Whether `text` reads as NaN or an infinity (`nan`, `-inf`, `1e999`), which an env's `float()` would take."""
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return False


def _from_entry_point(spec: str, env_kwargs: dict[str, Any]) -> gym.Env:
    target = _entry_point(spec)
    kwargs = dict(env_kwargs)
    limit = kwargs.pop(TIME_LIMIT, None) if TIME_LIMIT not in _keywords(target).named else None
    env = target(**kwargs)
    if not isinstance(env, gym.Env):
        raise ConfigError(f"{spec!r} returned a {type(env).__name__}, not a gymnasium env")
    return env if limit is None else gym.wrappers.TimeLimit(env, limit)


def _checked_spec(env_id: str, env_wrapper: Any, gym_packages: Sequence[str],
                  env_kwargs: dict[str, Any]) -> tuple[str, list[WrapperSpec], dict[str, Any]]:
    """The family of `env_id`, the parsed `env_wrapper` and the `typed_kwargs`, after importing `gym_packages`;
    `ConfigError`
    naming the argument that is wrong (`EnvKwargsError` for a keyword argument the env does not take); the
    `ImportError` of an optional package the env needs is left as it is (how to install it is its message)."""
    try:
        import_packages(gym_packages)
    except ImportPathError as error:
        raise ConfigError(f"gym_packages={shown(gym_packages)}: {error}") from None
    wrappers = parse_env_wrapper(env_wrapper)
    family = env_family(env_id)
    try:
        check_kwargs(env_id, env_kwargs)
    except TypeError as error:
        raise EnvKwargsError(f"env_kwargs: {one_line(error)}") from None
    typed = typed_kwargs(env_id, env_kwargs)
    check_render_mode(env_kwargs.get("render_mode"), declared_render_modes(env_id, family))
    return family, wrappers, typed


@contextmanager
def _building(env_id: str, env_kwargs: dict[str, Any]) -> Iterator[None]:
    """Turn the failure of an env's own constructor (a value it refuses) into `ConfigError` naming the spec, the
    kwargs given and the cause, as the command line names it; an engram task's own `ConfigError` names the keyword
    already, as `env_kwargs.<key>`."""
    try:
        yield
    except ConfigError as error:
        if env_id in ENV_IDS:
            raise ConfigError(f"env_kwargs.{error}") from None
        raise
    except Exception as error:  # the env's own check of its kwargs, whatever it raises
        given = " ".join(f"{k}={shown(v)}" for k, v in env_kwargs.items()) or "(no kwargs)"
        raise ConfigError(f"env={shown(env_id)} with env_kwargs {given} does not build ({cause(error)})") from error


warnings.filterwarnings("ignore", "(?s).*render_mode.*not in the possible render_modes")
"""gymnasium's warning of a render mode an env does not list, which `make_env` refuses in one line; set once here,
as a `catch_warnings` around each make would show the env's other warnings (a deprecated id) at every copy"""


def make_env(env_id: str, *, env_wrapper: Any = None, gym_packages: Sequence[str] = (), **env_kwargs: Any) -> gym.Env:
    """One env of the spec `env_id` (an engram task's single copy, an adapted MiniGrid or POPGym env, a gymnasium
    id or an entry point), wrapped by `env_wrapper` after importing `gym_packages`, and then by `Conformant`, which
    checks every reset and step against gymnasium's API (`EnvBreakError`); `ConfigError` naming a bad
    argument (`EnvKwargsError`, also a `TypeError`, for an unknown keyword; a `render_mode` the env does not list,
    `envs.conformance.check_render_mode`)."""
    family, wrappers, env_kwargs = _checked_spec(env_id, env_wrapper, gym_packages, env_kwargs)
    with _building(env_id, env_kwargs):
        env = _make_one(env_id, family, env_kwargs)
    try:
        check_render_mode(env_kwargs.get("render_mode"), (env.metadata or {}).get("render_modes") or [])
    except ConfigError:
        env.close()
        raise
    try:
        return Conformant(apply_wrappers(env, wrappers), env_id)
    except EnvWrapperError as error:
        env.close()
        if family != "minigrid":
            raise
        raise EnvWrapperError(f"{error}; engram's MiniGrid adapter encodes the observation (obs: symbolic or rgb) "
                              "before env_wrapper runs: a wrapper of MiniGrid's own goes on the env class as an entry "
                              f"point, --env {gym.spec(env_id).entry_point}") from None


def _make_one(env_id: str, family: str, env_kwargs: dict[str, Any]) -> gym.Env:
    if family == "engram":
        # Built directly rather than by gym.make, which would take max_episode_steps for its own TimeLimit.
        env: gym.Env = ENV_IDS[env_id].as_env(**env_kwargs)
        env.spec = dataclasses.replace(gym.spec(f"{GYM_NAMESPACE}/{env_id}"), kwargs=dict(env_kwargs))
        return env
    if family == "entry_point":
        return _from_entry_point(env_id, env_kwargs)
    if family == "gymnasium":
        return gym.make(_registered_id(env_id), **env_kwargs)
    factory = {"minigrid": make_minigrid, "popgym": make_popgym, "memory_gym": make_memory_gym}[family]
    return factory(env_id, **env_kwargs)


@dataclass(frozen=True)
class EnvFactory:
    """A picklable `() -> gym.Env` for one copy (SubprocVecEnv sends it to the copy's process)."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_wrapper: Any = None
    gym_packages: tuple[str, ...] = ()
    own_process: bool = False
    """a copy of SubprocVecEnv: a break of gymnasium's API ends its process in one line (`EndsItsProcess`)"""

    def __call__(self) -> gym.Env:
        env = make_env(self.env_id, env_wrapper=self.env_wrapper, gym_packages=self.gym_packages, **self.env_kwargs)
        if (problem := observation_space_problem(env.observation_space)) is not None:  # before SB3's VecEnv fails
            env.close()
            raise ConfigError(f"env={self.env_id!r}: {problem}")
        return EndsItsProcess(env) if self.own_process else env


def make_vec_env(env_id: str, n_envs: int = 1, seed: int | None = None, *, env_wrapper: Any = None,
                 vec_env: str = "dummy", device: Any = "cpu", gym_packages: Sequence[str] = (),
                 **env_kwargs: Any) -> VecEnv:
    """An SB3 VecEnv of `n_envs` copies of the spec `env_id`, wrapped in `VecMonitor` (`EpisodeMonitor`, which
    keeps the reset infos).

    engram ids give the numpy-batched `BatchedVecEnv` (unless `env_wrapper` or `vec_env="subproc"` asks for
    single copies); other specs a DummyVecEnv (`vec_env="subproc"`: a SubprocVecEnv, after one copy is built in
    this process so that a failure is raised here) of `make_env` envs, each wrapped by `env_wrapper`. With `seed`,
    copy i is seeded with `copy_seeds(seed, n_envs)[i]` at the first reset (SB3 semantics; `venv.seed(s)`
    re-seeds at the next reset). `vec_env="torch"` gives the `TorchVecEnv` of an engram task on `device` (`auto`,
    `cpu`, `cuda`, `cuda:N`, a `torch.device`: one this machine has; its episodes kept by the env itself).
    `ConfigError` naming the argument for a bad one, as `make_env`, and naming a gymnasium id without a time limit
    whose episodes are not shown to end (`check_time_limit`) unless `max_episode_steps` or a `TimeLimit` wrapper
    gives it one.
    """
    N_ENVS.check("n_envs", n_envs)
    check_seed(seed)
    OneOf(lambda: VEC_ENVS).check("vec_env", vec_env)
    Device().check("device", device)
    family, wrappers, env_kwargs = _checked_spec(env_id, env_wrapper, gym_packages, env_kwargs)
    if vec_env == "torch":
        return _make_torch_vec_env(env_id, n_envs, seed, wrappers, device, env_kwargs)
    from envs.vec_env import BatchedVecEnv, EpisodeMonitor, SeededDummyVecEnv, SeededSubprocVecEnv

    venv: VecEnv
    if family == "engram" and not wrappers and vec_env == "dummy":
        kwargs = dict(env_kwargs)
        render_mode = kwargs.pop("render_mode", None)
        with _building(env_id, env_kwargs):
            venv = BatchedVecEnv(ENV_IDS[env_id](n_copies=n_envs, **kwargs), render_mode=render_mode)
    else:
        factory = EnvFactory(env_id, env_kwargs, _plain_wrappers(wrappers), tuple(gym_packages),
                             own_process=vec_env == "subproc")
        if vec_env == "subproc":
            factory().close()  # a copy that fails fails here, named, rather than as a broken pipe to its process
        vectorise = SeededSubprocVecEnv if vec_env == "subproc" else SeededDummyVecEnv
        venv = vectorise([factory] * n_envs)
        try:
            check_time_limit(env_id, venv)  # the probe's resets take no seed: `seed` is set below
        except ConfigError:
            venv.close()
            raise
    if seed is not None:
        venv.seed(seed)
    return EpisodeMonitor(venv)


def _make_torch_vec_env(env_id: str, n_envs: int, seed: int | None, wrappers: list[WrapperSpec], device: Any,
                        env_kwargs: dict[str, Any]) -> VecEnv:
    """The `TorchVecEnv` of the engram task `env_id` on `device` (`auto`: CUDA if this machine has it)."""
    from stable_baselines3.common.utils import get_device

    from envs.torch_tasks import TORCH_TASKS, make_torch_vec_env

    if env_id not in TORCH_TASKS:
        raise ConfigError(f"vec_env='torch': env={env_id!r} has no torch implementation; expected one of "
                          f"{', '.join(TORCH_TASKS)} (or vec_env dummy or subproc)")
    if wrappers:
        raise ConfigError("vec_env='torch': the torch tasks take no env_wrapper (or vec_env dummy or subproc)")
    with _building(env_id, env_kwargs):
        return make_torch_vec_env(env_id, n_envs, seed, device=get_device(device), **env_kwargs)


def check_time_limit(env_id: str, venv: VecEnv) -> None:
    """`ConfigError` naming `env_id` where its copies in `venv` have no time limit though their family does not
    end episodes by itself, and its episodes are not shown to end (`envs.conformance.endless_problem`, which steps
    `venv`): a gymnasium id registered without `max_episode_steps` and given none (by env_kwargs or a `TimeLimit`
    env_wrapper), under which a repeated action ends no episode (CliffWalking; Blackjack's end whatever is played).
    A policy that never reaches a terminal state would then never end an episode, and an evaluation, which plays
    whole episodes, would never finish. engram's, MiniGrid's, POPGym's and Memory Gym's tasks end their episodes
    themselves; an entry point's env is trusted to. An evaluation whose episodes do not end all the same stops
    (`experiments.evaluation.StalledEvaluationError`)."""
    if env_family(env_id) != "gymnasium" or all(venv.env_is_wrapped(gym.wrappers.TimeLimit)):
        return
    if (problem := endless_problem(venv)) is None:
        return
    raise ConfigError(f"env={shown(env_id)} has no time limit (gymnasium registers it without {TIME_LIMIT}) and "
                      f"its episodes are not shown to end ({problem}): an episode that reaches no terminal state "
                      "would never end, nor would the evaluation after training; set one with env_kwargs "
                      f"{TIME_LIMIT}=N (--env-kwargs {TIME_LIMIT}=N) or a gymnasium.wrappers.TimeLimit env_wrapper")


def _plain_wrappers(wrappers: list[WrapperSpec]) -> list[dict[str, dict[str, Any]]] | None:
    return [{spec.path: spec.kwargs} for spec in wrappers] or None


