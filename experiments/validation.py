"""Settings and their checks: `validate` refuses a bad configuration with one line naming the key.

Run settings declare their rule in `experiments.config.RunConfig`'s field metadata. Every other option
declares its rule where it is taken, in the annotation of its constructor's parameter (`policies.options`):
`ppo.*` and `vmpo.*` in the learners' signatures, `<backbone>.*` in the backbone class's, the options inside
`attention_options` and `position_options` in the chosen attention's and position scheme's, `policy.*` in
the policy's. Here each is checked against that rule with its key named by section (`ppo.gamma`,
`gtrxl.attention_options.local_window`); then the relations the chosen components declare between their options
(`n_steps` a multiple of `segment_length`, `n_heads` a divisor of `d_model`), the learners' rule that `batch_size`
is at most the rollout (`agents.on_policy.check_batch_size`) and `RELATIONS`, those between settings of the run.
`validate` then builds one environment copy and the policy on the meta device (no storage) and checks that the run
fits in memory, so a bad setting is refused before a run directory is made or anything big allocated. Last, a
section (a learner's or a backbone's options) that no run uses is refused (`check_sections_used`): `validate` asks
it of its one run, `validate_all` of all the runs of one command, of which each keeps its own sections. A
configuration is first read back through `experiments.config.reread`, so one made by hand meets the checks of one
read from a file, and an error whose key holds the value of the hyper-parameter entry the run starts from names that
entry (`experiments.hyperparams.named_source`). `docs/validation.md` lists the rules with real messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from agents import ALGOS
from agents.exploration import check_action_space
from agents.on_policy import check_aux_coefs, check_batch_size
from envs import env_family, make_env, make_vec_env
from envs.conformance import api_problem
from envs.imports import ImportPathError, cause, import_packages
from envs.registry import check_kwargs
from envs.rules import VERBOSITY, ConfigError, Range, Rule, one_line, shown
from envs.wrappers import EnvWrapperError
from experiments.config import (
    REPS,
    RunConfig,
    algo_settings,
    coerce,
    is_section,
    plain,
    reread,
    section_defaults,
)
from experiments.footprint import check_fits, estimate
from experiments.hyperparams import chosen, load, named_source
from experiments.rules import Directory, FolderName
from experiments.training import check_policy_fits, policy_kwargs, saved_policy_weights
from policies import ATTENTIONS, BACKBONES, POSITIONS
from policies.catalogue import Catalogue
from policies.options import check_options, option_rules, relations
from policies.policy import MemoryActorCriticPolicy
from policies.spaces import ExtractorMismatchError, check_spaces

FINITE_ACTIONS_ONLY = ("exploration_floor", "uniform_kl_coef")
"""learner options that, when set above 0, need a finite action space (:mod:`agents.exploration`)"""


class Settings:
    """A read-only view of a configuration for `RELATIONS`: `n_envs` (a run setting),
    `algo.batch_size` (the chosen learner's option, its default if unset: `experiments.config.algo_settings`),
    `backbone.d_model`."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.sections = {"algo": (config.algo, algo_settings(config.algo, config.algo_options(), config.n_envs)),
                         "backbone": (config.backbone,
                                      {**section_defaults(config.backbone), **config.backbone_options()})}

    def __getitem__(self, key: str) -> Any:
        kind, _, option = key.partition(".")
        return self.sections[kind][1][option] if option else getattr(self.config, key)

    def name(self, key: str) -> str:
        """`algo.batch_size` → `ppo.batch_size`."""
        kind, _, option = key.partition(".")
        return f"{self.sections[kind][0]}.{option}" if option else key

    def show(self, key: str) -> str:
        """`ppo.batch_size=256`."""
        return f"{self.name(key)}={shown(plain(self[key]))}"


@dataclass(frozen=True)
class RunRelation:
    """A rule between settings of a run (of different components, or of the run itself): where `holds` is
    false, the message names `key` and says what was `expected`. Relations between the options of one
    component are that component's (`policies.options.Relation`)."""

    key: str
    holds: Callable[[Settings], bool]
    expected: Callable[[Settings], str]


RELATIONS: tuple[RunRelation, ...] = (
    RunRelation("stop_when_solved", lambda s: s["stop_when_solved"] == 0 or s["eval_freq"] > 0,
                lambda s: "0 when eval_freq=0 (stopping early needs evaluations during training)"),
)
"""Rules between settings of the run, checked after the components' own relations and the learners' rule that
`batch_size` is at most the rollout (`agents.on_policy.check_batch_size`, which the learners apply themselves)."""

