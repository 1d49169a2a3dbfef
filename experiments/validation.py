"""Settings and their checks: the valid values of every option, declared by name, and :func:`validate`.

Run settings declare their rule in :class:`experiments.config.RunConfig`'s field metadata; the
options of the sections (``ppo.*``, ``vmpo.*``, every backbone's ``<name>.*``, the attention
options inside them, ``policy.*``) are declared here by option name, one table per kind of
section. :data:`RELATIONS` holds the rules between settings (``batch_size`` at most the rollout,
``n_steps`` a multiple of the segment, ...). :func:`validate` applies all of it, then builds one
environment copy and the policy on the meta device (no storage) and checks that the run fits in
memory, so a bad setting is refused with one line naming it before a run directory is made or
anything big allocated. The kinds of rule are in :mod:`experiments.rules`; ``docs/validation.md``
lists them with real messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from agents import ALGOS
from agents.buffer import MINIBATCH_ORDERS
from agents.exploration import check_action_space
from envs import env_family, make_vec_env
from envs.imports import ImportPathError, cause, import_packages
from envs.registry import check_kwargs, keywords
from envs.wrappers import EnvWrapperError
from experiments.config import ACTIVATIONS, RunConfig, coerce, plain, section_defaults
from experiments.footprint import check_fits, estimate
from experiments.rules import (
    AnyOf,
    ConfigError,
    Entries,
    Flag,
    Items,
    LayerSizes,
    OneOf,
    Range,
    Rule,
    Text,
    one_line,
    short,
)
from experiments.training import policy_kwargs
from policies import ATTENTIONS, BACKBONES, POSITIONS
from policies.attention.compressive import COMPRESSIONS
from policies.backbones.linear_attention import FEATURE_MAPS
from policies.backbones.transformer_xl import GATES
from policies.catalogue import Catalogue
from policies.policy import MemoryActorCriticPolicy
from policies.positions.encodings import ABSOLUTE_ENCODINGS

COUNT = Range(1, integer=True)
SOME_COUNT = Range(1, integer=True, optional=True)
POSITIVE = Range(0.0, low_open=True)
NON_NEGATIVE = Range(0.0)
PROBABILITY = Range(0.0, 1.0)

LEARNER_OPTIONS: dict[str, Rule] = {
    "learning_rate": Range(0.0, schedule=True, note="0: the policy stays as it starts, e.g. from init_from"),
    "n_steps": COUNT,
    "batch_size": COUNT,
    "n_epochs": COUNT,
    "gamma": PROBABILITY,  # discount (Sutton & Barto 2018)
    "gae_lambda": PROBABILITY,  # GAE's λ (Schulman et al. 2016)
    "clip_range": Range(0.0, low_open=True, schedule=True),  # PPO's ε (Schulman et al. 2017)
    "clip_range_vf": Range(0.0, low_open=True, optional=True, schedule=True),
    "normalize_advantage": Flag(),
    "ent_coef": NON_NEGATIVE,
    "vf_coef": NON_NEGATIVE,
    "max_grad_norm": POSITIVE,
    "target_kl": Range(0.0, low_open=True, optional=True),
    "exploration_floor": Range(0.0, 1.0, schedule=True),  # mixture weight of the uniform policy
    "uniform_kl_coef": Range(0.0, optional=True),
    "segment_length": COUNT,
    "minibatch_order": OneOf(lambda: MINIBATCH_ORDERS),
    "aux_coefs": Entries(NON_NEGATIVE),
    "stats_window_size": COUNT,
    # V-MPO (Song et al. 2020): KL bounds and initial Lagrange multipliers are positive
    "epsilon_eta": POSITIVE,
    "epsilon_alpha": POSITIVE,
    "epsilon_alpha_mu": POSITIVE,
    "epsilon_alpha_sigma": POSITIVE,
    "eta_init": POSITIVE,
    "alpha_init": Range(0.0, low_open=True, optional=True),
    "dual_learning_rate": POSITIVE,
    "popart": Flag(),
    "popart_beta": Range(0.0, 1.0, low_open=True),  # PopArt's step size (van Hasselt et al. 2016)
}
"""The options of ``ppo`` and ``vmpo`` by name."""

BACKBONE_OPTIONS: dict[str, Rule] = {
    "d_model": COUNT,
    "n_layers": COUNT,
    "n_heads": COUNT,
    "d_head": SOME_COUNT,
    "d_inner": SOME_COUNT,
    "memory_length": COUNT,
    "gate": OneOf(lambda: GATES),
    "gate_bias": Range(optional=True),
    "attention": OneOf(lambda: [*ATTENTIONS, *(name for name in POSITIONS if name not in ATTENTIONS)]),
    # a position scheme's name: the full window with that position (the flat layout's names, make_attention)
    "attention_options": Entries(),  # each option: COMPONENT_OPTIONS, for the chosen attention
    "position": AnyOf((OneOf(lambda: [None]), OneOf(lambda: POSITIONS))),  # None: the attention's own default
    "position_options": Entries(),  # each option: COMPONENT_OPTIONS, for the chosen position scheme
    "dropout": Range(0.0, 1.0, high_open=True),
    "ff_chunks": COUNT,
    "episode_time": OneOf(lambda: ["none", *ABSOLUTE_ENCODINGS]),
    "max_episode_time": COUNT,
    "max_steps": COUNT,  # ACT's ponder steps (Graves 2016)
    "epsilon": Range(0.0, 1.0, low_open=True, high_open=True),  # ACT halts at a cumulative 1 − ε
    "halting_bias": Range(),
    "step_encoding": OneOf(lambda: ABSOLUTE_ENCODINGS),
    "feature_map": OneOf(lambda: FEATURE_MAPS),
    "n_features": SOME_COUNT,
    "hidden_size": COUNT,
    "k": COUNT,
}
"""The options of every backbone by name (``gtrxl.d_model``, ``lstm.hidden_size``, ...)."""

COMPONENT_OPTIONS: dict[str, Rule] = {
    "encoding": OneOf(lambda: ABSOLUTE_ENCODINGS),
    "local_window": SOME_COUNT,
    "window": SOME_COUNT,
    "global_steps": Range(0, integer=True),
    "block_length": SOME_COUNT,
    "random_blocks": Range(0, integer=True),
    "seed": Range(0, integer=True),
    "shifts": AnyOf((Range(optional=True, note="null: the default"), Items(Range(0, integer=True)))),
    "fifo_length": SOME_COUNT,
    "compression_rate": COUNT,
    "compression": OneOf(lambda: COMPRESSIONS),
    "summary_width": COUNT,
    "width": SOME_COUNT,
    "query_length": SOME_COUNT,
    "memory_extent": SOME_COUNT,
    "query_rows": SOME_COUNT,
    "query_columns": SOME_COUNT,
    "memory_rows": SOME_COUNT,
    "memory_columns": SOME_COUNT,
    "top_k": COUNT,
    "rank": SOME_COUNT,
    "n_buckets": AnyOf((OneOf(lambda: [1]), Range(2, integer=True, multiple_of=2))),  # Reformer's LSH
    "n_rounds": COUNT,
}
"""The options of the attentions and position schemes, inside a backbone's ``attention_options`` and
``position_options``, by name."""

POLICY_OPTIONS: dict[str, Rule] = {
    "net_arch": LayerSizes(),
    "activation_fn": OneOf(lambda: ACTIVATIONS),
    "ortho_init": Flag(),
    "share_backbone": Flag(),
    "features_extractor_class": Text(note="an import path, e.g. stable_baselines3.common.torch_layers.NatureCNN"),
    "features_extractor_kwargs": Entries(),
    "share_features_extractor": Flag(),
    "log_std_init": Range(),
    "normalize_images": Flag(),
    "lstm_hidden_size": Range(1, integer=True),
    "n_lstm_layers": Range(1, integer=True),
    "enable_critic_lstm": Flag(),
    "shared_lstm": Flag(),
}
"""The ``policy.*`` options; the last four are sb3-contrib's LSTM options, for ``backbone: lstm``."""

