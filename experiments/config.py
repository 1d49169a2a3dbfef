"""Run configuration: defaults < the env's hyper-parameter entry < YAML file < command-line flags < `-p key=value`
overrides.

A YAML file holds the run settings (the fields of `RunConfig`) and, under a key named
after an algorithm (`ppo`) or a backbone (`gtrxl`), that component's options, so one file
can carry options for several backbones and `--backbone` picks one::

    algo: ppo
    backbone: gtrxl
    env: TMaze-v0
    env_kwargs: {length: 10}
    ppo: {n_steps: 128, learning_rate: 3.0e-4}
    gtrxl: {memory_length: 32, d_model: 64}
    lstm: {hidden_size: 64}

A run keeps the sections of its own learner and backbone from a file (and from its hyper-parameter entry, which is
such a menu too): its `config.yaml` records what it uses. A section given as a flag or a `-p` override is kept, and
refused when no run of the command uses it (`experiments.validation.check_sections_used`).

Every key and value is checked; a bad one raises `ConfigError` naming it and the
valid choices. Values are parsed safely (`ast.literal_eval` / YAML), never evaluated.

Under all of them lies the entry of the learner's hyper-parameter file that matches the run's env
(`configs/hyperparams/ppo.yml`; `experiments.hyperparams`), unless the `hyperparams` setting turns it off.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import numbers
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.imports import MODULE_NAMES
from envs.rules import (
    ConfigError,
    Device,
    Entries,
    Flag,
    OneOf,
    Range,
    Rule,
    Text,
    is_linear_schedule,
    linear_schedule,
    shown,
)
from experiments import strict_yaml
from experiments.rules import Directory, EnvWrappers, SavedModel, Threads, beyond_float

POLICY_OPTIONS = {"net_arch": None, "activation_fn": "tanh", "ortho_init": True, "share_backbone": True,
                  "features_extractor_class": None, "features_extractor_kwargs": None,
                  "share_features_extractor": True, "log_std_init": 0.0, "normalize_images": True,
                  "lstm_hidden_size": None, "n_lstm_layers": None, "enable_critic_lstm": None, "shared_lstm": None}
"""the ``policy`` options a configuration sets, with their defaults as a configuration file writes them (their
rules are in the policy's signature, :class:`policies.policy.MemoryActorCriticPolicy`)"""


def registry(module: str, name: str) -> Callable[[], Any]:
    """The registry `module.name` (`agents.ALGOS`), imported when first read (a config is read without torch)."""
    return lambda: getattr(importlib.import_module(module), name)


algos, backbones = registry("agents", "ALGOS"), registry("policies.registry", "BACKBONES")


def _rule(rule: Rule, doc: str, **kwargs: Any) -> Any:
    """A field whose valid values `rule` declares and whose `--help` text is `doc`."""
    return field(metadata={"rule": rule, "doc": doc}, **kwargs)


DEFAULT_REPS = 2000
"""bootstrap resamples of a study's report (``--reps``)"""
REPS = Range(1, 50_000, integer=True, note="bootstrap resamples; each holds a copy of the scores")
"""the rule of ``--reps``: rliable's bootstrap holds every resample at once (2**31 of them would need 48 GiB)"""
SEED_LIMIT = 2**32 - 1 - 10_000
"""the largest seed: numpy seeds are below 2**32, and evaluation envs are seeded
``seed + experiments.training.EVAL_SEED_OFFSET`` (10,000)"""
COUNT = Range(1, integer=True)


@dataclass
class RunConfig:
    """Everything one training run needs. Each field's metadata holds its `rule`, which declares its valid values
    (`envs.rules`, `experiments.rules`), and its `doc`, the `--help` text."""

    algo: str = _rule(OneOf(algos), default="ppo", doc="learner: a key of ``agents.ALGOS``")
    backbone: str = _rule(OneOf(backbones), default="gtrxl", doc=(
        "memory backbone: a key of ``policies.BACKBONES``"))
    env: str = _rule(Text(), default="TMaze-v0", doc=(
        "environment: an engram task, any gymnasium id (MiniGrid-*, popgym-*, CartPole-v1, ids registered by "
        "gym_packages), or an entry point module.path:EnvClass"))
    env_kwargs: dict[str, Any] = _rule(Entries(optional=False), default_factory=dict, doc=(
        "keyword arguments of the environment"))
    gym_packages: list[str] = _rule(MODULE_NAMES, default_factory=list, doc=(
        "modules imported before the environment is made, e.g. ones that register gymnasium ids"))
    env_wrapper: Any = _rule(EnvWrappers(), default=None, doc=(
        "wrappers of each environment copy, in order: an import path, {path: {keyword: value}}, or a list of them"))
    vec_env: str = _rule(OneOf(registry("envs.registry", "VEC_ENVS")), default="dummy", doc=(
        "how copies are stepped: dummy (in this process; engram's tasks numpy-batched), subproc (a process each), or "
        "torch (engram's tasks as tensors on the run's device, the rollout never copied to the host; scored on their "
        "numpy twins)"))
    n_envs: int = _rule(COUNT, default=16, doc="parallel environment copies")
    seed: int = _rule(Range(0, SEED_LIMIT, integer=True), default=0, doc="random seed of the run")
    total_timesteps: int = _rule(COUNT, default=100_000, doc=(
        "environment steps to train for (in whole rollouts: the run ends at the first multiple of n_steps × n_envs "
        "at or above it)"))
    device: str = _rule(Device(), default="auto", doc="torch device: auto, cpu, cuda, cuda:1, ...")
    threads: int = _rule(Threads(), default=1, doc=(
        "torch CPU threads, at most the cores this process may use; 0: every one of them. One by default: a second "
        "thread gains little on an idle machine and loses several times over once another process holds a core "
        "(docs/notes/threads.md)"))
    precision: str = _rule(OneOf(registry("agents", "PRECISIONS")), default="fp32", doc=(
        "compute dtype of the update's forward pass: fp32, or bf16 (autocast; see docs/benchmarks/speed.md)"))
    log_dir: str = _rule(Directory(), default="runs", doc="parent directory of run directories")
    eval_freq: int = _rule(Range(0, integer=True, note="0: only at the end"), default=10_000, doc=(
        "evaluate every this many environment steps (0: only at the end)"))
    n_eval_episodes: int = _rule(COUNT, default=20, doc="episodes per evaluation")
    n_eval_envs: int = _rule(COUNT, default=4, doc="parallel environment copies used for evaluation")
    checkpoint_freq: int = _rule(Range(0, integer=True, note="0: none"), default=10_000, doc=(
        "save a checkpoint every this many environment steps (0: none)"))
    keep_checkpoints: int = _rule(Range(0, integer=True, note="0: keep all"), default=3, doc=(
        "checkpoints kept in checkpoints/: the newest this many plus the one with the best evaluation (0: keep all)"))
    success_threshold: float = _rule(Range(0.0, 1.0), default=0.9, doc=(
        "success rate that counts as solving the task (for summaries)"))
    stop_when_solved: int = _rule(Range(0, integer=True, note="0: never stop early"), default=0, doc=(
        "stop training after this many evaluations in a row at success_threshold or above (0: train the whole budget; "
        "SB3's StopTrainingOnRewardThreshold, on the success rate)"))
    solved_lr_factor: float = _rule(Range(0.0, 1.0, low_open=True, note="1: keep the learning rate"), default=1.0, doc=(
        "once solved_lr_streak evaluations in a row reach success_threshold, multiply the learning rate by this factor "
        "for the rest of the run (1: never): a solved policy is then refined in small steps instead of being moved off "
        "its solution"))
    solved_lr_streak: int = _rule(COUNT, default=1, doc=(
        "evaluations in a row at success_threshold before solved_lr_factor applies (2: a solved evaluation must be "
        "confirmed by the next, so a lucky one does not slow a policy that is not there yet)"))
    hyperparams: str = _rule(Text(), default="auto", doc=(
        "the hyper-parameter entry the settings start from (docs/hyperparams.md): auto (the entry of the learner's "
        "shipped file, configs/hyperparams/<algo>.yml, that matches env), none, a file of entries (FILE, or a shipped "
        "name: ppo), or one entry of it (FILE#KEY); a run's config.yaml records the entry applied, FILE#KEY or none"))
    init_from: str = _rule(SavedModel(), default="", doc=(
        "start from the policy weights of a saved model (a run directory or its model.zip), e.g. one trained on an "
        "easier version of the task (rl-zoo3's --trained-agent); the architecture must match"))
    policy: dict[str, Any] = _rule(Entries(optional=False), default_factory=dict, doc=(
        "policy options: net_arch, activation_fn, ortho_init, share_backbone, log_std_init"))
    options: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "doc": "options per algorithm or backbone name (YAML keys named after them)"})

    def __setattr__(self, name: str, value: Any) -> None:
        """A setting by its name; a name that is no setting is refused (a misspelt one would be ignored)."""
        if name not in RunConfig.__dataclass_fields__:
            raise ConfigError(f"RunConfig.{name}: unknown setting {name!r}; valid settings: "
                              f"{', '.join(RunConfig.__dataclass_fields__)}")
        object.__setattr__(self, name, value)

    def algo_options(self) -> dict[str, Any]:
        return dict(self.options.get(self.algo, {}))

    def backbone_options(self) -> dict[str, Any]:
        return dict(self.options.get(self.backbone, {}))

    def run_name(self) -> str:
        return f"{env_slug(self.env)}__{self.algo}-{self.backbone}__{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "options"}
        data.update(self.options)
        return data


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig) if f.name != "options"}