COUNT = Range(1, integer=True)
CLI_OPTIONS: dict[str, Rule] = {
    "workers": COUNT,
    "max_retries": Range(0, integer=True),
    "reps": REPS,
    "verbose": VERBOSITY,
    "study": FolderName(note="the study directory under --log-dir"),
    "name": FolderName(note="the tune study directory under {log_dir}/tune"),
}
"""Command-line options that are not run settings (``--workers``, ``--reps``, ...)."""


def check_cli_options(values: dict[str, Any]) -> None:
    """Check the command-line options of `CLI_OPTIONS` present in `values`; messages name the flag."""
    for name, rule in CLI_OPTIONS.items():
        if values.get(name) is not None:  # None: the flag's default
            rule.check("--" + name.replace("_", "-"), values[name])


def _check_fields(config: RunConfig) -> None:
    for spec in dataclasses.fields(RunConfig):
        if "rule" in spec.metadata:
            spec.metadata["rule"].check(spec.name, getattr(config, spec.name))


def component(section: str) -> type:
    """The class whose constructor takes the options of `section` (a learner's or a backbone's name)."""
    return ALGOS[section] if section in ALGOS else BACKBONES[section].cls


def _check_sections(config: RunConfig) -> None:
    """Each option of every section given against the rule in its constructor's signature (whether the run uses
    the section is `check_sections_used`'s question), and the options of the attention and position a backbone
    chooses against theirs."""
    for section, options in config.options.items():
        check_options(component(section).__init__, options, prefix=f"{section}.")
        if section in BACKBONES:
            defaults = BACKBONES[section].options()
            if "attention" in defaults:
                for key, catalogue, name, component_options in _components(section, {**defaults, **options}):
                    _check_component_options(key, catalogue, name, component_options)
    rules = option_rules(MemoryActorCriticPolicy.__init__, spelled=True)  # as a configuration file writes them
    for option, value in config.policy.items():
        rules[option].check(f"policy.{option}", value)


def _components(section: str, options: dict[str, Any]) -> list[tuple[str, Catalogue, str, dict[str, Any] | None]]:
    """The attention and position a backbone's `options` choose, each with its options and the key naming them."""
    attention, position = options["attention"], options.get("position")
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
            coerce(f"{key}.{option}", value, valid[option], rule=option_rules(catalogue[name].cls.__init__).get(option))
    check_options(catalogue[name].cls.__init__, options or {}, prefix=f"{key}.")


def check_relations(config: RunConfig) -> None:
    """The relations the chosen learner, backbone, attention and position declare between their options (every
    option at its value in this run), then `batch_size` at most the rollout and `RELATIONS`."""
    spec = BACKBONES[config.backbone]
    backbone_options = {**spec.options(), **spec.fixed, **config.backbone_options()}
    learner = algo_settings(config.algo, config.algo_options(), config.n_envs)
    chosen = [(component(config.algo), f"{config.algo}.", learner),
              (spec.cls, f"{config.backbone}.", backbone_options)]
    if "attention" in backbone_options:
        chosen += [(catalogue[name].cls, f"{key}.", {**catalogue.options(name), **(options or {})})
                   for key, catalogue, name, options in _components(config.backbone, backbone_options)]
    for cls, prefix, values in chosen:
        for relation in relations(cls):
            relation.check(values, prefix)
    settings = Settings(config)
    check_batch_size(settings["algo.batch_size"], settings["algo.n_steps"], settings["n_envs"], f"{config.algo}.")
    for run_relation in RELATIONS:
        if not run_relation.holds(settings):
            raise ConfigError(f"{settings.show(run_relation.key)}: expected {run_relation.expected(settings)}")


