"""Search spaces of `train_rl.py tune`, declared in YAML (`configs/tune/*.yaml`).

Each key is a dotted configuration key, as `-p` takes it, and each value says how Optuna samples it (the
sampler functions of rl-zoo3's `hyperparams_opt.py` written as data)::

    ppo.learning_rate: {type: log_uniform, low: 1.0e-4, high: 3.0e-3, template: "lin_{}"}
    ppo.ent_coef: {type: log_uniform, low: 1.0e-4, high: 0.03}
    ppo.clip_range: {type: uniform, low: 0.1, high: 0.3}
    ppo.n_epochs: {type: int, low: 2, high: 10}
    ppo.gae_lambda: {type: categorical, choices: [0.9, 0.95, 0.98, 0.99]}

Types: `log_uniform` and `uniform` (floats in [low, high]), `int` (integers in [low, high], optional
`step`, with high - low a whole number of steps, or `log: true`, with low >= 1) and `categorical` (one of
`choices`). A range is refused unless Optuna can build its distribution as a trial samples it. `template`
turns the sampled value into the configured one (`"lin_{}"`: a learning rate that decays linearly from the sampled
value).

Before any trial runs, every value a space can give (both ends of a range, every category) is checked, one key at a
time over the base configuration, as the training command checks a run (`experiments.validation.validate`: the
setting's rule, the relations, the env and its kwargs, the model, the memory): a space reaching `ppo.gamma=1.5`, an
env that does not build or a run too big for memory is refused, naming the file, the key and the value; so is a key
a trial sets itself (`seed`, `log_dir`, `hyperparams`: `SET_PER_TRIAL`). Values of several keys together are
checked as each trial starts. Bounds are read as numbers as a run configuration file reads them (`low: 1e-4`, a
string to YAML 1.1, is the number 0.0001).
"""

from __future__ import annotations

import copy
import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.rules import short, shown
from experiments.config import ConfigError, RunConfig, apply, coerce, is_section, load_yaml

TYPES = ("log_uniform", "uniform", "int", "categorical")
SPEC_KEYS = {"type", "low", "high", "step", "log", "choices", "template"}
SET_PER_TRIAL = {
    "seed": "every trial runs the seeds of --tune-seeds (0, 1, ...), so a sampled seed would change nothing; "
            "give more --tune-seeds instead",
    "log_dir": "every trial's runs go to {log_dir}/tune/{name}/trial_<n>/; give --log-dir and --name instead",
    "hyperparams": "its entry is applied once, under the base configuration, so a sampled one would change nothing "
                   "but the record; give --hyperparams instead",
}
"""the run settings `train_rl.py tune` sets itself (not from the space), and why a space may not search them"""


@dataclass(frozen=True)
class Param:
    """One searched configuration key and its distribution."""

    key: str
    type: str
    low: float | None = None
    high: float | None = None
    step: int = 1
    log: bool = False
    choices: tuple[Any, ...] = ()
    template: str = ""
    source: str = ""
    """the space file that declares it"""

    def suggest(self, trial: Any) -> Any:
        """The value of this key in an Optuna `trial` (after `template`)."""
        if self.type == "categorical":
            value = self.decoded(trial.suggest_categorical(self.key, [label(choice) for choice in self.choices]))
        elif self.type == "int":
            value = trial.suggest_int(self.key, int(self.low), int(self.high), step=self.step, log=self.log)
        else:
            value = trial.suggest_float(self.key, self.low, self.high, log=self.type == "log_uniform")
        return self.configured(value)

    def distribution(self) -> Any:
        """The Optuna distribution `suggest` samples from (`optuna.distributions`), built with the same arguments;
        Optuna raises `ValueError` for a range it cannot sample. A categorical key has none (None)."""
        from optuna.distributions import FloatDistribution, IntDistribution

        if self.type == "categorical":
            return None
        if self.type == "int":
            return IntDistribution(int(self.low), int(self.high), step=self.step, log=self.log)
        return FloatDistribution(self.low, self.high, log=self.type == "log_uniform")

    def decoded(self, value: Any) -> Any:
        """The choice a sampled `label` stands for (a copy); any other value as given."""
        if self.type == "categorical" and isinstance(value, str):
            for choice in self.choices:
                if label(choice) == value:
                    return copy.deepcopy(choice)
        return value

    def configured(self, value: Any) -> Any:
        """A sampled value as the configuration takes it."""
        return self.template.format(value) if self.template else value

    def examples(self) -> dict[str, Any]:
        """Every value a category gives and both ends of a range, by where they come from (`low`, `choice 2`),
        as the configuration takes them."""
        if self.type == "categorical":
            return {f"choice {index + 1} of {len(self.choices)}": self.configured(choice)
                    for index, choice in enumerate(self.choices)}
        return {end: self.configured(int(value) if self.type == "int" else value)
                for end, value in (("low", self.low), ("high", self.high))}