OBSERVATION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""the observation spaces SB3's preprocessing takes (also as the values of a Dict)"""
ACTION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""the action spaces MemoryPPO and V-MPO take"""

FINITE_ACTIONS_ONLY = ("exploration_floor", "uniform_kl_coef")
"""learner options that, when set above 0, need a finite action space (:mod:`agents.exploration`)"""


class Settings:
    """A read-only view of a configuration for :data:`RELATIONS`: ``n_envs`` (a run setting),
    ``algo.batch_size`` (the chosen learner's option, its default if unset), ``backbone.d_model``."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.sections = {"algo": (config.algo, {**section_defaults(config.algo), **config.algo_options()}),
                         "backbone": (config.backbone,
                                      {**section_defaults(config.backbone), **config.backbone_options()})}

    def __contains__(self, key: str) -> bool:
        kind, _, option = key.partition(".")
        return option in self.sections[kind][1] if option else hasattr(self.config, key)

    def __getitem__(self, key: str) -> Any:
        kind, _, option = key.partition(".")
        return self.sections[kind][1][option] if option else getattr(self.config, key)

    def name(self, key: str) -> str:
        """``algo.batch_size`` → ``ppo.batch_size``."""
        kind, _, option = key.partition(".")
        return f"{self.sections[kind][0]}.{option}" if option else key

    def show(self, key: str) -> str:
        """``ppo.batch_size=256``."""
        return f"{self.name(key)}={plain(self[key])!r}"