def check_env(config: RunConfig) -> Any:
    """The env spec, its packages, kwargs (names, types, values) and wrappers: one copy is built and returned."""
    try:
        import_packages(config.gym_packages)
    except ImportPathError as error:
        raise ConfigError(f"gym_packages={shown(config.gym_packages)}: {error}") from None
    try:
        check_kwargs(config.env, config.env_kwargs)
    except (ValueError, ImportError, gym.error.Error) as error:  # gymnasium's own: a missing optional package
        raise ConfigError(f"env={shown(config.env)}: {one_line(error).replace(repr(config.env), shown(config.env))}"
                          ) from None
    except TypeError as error:
        raise ConfigError(f"env_kwargs: {one_line(error)}") from None
    try:
        probe = make_env(config.env, env_wrapper=config.env_wrapper, gym_packages=config.gym_packages,
                         **config.env_kwargs)  # a render mode the env does not list is refused there
        try:
            check_spaces(probe.observation_space, probe.action_space)  # before a VecEnv allocates for them
            if (problem := api_problem(probe, config.seed)) is not None:  # before a VecEnv steps it in the run
                raise ValueError(f"breaks gymnasium's API: {problem}")
        except ValueError as error:
            raise ConfigError(f"env={shown(config.env)}: {error}") from None
        finally:
            probe.close()
        if config.vec_env == "torch":  # a torch twin that takes these kwargs (one copy, on the CPU)
            try:
                make_vec_env(config.env, 1, config.seed, env_wrapper=config.env_wrapper, vec_env="torch",
                             **config.env_kwargs).close()
            except (ValueError, TypeError) as error:
                raise ConfigError(one_line(error) if "vec_env=" in str(error) else
                                  f"vec_env='torch': env_kwargs: {one_line(error)}") from None
        return make_vec_env(config.env, 1, config.seed, env_wrapper=config.env_wrapper,
                            gym_packages=config.gym_packages, **config.env_kwargs)
    except (ConfigError, EnvWrapperError) as error:
        raise ConfigError(one_line(error)) from None
    except Exception as error:  # any failure of the env's own checks, named with the kwargs given
        given = " ".join(f"{k}={shown(v)}" for k, v in config.env_kwargs.items()) or "(no kwargs)"
        raise ConfigError(f"env={shown(config.env)} with env_kwargs {given} does not build ({cause(error)})") from None


def _check_action_space(config: RunConfig, action_space: Any) -> None:
    for option in FINITE_ACTIONS_ONLY:
        value = config.algo_options().get(option)
        if value:  # None or 0: off, or chosen by the learner for the action space
            try:
                check_action_space(action_space, option)
            except ValueError as error:
                raise ConfigError(f"{config.algo}.{option}={shown(plain(value))}: {error} "
                                  f"(env={shown(config.env)})") from None


def _build_policy_on_meta(config: RunConfig, env: Any) -> torch.nn.Module:
    """The policy of `config` on the meta device: every constructor check runs, no storage is allocated."""
    algo = config.algo_options()
    extra = {k: algo[k] for k in ("popart", "popart_beta") if k in algo}
    spaces = OnPolicyAlgorithm._wrap_env(env, verbose=0, monitor_wrapper=False)  # as the learner sees them
    kwargs = policy_kwargs(config)
    try:
        with torch.device("meta"):
            return MemoryActorCriticPolicy(spaces.observation_space, spaces.action_space, lambda _: 0.0,
                                           **kwargs, **extra)
    except ExtractorMismatchError as error:
        raise ConfigError(f"env={shown(config.env)}: {error}") from None
    except Exception as error:  # a constructor's own check, named with the section it came from
        given = config.backbone_options() or "(defaults)"
        raise ConfigError(f"{config.backbone} options {given} with policy {config.policy or '(defaults)'}: "
                          f"{one_line(error)}") from None


def _uses(config: RunConfig, section: str) -> bool:
    return section in (config.algo, config.backbone)


def unused_section(key: str, configs: Sequence[RunConfig], runs: str = "") -> str | None:
    """The message refusing the configuration key `key` (`ppo.gamma=0.9`, `gtrxl.d_model`) where it lies in a
    section (a learner's or a backbone's options) that none of `configs`, the runs of one command, uses; `None`
    where some run uses it or `key` is no section's. `runs`: how the message names them (`the runs`; by default `the
    run` for one configuration)."""
    section = key.partition(".")[0].partition("=")[0]
    if not is_section(section) or any(_uses(config, section) for config in configs):
        return None
    kind, chosen = ("learner", [c.algo for c in configs]) if section in ALGOS else ("backbone",
                                                                                    [c.backbone for c in configs])
    runs = runs or ("the run" if len(configs) == 1 else "the runs")
    verb = "uses" if runs == "the run" else "use"
    valid = dict.fromkeys(name for config in configs for name in (config.algo, config.backbone))
    return (f"{key}: an option of the {kind} {section}, but {runs} {verb} {', '.join(dict.fromkeys(chosen))}, so it "
            f"would change nothing; valid sections here: {', '.join(valid)}")