def field_default(spec: dataclasses.Field[Any]) -> Any:
    """The default of a run setting (a fresh one for a list or a mapping)."""
    return spec.default_factory() if spec.default is dataclasses.MISSING else spec.default  # type: ignore[misc]


def env_slug(env: str) -> str:
    """An env spec as part of a folder name: `pkg.envs:Maze` → `pkg.envs-Maze`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", env).strip("-")


def algo_defaults(name: str) -> dict[str, Any]:
    """The options of an algorithm with their defaults (from its constructor)."""
    params = inspect.signature(algos()[name].__init__).parameters
    skip = {"self", "policy", "env", "policy_kwargs", "tensorboard_log", "verbose", "seed", "device", "precision",
            "_init_setup_model"}
    return {k: p.default for k, p in params.items() if k not in skip and p.default is not inspect.Parameter.empty}


def algo_settings(algo: str, given: dict[str, Any], n_envs: int) -> dict[str, Any]:
    """Every option of the learner `algo` in a run of `n_envs` copies: those `given`, the defaults for the rest,
    the default `batch_size` cut to the rollout as the learner cuts it (`agents.on_policy.default_batch_size`)."""
    from agents.on_policy import default_batch_size

    options = {**algo_defaults(algo), **given}
    if "batch_size" not in given and "batch_size" in options:
        options["batch_size"] = default_batch_size(options["batch_size"], options["n_steps"], n_envs)
    return options


def section_defaults(name: str) -> dict[str, Any]:
    """Options of the algorithm or backbone `name`."""
    if name in algos():
        return algo_defaults(name)
    return backbones()[name].options()


def section_rules(name: str) -> dict[str, Rule]:
    """The rule of each option of the algorithm or backbone `name`, from its constructor's annotations."""
    from policies.options import option_rules

    cls = algos()[name] if name in algos() else backbones()[name].cls
    return option_rules(cls.__init__)