@dataclass(frozen=True)
class Relation:
    """A rule between settings: where ``needs`` are all set, ``holds`` must be true; else the message
    names ``key`` and says what was ``expected``."""

    key: str
    needs: tuple[str, ...]
    holds: Callable[[Settings], bool]
    expected: Callable[[Settings], str]


def _rollout(s: Settings) -> int:
    return s["algo.n_steps"] * s["n_envs"]


RELATIONS: tuple[Relation, ...] = (
    Relation("algo.n_steps", ("algo.n_steps", "algo.segment_length"),
             lambda s: s["algo.n_steps"] % s["algo.segment_length"] == 0,
             lambda s: f"a multiple of the training segment, {s.show('algo.segment_length')}"),
    Relation("algo.batch_size", ("algo.batch_size", "algo.segment_length"),
             lambda s: s["algo.batch_size"] % s["algo.segment_length"] == 0,
             lambda s: f"a multiple of the training segment, {s.show('algo.segment_length')}"),
    Relation("algo.batch_size", ("algo.batch_size", "algo.n_steps"),
             lambda s: s["algo.batch_size"] <= _rollout(s),
             lambda s: f"at most the rollout, {s.show('algo.n_steps')} x n_envs={s['n_envs']} = {_rollout(s)} steps"),
    Relation("backbone.n_heads", ("backbone.n_heads", "backbone.d_model", "backbone.d_head"),
             lambda s: s["backbone.d_head"] is not None or s["backbone.d_model"] % s["backbone.n_heads"] == 0,
             lambda s: f"a divisor of {s.show('backbone.d_model')} (or set {s.name('backbone.d_head')})"),
    Relation("stop_when_solved", ("stop_when_solved", "eval_freq"),
             lambda s: s["stop_when_solved"] == 0 or s["eval_freq"] > 0,
             lambda s: "0 when eval_freq=0 (stopping early needs evaluations during training)"),
)
"""Rules between settings, checked after each setting passed its own rule."""

CLI_OPTIONS: dict[str, Rule] = {
    "workers": COUNT,
    "max_retries": Range(0, integer=True),
    "reps": COUNT,
    "verbose": Range(0, 2, integer=True),
}
"""Command-line options that are not run settings (``--workers``, ``--reps``, ...)."""


def check_cli_options(values: dict[str, Any]) -> None:
    """Check the command-line options of :data:`CLI_OPTIONS` present in ``values``; messages name the flag."""
    for name, rule in CLI_OPTIONS.items():
        if values.get(name) is not None:  # None: the flag's default
            rule.check("--" + name.replace("_", "-"), values[name])


def _check_fields(config: RunConfig) -> None:
    for spec in dataclasses.fields(RunConfig):
        if "rule" in spec.metadata:
            spec.metadata["rule"].check(spec.name, getattr(config, spec.name))


def _check_sections(config: RunConfig) -> None:
    for section, options in config.options.items():
        table = LEARNER_OPTIONS if section in ALGOS else BACKBONE_OPTIONS
        for option, value in options.items():
            table[option].check(f"{section}.{option}", value)
        if section in BACKBONES:
            defaults = BACKBONES[section].options()
            if "attention" in defaults:
                for key, catalogue, name, component_options in _components(section, {**defaults, **options}):
                    _check_component_options(key, catalogue, name, component_options)
    for option, value in config.policy.items():
        POLICY_OPTIONS[option].check(f"policy.{option}", value)


def _components(section: str, options: dict[str, Any]) -> list[tuple[str, Catalogue, str, dict[str, Any] | None]]:
    """The attention and position a backbone's ``options`` choose, each with its options and the key naming them;
    a position scheme named as the attention means the full window with it (as
    :func:`policies.attention.layer.make_attention` reads it)."""
    attention, position = options["attention"], options.get("position")
    if attention in POSITIONS and attention not in ATTENTIONS and position is None:
        return [(f"{section}.attention_options", POSITIONS, attention, options.get("attention_options"))]
    chosen = [(f"{section}.attention_options", ATTENTIONS, attention, options.get("attention_options"))]
    if position is not None:
        chosen.append((f"{section}.position_options", POSITIONS, position, options.get("position_options")))
    return chosen


def _check_component_options(key: str, catalogue: Catalogue, name: str, options: dict[str, Any] | None) -> None:
    valid = catalogue.options(name)
    for option, value in (options or {}).items():
        if option not in valid:
            raise ConfigError(f"{key}.{option}: unknown option of {catalogue.kind} {name!r}; valid options: "
                              f"{', '.join(valid) or 'none'}")
        if valid[option] is not None:
            coerce(f"{key}.{option}", value, valid[option])
        COMPONENT_OPTIONS[option].check(f"{key}.{option}", value)