@dataclass
class SearchSpace:
    """The parameters searched, in the order of their files."""

    params: list[Param] = field(default_factory=list)

    def suggest(self, trial: Any) -> dict[str, Any]:
        """The configured value of every key for `trial`."""
        return {param.key: param.suggest(trial) for param in self.params}

    def check(self, base: RunConfig | Sequence[RunConfig]) -> None:
        """Raise `ConfigError` (naming the space file, the key and the value) if a key is one a trial sets itself
        (`SET_PER_TRIAL`), is not a setting of the base configuration(s) `base` (those of a tune's tasks), lies in
        a learner's or backbone's section that none of them uses (`experiments.validation.unused_section`: the rule
        of `-p`), or a run of a base that uses it with one value the space can give (`Param.examples`, one key at a
        time) fails the checks of `train` (`experiments.validation.validate`: rules, relations, env, model,
        memory)."""
        from experiments.validation import unused_section, validate

        bases = [base] if isinstance(base, RunConfig) else list(base)
        for param in self.params:
            section = param.key.split(".", 1)[0]
            if section in SET_PER_TRIAL:
                raise ConfigError(f"search space {param.source!r}, {param.key}: {SET_PER_TRIAL[section]}")
            if (unused := unused_section(param.key, bases, runs="the runs")) is not None:
                raise ConfigError(f"search space {param.source!r}, {unused}")
            for config_base in bases:
                if is_section(section) and section not in (config_base.algo, config_base.backbone):
                    continue  # a trial drops it from this task's runs (`experiments.validation.validate_all`)
                for where, value in param.examples().items():
                    config = copy.deepcopy(config_base)
                    try:
                        apply(config, param.key, value)
                        validate(config)
                    except ConfigError as error:
                        named = re.search(rf"(?<![\w.]){re.escape(param.key)}=", str(error))  # the reason shows it
                        key = param.key if named else f"{param.key}={shown(value)}"
                        raise ConfigError(f"search space {param.source!r}, {key} ({where}): {error}") from None

    def configured(self, values: dict[str, Any]) -> dict[str, Any]:
        """Optuna's sampled values (`trial.params`) as the configuration takes them."""
        by_key = {param.key: param for param in self.params}
        return {key: by_key[key].configured(by_key[key].decoded(value)) if key in by_key else value
                for key, value in values.items()}


def label(choice: Any) -> Any:
    """A category as Optuna samples and records it: a scalar as it is, a list or mapping (`[64, 64]`) as its JSON
    text, which Optuna stores without a warning and `trials.csv` shows as written."""
    if choice is None or isinstance(choice, bool | int | float | str):
        return choice
    return json.dumps(choice, default=str)


