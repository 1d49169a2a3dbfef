"""Search spaces of ``train_rl.py tune``, declared in YAML (``configs/tune/*.yaml``).

Each key is a dotted configuration key, as ``-p`` takes it, and each value says how Optuna samples it (the
sampler functions of rl-zoo3's ``hyperparams_opt.py`` written as data)::

    ppo.learning_rate: {type: log_uniform, low: 1.0e-4, high: 3.0e-3, template: "lin_{}"}
    ppo.ent_coef: {type: log_uniform, low: 1.0e-4, high: 0.03}
    ppo.clip_range: {type: uniform, low: 0.1, high: 0.3}
    ppo.n_epochs: {type: int, low: 2, high: 10}
    ppo.gae_lambda: {type: categorical, choices: [0.9, 0.95, 0.98, 0.99]}

Types: ``log_uniform`` and ``uniform`` (floats in [low, high]), ``int`` (integers in [low, high], optional
``step`` or ``log: true``) and ``categorical`` (one of ``choices``). ``template`` turns the sampled value into
the configured one (``"lin_{}"``: a learning rate that decays linearly from the sampled value).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.config import ConfigError, RunConfig, apply, load_yaml

TYPES = ("log_uniform", "uniform", "int", "categorical")
SPEC_KEYS = {"type", "low", "high", "step", "log", "choices", "template"}


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

    def suggest(self, trial: Any) -> Any:
        """The value of this key in an Optuna ``trial`` (after ``template``)."""
        if self.type == "categorical":
            value = trial.suggest_categorical(self.key, list(self.choices))
        elif self.type == "int":
            value = trial.suggest_int(self.key, int(self.low), int(self.high), step=self.step, log=self.log)
        else:
            value = trial.suggest_float(self.key, self.low, self.high, log=self.type == "log_uniform")
        return self.configured(value)

    def configured(self, value: Any) -> Any:
        """A sampled value as the configuration takes it."""
        return self.template.format(value) if self.template else value

    def examples(self) -> list[Any]:
        """Values at the edges of the space (checked against the configuration before any trial runs)."""
        if self.type == "categorical":
            return [self.configured(choice) for choice in self.choices]
        return [self.configured(int(v) if self.type == "int" else v) for v in (self.low, self.high)]


@dataclass
class SearchSpace:
    """The parameters searched, in the order of their files."""

    params: list[Param] = field(default_factory=list)

    def suggest(self, trial: Any) -> dict[str, Any]:
        """The configured value of every key for ``trial``."""
        return {param.key: param.suggest(trial) for param in self.params}

    def check(self, base: RunConfig) -> None:
        """Raise :class:`ConfigError` if a key or an edge value is not a valid setting of ``base``."""
        for param in self.params:
            for value in param.examples():
                apply(copy.deepcopy(base), param.key, value)

    def configured(self, values: dict[str, Any]) -> dict[str, Any]:
        """Optuna's sampled values (``trial.params``) as the configuration takes them."""
        by_key = {param.key: param for param in self.params}
        return {key: by_key[key].configured(value) if key in by_key else value for key, value in values.items()}


def parse_param(key: str, spec: Any, source: str) -> Param:
    """One entry of a space file; a bad one raises :class:`ConfigError` naming the key and the valid values."""
    where = f"{source}: {key}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}={spec!r}: expected a mapping such as {{type: uniform, low: 0.1, high: 0.3}}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}; valid fields: {', '.join(sorted(SPEC_KEYS))}")
    kind = spec.get("type")
    if kind not in TYPES:
        raise ConfigError(f"{where}: type={kind!r}; valid types: {', '.join(TYPES)}")
    template = str(spec.get("template", ""))
    if template and "{}" not in template:
        raise ConfigError(f"{where}: template={template!r} must contain {{}} where the value goes")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: choices={choices!r}: expected a non-empty list")
        return Param(key, kind, choices=tuple(choices), template=template)
    low, high = spec.get("low"), spec.get("high")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high)) or not low < high:
        raise ConfigError(f"{where}: low={low!r}, high={high!r}: expected two numbers with low < high")
    if kind == "log_uniform" and low <= 0:
        raise ConfigError(f"{where}: low={low!r}: a log-uniform range must be positive")
    if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
        raise ConfigError(f"{where}: low={low!r}, high={high!r}: an int range needs integer bounds")
    step = spec.get("step", 1)
    if kind == "int" and (not isinstance(step, int) or step < 1):
        raise ConfigError(f"{where}: step={step!r}: expected a positive integer")
    return Param(key, kind, float(low), float(high), step=step, log=bool(spec.get("log", False)), template=template)


def load_space(paths: list[str | Path]) -> SearchSpace:
    """The union of the space files ``paths``; a key in a later file replaces the same key in an earlier one."""
    params: dict[str, Param] = {}
    for path in paths:
        for key, spec in load_yaml(path).items():
            params[key] = parse_param(str(key), spec, str(path))
    if not params:
        raise ConfigError(f"space file(s) {', '.join(map(str, paths))}: no parameter to search")
    return SearchSpace(list(params.values()))


def default_space_files(algo: str, backbone: str, directory: Path) -> list[Path]:
    """``{directory}/{algo}.yaml`` and ``{directory}/{backbone}.yaml``, those that exist."""
    return [path for path in (directory / f"{algo}.yaml", directory / f"{backbone}.yaml") if path.is_file()]