def check_sections_used(configs: Sequence[RunConfig]) -> None:
    """Refuse (`ConfigError`, naming the first option of it with its value) a section that a configuration of
    `configs`, the runs one command launches, holds but none of them uses: a learner's options in runs of another
    learner, a backbone's in runs of other backbones. A section one run of a study uses may be held by all of its
    runs (`--backbone gru gtrxl -p gtrxl.d_model=32`). Only the sections given to the command reach a configuration:
    `experiments.config.build_config` keeps, of a configuration file's and a hyper-parameter entry's, those of the
    run's own learner and backbone."""
    for config in configs:
        for section, options in config.options.items() if isinstance(config.options, dict) else ():
            first = next(iter(options.items()), None) if isinstance(options, dict) else None
            key = section if first is None else f"{section}.{first[0]}={shown(plain(first[1]))}"
            if (message := unused_section(key, configs)) is not None:
                raise ConfigError(message)


def check_settings(config: RunConfig) -> None:
    """Each setting of `config` against its own rule, as `validate` checks it first, without the relations
    between settings, the environment or the model: what every value a tune search space can give must pass."""
    _check_fields(config)
    _check_sections(config)


def check_hyperparams(config: RunConfig) -> None:
    """Refuse a `hyperparams` that names no file of entries, or no entry of it: a run records it as the source of
    its settings."""
    try:
        path, key = chosen(config.hyperparams, config.algo)
        if path is not None:
            entries = load(path)
            if key is not None:
                entries.entry(key)
    except (ConfigError, OSError) as error:
        raise ConfigError(f"hyperparams={shown(config.hyperparams)}: {one_line(error)}") from None


def validate(config: RunConfig) -> None:
    """Refuse `config` with `ConfigError` (one line naming the key, the value and what is valid) if it does not read
    back as a configuration file of its settings would (`experiments.config.reread`), any setting is out of its
    range, no file can be created in its log_dir, the settings contradict each other, the environment or the policy
    cannot be built, or the run would not fit in memory. Where the key holds the value of the hyper-parameter entry
    the run starts from, the message names the entry (`hyperparams.named_source`)."""
    config = reread(config)
    try:
        _validate(config)
    except ConfigError as error:
        raise ConfigError(named_source(str(error), config)) from None


def _validate(config: RunConfig) -> None:
    check_settings(config)
    check_hyperparams(config)
    Directory().check_writable("log_dir", config.log_dir)
    check_relations(config)
    env = check_env(config)
    try:  # make_vec_env has refused an id without a time limit whose episodes need not end
        _check_action_space(config, env.action_space)
        policy = _build_policy_on_meta(config, env)
        try:
            check_aux_coefs(config.algo_options().get("aux_coefs"), policy, prefix=f"{config.algo}.")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if config.init_from:
            check_policy_fits(policy, saved_policy_weights(config.init_from), config.init_from)
        check_fits(config, estimate(config, env.observation_space, env.action_space, policy, env_family(config.env)))
    finally:
        env.close()
    check_sections_used([config])  # last: a bad value in the section is named as such first


def validate_all(configs: Iterable[RunConfig]) -> None:
    """`validate` the configurations of the runs of one command (a study's, a tune trial's): each run setting against
    its rule, then the sections over them all (`check_sections_used`: a section is kept when some run uses it, and
    this costs nothing, so a study of many runs hears of one no run uses at once), then each run with its own
    learner's and backbone's sections once (runs that differ only in their seed share the checks that do not depend
    on it). Each configuration then holds only its own sections (those its siblings use are dropped from it, in
    place), so a run records what it uses and is valid alone (`validate`, as `train` and a resume check it)."""
    configs = list(configs)
    for config in configs:
        _check_fields(config)
    check_sections_used(configs)
    seen = set()
    for config in configs:
        own = own_sections(config)
        key = repr(plain({**own.to_dict(), "seed": 0}))
        if key not in seen:
            seen.add(key)
            validate(own)
    for config in configs:
        config.options = own_sections(config).options


def own_sections(config: RunConfig) -> RunConfig:
    """A copy of `config` that holds only the sections of its own learner and backbone."""
    options = config.options if isinstance(config.options, dict) else {}
    return dataclasses.replace(config, options={name: value for name, value in options.items()
                                                if _uses(config, name)})