def parse_value(text: str) -> Any:
    """A command-line value: a Python literal (`1e-3`, `[64, 64]`, `{'a': 1}`), a YAML
    scalar (`true`, `null`) or flow collection (`{top_k: 8}`), or else the string itself.
    Never evaluated as code; a number too large for a float (`1e999`) stays the text as typed, for a message to
    show. Nothing (`key=`) is the empty text, as typed, not YAML's null."""
    if not text.strip():
        return text
    if re.fullmatch(r"\s*[+-]?0\d+\s*", text) and len(text) < 100:
        return int(text)  # 017 as 17, as YAML files read it (Python's parser refuses the leading zero)
    try:
        value = ast.literal_eval(text)
        return text if isinstance(value, float) and beyond_float(text) else value
    except (ValueError, SyntaxError, RecursionError, MemoryError):  # too deep or too long for Python's parser too
        pass
    try:
        value = strict_yaml.load(text)
    except strict_yaml.StrictYAMLError as error:
        raise ConfigError(f"{shown(text)}: {error.problem}") from None
    except (yaml.YAMLError, ValueError, RecursionError):  # an integer of more digits than Python converts, ...
        return text
    flow_collection = isinstance(value, dict | list) and text.lstrip()[:1] in ("{", "[")
    return value if isinstance(value, bool | type(None)) or flow_collection else text