def parse_param(key: str, spec: Any, source: str) -> Param:
    """One entry of a space file; a bad one raises `ConfigError` naming the key and the valid values."""
    where = f"{source}: {key}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}={short(repr(spec))}: expected a mapping such as "
                          "{type: uniform, low: 0.1, high: 0.3}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}; valid fields: {', '.join(sorted(SPEC_KEYS))}")
    kind = spec.get("type")
    if kind not in TYPES:
        raise ConfigError(f"{where}: type={short(repr(kind))}; valid types: {', '.join(TYPES)}")
    template = str(spec.get("template", ""))
    if template and (template.count("{}") != 1 or template.replace("{}", "").count("{") + template.count("}") > 1):
        raise ConfigError(f"{where}: template={short(repr(template))} must contain {{}} once, where the value goes, "
                          "and no other braces")
    fields = {"categorical": ("choices",), "int": ("low", "high", "step", "log"), "uniform": ("low", "high"),
              "log_uniform": ("low", "high")}[kind]
    unused = sorted(set(spec) - {"type", "template", *fields})
    if unused:
        raise ConfigError(f"{where}: {unused[0]!r} is not a field of type {kind}; its fields: "
                          f"{', '.join(('type', *fields, 'template'))}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: choices={short(repr(choices))}: expected a non-empty list")
        labels = [repr(label(choice)) for choice in choices]
        twice = [text for text in labels if labels.count(text) > 1]
        if twice and any(label(choice) != choice for choice in choices):
            raise ConfigError(f"{where}: choices={short(repr(choices))}: {twice[0]} is given twice; expected distinct "
                              "choices")
        return Param(key, kind, choices=tuple(choices), template=template, source=source)
    low, high = _number(spec.get("low")), _number(spec.get("high"))
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high)) or not low < high:
        raise ConfigError(f"{where}: low={short(repr(low))}, high={short(repr(high))}: expected two numbers with "
                          "low < high")
    if kind == "log_uniform" and low <= 0:
        raise ConfigError(f"{where}: low={short(repr(low))}: a log-uniform range must be positive")
    if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
        raise ConfigError(f"{where}: low={short(repr(low))}, high={short(repr(high))}: an int range needs integer "
                          "bounds")
    step = spec.get("step", 1)
    if kind == "int" and (not isinstance(step, int) or isinstance(step, bool) or step < 1):
        raise ConfigError(f"{where}: step={short(repr(step))}: expected a positive integer")
    if not isinstance(spec.get("log", False), bool):
        raise ConfigError(f"{where}: log={short(repr(spec['log']))}: expected true or false")
    param = Param(key, kind, float(low), float(high), step=step, log=bool(spec.get("log", False)), template=template,
                  source=source)
    try:
        with warnings.catch_warnings():  # a step that does not divide the range: refused below, with a message
            warnings.simplefilter("ignore")
            param.distribution()
    except ValueError as error:
        fields = ", ".join(f"{name}={short(repr(spec[name]))}" for name in ("low", "high", "step", "log")
                           if name in spec)
        raise ConfigError(f"{where}: {fields}: Optuna cannot sample this range: {error}") from None
    if kind == "int" and (int(high) - int(low)) % step:
        steps = (int(high) - int(low)) // step
        valid = [int(low) + n * step for n in (steps, steps + 1) if n > 0]
        raise ConfigError(f"{where}: high={short(repr(spec['high']))}, step={step}: high - low must be a whole number "
                          f"of steps from low={short(repr(spec['low']))}; valid high: {' or '.join(map(str, valid))}")
    return param


def _number(value: Any) -> Any:
    """A bound as a run configuration file reads a number (`experiments.config.coerce`: `1e-4`, a string to
    YAML 1.1, included); anything else as given, for the caller's message."""
    try:
        return coerce("", value, 0.0, schedules=False)
    except ConfigError:
        return value


def load_space(paths: list[str | Path]) -> SearchSpace:
    """The union of the space files `paths`; a key in a later file replaces the same key in an earlier one."""
    params: dict[str, Param] = {}
    for path in paths:
        for key, spec in load_yaml(path).items():
            params[key] = parse_param(str(key), spec, str(path))
    if not params:
        raise ConfigError(f"space file(s) {', '.join(map(str, paths))}: no parameter to search")
    return SearchSpace(list(params.values()))


def default_space_files(algo: str, backbone: str, directory: Path) -> list[Path]:
    """`{directory}/{algo}.yaml` and `{directory}/{backbone}.yaml`, those that exist."""
    return [path for path in (directory / f"{algo}.yaml", directory / f"{backbone}.yaml") if path.is_file()]