def _check_relations(config: RunConfig) -> None:
    settings = Settings(config)
    for relation in RELATIONS:
        if all(key in settings for key in relation.needs) and not relation.holds(settings):
            raise ConfigError(f"{settings.show(relation.key)}: expected {relation.expected(settings)}")


def check_env(config: RunConfig) -> Any:
    """The env spec, its packages, kwargs (names, types, values) and wrappers: one copy is built and returned."""
    try:
        import_packages(config.gym_packages)
    except ImportPathError as error:
        raise ConfigError(f"gym_packages={config.gym_packages!r}: {error}") from None
    try:
        accepted = keywords(config.env)
        check_kwargs(config.env, config.env_kwargs)
    except (ValueError, ImportError) as error:
        raise ConfigError(f"env={config.env!r}: {one_line(error)}") from None
    except TypeError as error:
        raise ConfigError(f"env_kwargs: {one_line(error)}") from None
    for name, value in config.env_kwargs.items():
        if accepted.named.get(name) is not None:
            coerce(f"env_kwargs.{name}", value, accepted.named[name])
    try:
        return make_vec_env(config.env, 1, config.seed, env_wrapper=config.env_wrapper,
                            gym_packages=config.gym_packages, **config.env_kwargs)
    except EnvWrapperError as error:
        raise ConfigError(one_line(error)) from None
    except Exception as error:  # any failure of the env's own checks, named with the kwargs given
        given = " ".join(f"{k}={v!r}" for k, v in config.env_kwargs.items()) or "(no kwargs)"
        raise ConfigError(f"env={config.env!r} with env_kwargs {given} does not build ({cause(error)})") from None


def _check_spaces(config: RunConfig, env: Any) -> None:
    """The env's observation and action spaces are ones SB3's policies take; else one line saying how to adapt."""
    observation, action = env.observation_space, env.action_space
    parts = observation.spaces.values() if isinstance(observation, spaces.Dict) else [observation]
    if not all(isinstance(part, OBSERVATION_SPACES) for part in parts):
        raise ConfigError(f"env={config.env!r}: its observation space {short(str(observation))} is not one SB3 takes "
                          "(Box, Discrete, MultiDiscrete, MultiBinary, or a flat Dict of them); flatten it with "
                          "env_wrapper: envs.adapters.FlatObservation")
    if not isinstance(action, ACTION_SPACES):
        raise ConfigError(f"env={config.env!r}: its action space {short(str(action))} is not one the learners take "
                          "(Box, Discrete, MultiDiscrete or MultiBinary)")


def _check_action_space(config: RunConfig, action_space: Any) -> None:
    for option in FINITE_ACTIONS_ONLY:
        value = config.algo_options().get(option)
        if value:  # None or 0: off, or chosen by the learner for the action space
            try:
                check_action_space(action_space, option)
            except ValueError as error:
                raise ConfigError(f"{config.algo}.{option}={plain(value)!r}: {error} (env={config.env})") from None


def _build_policy_on_meta(config: RunConfig, env: Any) -> torch.nn.Module:
    """The policy of ``config`` on the meta device: every constructor check runs, no storage is allocated."""
    algo = config.algo_options()
    extra = {k: algo[k] for k in ("popart", "popart_beta") if k in algo}
    spaces = OnPolicyAlgorithm._wrap_env(env, verbose=0, monitor_wrapper=False)  # as the learner sees them
    try:
        with torch.device("meta"):
            return MemoryActorCriticPolicy(spaces.observation_space, spaces.action_space, lambda _: 0.0,
                                           **policy_kwargs(config), **extra)
    except Exception as error:  # a constructor's own check, named with the section it came from
        given = config.backbone_options() or "(defaults)"
        raise ConfigError(f"{config.backbone} options {given} with policy {config.policy or '(defaults)'}: "
                          f"{one_line(error)}") from None


def validate(config: RunConfig) -> None:
    """Refuse ``config`` with :class:`ConfigError` (one line naming the key, the value and what is valid)
    if any setting is out of its range, the settings contradict each other, the environment cannot be
    built with its kwargs, the policy cannot be built, or the run would not fit in memory."""
    _check_fields(config)
    _check_sections(config)
    _check_relations(config)
    env = check_env(config)
    try:
        _check_spaces(config, env)
        _check_action_space(config, env.action_space)
        policy = _build_policy_on_meta(config, env)
        check_fits(config, estimate(config, env.observation_space, env.action_space, policy, env_family(config.env)))
    finally:
        env.close()


def validate_all(configs: Iterable[RunConfig]) -> None:
    """:func:`validate` each configuration once: runs that differ only in their seed share the checks
    that do not depend on it."""
    seen = set()
    for config in configs:
        _check_fields(config)
        key = repr(plain({**config.to_dict(), "seed": 0}))
        if key not in seen:
            seen.add(key)
            validate(config)