def coerce(key: str, value: Any, default: Any, schedules: bool = True, rule: Rule | None = None) -> Any:
    """Check `value` against the type of `default`, or against `rule` where the option's constructor annotates one
    (`read_number` for a `Range`: an integer option takes `2.0` and `1e3` as the integers they are, whatever its
    default); numbers written as strings are converted; a `lin_` schedule only with `schedules` (a learner's options,
    not an env's keyword arguments)."""
    if value is None and getattr(rule, "optional", False):
        return None
    if isinstance(rule, Range):
        number = read_number(key, value, rule, schedules)
        return float(number) if isinstance(default, float) and isinstance(number, int) else number
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={shown(value)}: expected true or false")
    if isinstance(default, int) and isinstance(value, bool):
        raise ConfigError(f"{key}={shown(value)}: expected an integer")
    if isinstance(default, int):
        number = _parse_number(value)
        if isinstance(number, float) and number.is_integer():
            number = int(number)
        if isinstance(number, int):
            return number
        raise ConfigError(f"{key}={shown(value)}: expected an integer")
    number_like = isinstance(default, float) or is_linear_schedule(default)
    if number_like or (default is None and _parse_number(value) is not None):
        if isinstance(value, str) and value.startswith("lin_") and schedules:
            return linear_schedule(key, value)
        number = _parse_number(value)
        if number is None and not (default is None and value is None):
            raise ConfigError(f"{key}={shown(value)}: expected a number"
                              + (" (or lin_<number> for a linear schedule)" if schedules else ""))
        too_large = isinstance(number, int) and default is not None and abs(number) > _LARGEST_FLOAT
        if too_large or (isinstance(value, str) and beyond_float(value)):  # a float would hold inf, not the number
            raise ConfigError(f"{key}={shown(value)}: expected a number a float holds (at most about 1.8e308)")
        if number is None or default is None:  # optional options keep ints as ints (d_head, d_inner)
            return number
        return float(number)
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{key}={shown(value)}: expected a string")
    if isinstance(default, dict) and not isinstance(value, dict):
        raise ConfigError(f"{key}={shown(value)}: expected a mapping")
    if isinstance(default, list) and isinstance(value, str):
        return [value]
    return value


_LARGEST_FLOAT = sys.float_info.max


def read_number(key: str, value: Any, rule: Range, schedules: bool = True) -> Any:
    """`value` as the number `rule` takes: text read as a number (an int stays one), a whole number as an int for an
    integer rule, `lin_<start>[_<end>]` as a schedule; `ConfigError` with the rule's description for
    anything else. The range itself is the rule's to check (`Range.check`)."""
    if isinstance(value, str) and value.startswith("lin_") and schedules:  # refused by `Range.check` where no schedule
        return linear_schedule(key, value)
    if callable(value):
        return value  # a schedule given as a function: `Range.check` calls it
    if isinstance(value, str) and beyond_float(value):
        raise ConfigError(f"{key}={shown(value)}: expected a number a float holds (at most about 1.8e308)")
    number = _parse_number(value)
    if rule.integer and isinstance(number, float) and number.is_integer():
        number = int(number)
    if number is None or (rule.integer and not isinstance(number, int)):
        raise ConfigError(f"{key}={shown(value)}: expected {rule.describe()}")
    if not rule.integer and abs(number) > _LARGEST_FLOAT:
        raise ConfigError(f"{key}={shown(value)}: expected a number a float holds (at most about 1.8e308)")
    return number


def _parse_number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, numbers.Integral):  # numpy's integers and floats, as Python's
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        for read in (int, lambda text: int(text, 0), float):  # 17, 0x11 / 0o21 / 0b10001, 1.7e1
            try:
                return read(value)
            except ValueError:
                continue
        return None
    return None


def _valid_top_level() -> list[str]:
    return [*FIELDS, *algos(), *backbones()]


def apply(config: RunConfig, key: str, value: Any) -> None:
    """Set a dotted `key` (`seed`, `env_kwargs.length`, `gtrxl.memory_length`, `policy.net_arch`)."""
    head, _, rest = key.partition(".")
    if head in FIELDS:
        default = field_default(FIELDS[head])
        if isinstance(default, dict):
            if not rest:
                for sub, sub_value in coerce(head, value, default).items():
                    apply(config, f"{head}.{sub}", sub_value)
                return
            if head == "policy":
                if rest not in POLICY_OPTIONS:
                    raise ConfigError(f"unknown policy option {shown(rest)}; valid options: "
                                      f"{', '.join(POLICY_OPTIONS)}")
                if POLICY_OPTIONS[rest] is not None and value is not None:  # null: the policy's own default
                    value = coerce(key, value, POLICY_OPTIONS[rest])
            _set_nested(getattr(config, head), rest, value)
            return
        if rest:
            raise ConfigError(f"{shown(key)}: {head} has no sub-keys")
        setattr(config, head, coerce(key, value, default))
        return
    if head in algos() or head in backbones():
        valid = section_defaults(head)
        if not rest:
            if not isinstance(value, dict):
                raise ConfigError(f"{shown(head)} holds the options of {head} and must be a mapping, "
                                  f"got {shown(value)}")
            for sub, sub_value in value.items():
                apply(config, f"{head}.{sub}", sub_value)
            return
        if rest not in valid:
            option, _, sub = rest.partition(".")
            whole = (f": an option is set whole, so a mapping option takes {head}.{option}={{{sub}: {shown(value)}}}"
                     if sub and option in valid else "")  # a key inside an option
            raise ConfigError(f"unknown option {shown(rest)} for {head}{whole}; valid options: {', '.join(valid)}")
        config.options.setdefault(head, {})[rest] = coerce(key, value, valid[rest], rule=section_rules(head).get(rest))
        return
    raise ConfigError(f"unknown configuration key {shown(head)}; valid keys: {', '.join(_valid_top_level())}")


def _set_nested(target: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value


_KINDS = {list: "a list", str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
"""how a message names what a YAML file holds instead of a mapping"""


def load_yaml(path: str | Path, example: str = "env: TMaze-v0") -> dict[str, Any]:
    """The mapping a YAML settings file holds; `ConfigError` (one line, naming the file and showing `example`, a
    setting of the kind the file holds) if it is missing, unreadable, binary or not UTF-8, empty, not valid YAML (a
    repeated key or an alias bomb included: `experiments.strict_yaml`), or not a mapping."""
    path = Path(path)
    name = repr(str(path))
    if not path.exists():
        raise ConfigError(f"config file {name} does not exist")
    if not path.is_file():
        raise ConfigError(f"config file {name} is not a file")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"config file {name} cannot be read: {error.strerror}") from error
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {name} is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset "
                          f"{error.start}); expected a YAML mapping of settings") from error
    if "\0" in text:
        raise ConfigError(f"config file {name} is binary (it holds NUL bytes); expected a YAML mapping of settings")
    try:
        data = strict_yaml.load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {name} is not valid YAML{strict_yaml.described(error)}") from error
    if data is None:
        raise ConfigError(f"config file {name} is empty; expected a YAML mapping of settings, e.g. {example!r}")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {name} holds {_KINDS.get(type(data), 'a ' + type(data).__name__)}; "
                          f"expected a YAML mapping of settings, e.g. {example!r}")
    return data


def parse_override(text: str, flag: str = "") -> tuple[str, Any]:
    """`key=value` → `(key, parsed value)`; the error of another form names `flag` (`--env-kwargs`) if given."""
    key, sep, value = text.partition("=")
    if not sep or not all(part.strip() for part in key.split(".")):
        raise ConfigError((f"{flag}: " if flag else "") + f"override {shown(text)} is not of the form dotted.key=value")
    return key.strip(), parse_value(value.strip())


def build_config(file: str | Path | None = None, flags: dict[str, Any] | None = None,
                 overrides: list[str] | None = None, entries: bool = True) -> RunConfig:
    """Defaults < the hyper-parameter entry of the run's env < YAML `file` < `flags` (already typed) <
    `overrides` (`key=value` strings). The entry is the one `experiments.hyperparams.entry_for` finds for
    the settings of the layers above it (their env, learner and `hyperparams`); `hyperparams` then records it
    (`FILE#KEY`, or `none`). `entries=False`: no entry, `hyperparams` as the layers give it (a run's own
    `config.yaml`, which holds every setting and the entry it was made from).

    The entry and the file may hold a section for several learners and backbones (a menu the command line picks
    from with `--algo` and `--backbone`): every key of the file is read and checked, but of their sections the
    configuration keeps only its own learner's and backbone's (`used_by`), so a run records only what it uses. The
    sections `flags` and `overrides` give are all kept: whether some run uses them is a question for the whole
    command, which may launch runs of several backbones (`experiments.validation.check_sections_used`)."""
    _check_layers(file, flags, overrides)
    Flag().check("entries", entries)
    menu = list((load_yaml(file) if file else {}).items())
    given = [*(flags or {}).items(), *(parse_override(text) for text in overrides or [])]
    config = _layered([*menu, *given])
    used = list(used_by(config, dict(menu)).items())
    if len(used) < len(menu):
        config = _layered([*used, *given])
    layers = [*used, *given]
    if not entries:
        return config
    from experiments.hyperparams import entry_for

    entry = entry_for(config)
    if entry is not None:
        config = _layered([*used_by(config, entry.settings).items(), *layers])
    config.hyperparams = "none" if entry is None else entry.name
    return config


def _check_layers(file: Any, flags: Any, overrides: Any) -> None:
    """Refuse (`ConfigError`) a layer of `build_config` of another type than its signature's."""
    if file is not None and not isinstance(file, str | os.PathLike):
        raise ConfigError(f"file={shown(file)}: expected the path of a YAML file (or a shipped config's name), or None")
    if flags is not None and not (isinstance(flags, Mapping) and all(isinstance(key, str) for key in flags)):
        raise ConfigError(f"flags={shown(flags)}: expected a dict of settings by key, or None")
    if overrides is not None and (isinstance(overrides, str) or not isinstance(overrides, list | tuple)
                                  or not all(isinstance(text, str) for text in overrides)):
        raise ConfigError(f"overrides={shown(overrides)}: expected a list of 'key=value' strings, or None")


def is_section(key: str) -> bool:
    """Whether the configuration key `key` (`ppo`, `gtrxl.d_model`) is, or lies in, a section: the options of a
    learner or a backbone, under its name."""
    head = key.partition(".")[0]
    return head in algos() or head in backbones()


def used_by(config: RunConfig, settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` (configuration keys, dotted or not) without those of the sections of the learners and backbones
    the run of `config` does not use."""
    return {key: value for key, value in settings.items()
            if not is_section(key) or key.partition(".")[0] in (config.algo, config.backbone)}


def reread(config: RunConfig) -> RunConfig:
    """`config` read back from its settings as its `config.yaml` writes them (`plain`), through `apply`: what
    reading a configuration file refuses (an unknown key, section or option, a value not of its option's type, a
    section that is no mapping) raises the same `ConfigError`, and what a file writes as text (`lin_3e-4`) becomes
    what the file's would. A `RunConfig` made by hand in Python thus holds what one read from a file holds."""
    if not isinstance(config, RunConfig):
        raise ConfigError(f"config={shown(config)}: expected a RunConfig (experiments.config.build_config makes one)")
    if not isinstance(config.options, dict):
        raise ConfigError(f"options={shown(config.options)}: expected a mapping of a learner's or a backbone's name "
                          "to its options, e.g. {'ppo': {'n_steps': 128}}")
    for name in config.options:
        if name not in algos() and name not in backbones():
            raise ConfigError(f"options[{shown(name)}]: not a learner's or a backbone's name; valid names: "
                              f"{', '.join([*algos(), *backbones()])}")
    return _layered(list(plain(config.to_dict()).items()))


def _layered(layers: list[tuple[str, Any]]) -> RunConfig:
    """The defaults with each `(key, value)` of `layers` set in turn."""
    config = RunConfig()
    for key, value in layers:
        apply(config, key, value)
    return config


def with_every_option(data: dict[str, Any], saved: bool = False) -> dict[str, Any]:
    """A configuration (as `RunConfig.to_dict` gives it) whose learner and backbone sections hold every
    option, defaults included. `saved`: `data` was read from a run's `config.yaml`, so a backbone option it
    lacks means what it did when the run was made (`policies.registry.saved_options`)."""
    from policies.registry import saved_options

    algo, backbone = data.get("algo", RunConfig.algo), data.get("backbone", RunConfig.backbone)
    out = dict(data)
    if algo in algos():
        out[algo] = algo_settings(algo, data.get(algo) or {}, data.get("n_envs", RunConfig.n_envs))
    if backbone in backbones():
        given = data.get(backbone) or {}
        out[backbone] = saved_options(backbone, given) if saved else backbones()[backbone].resolve(given)
    return out


def plain(value: Any) -> Any:
    """A configuration value as YAML writes it back (schedules as `lin_<start>_<end>`)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if is_linear_schedule(value):
        return f"lin_{value.start}_{value.end}"
    return value
