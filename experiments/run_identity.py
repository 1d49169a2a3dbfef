"""What a run is, recorded inside every model it saves, and the check that a resume continues the same run.

A run is defined by its settings: the learner and its options, the backbone and its options, the environment with
its keyword arguments and wrappers, the seed, ... Each model a run saves (its checkpoints, `best_model.zip`,
`model.zip`) holds them in the zip entry `RECORD_ENTRY`, as `config.yaml` holds them; SB3 reads only the
entries it knows, so such a model loads anywhere. A model without the entry still says, in SB3's `data`, its
learner with its options, its backbone with its options, the number of environments and the seed:
`read_record` returns those, marked `partial`.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.rules import ConfigError, short
from experiments.config import RunConfig, algo_defaults, algos, backbones, plain, with_every_option

RECORD_ENTRY = "engram/config.json"
"""the zip entry of a saved model that holds its run's configuration"""
NOT_COMPARED = {"total_timesteps", "stop_when_solved", "device", "threads", "log_dir", "keep_checkpoints", "vec_env"}
"""the settings a resumed run may change: its budget and early stop, where and how fast it runs, what it keeps"""


@dataclass(frozen=True)
class Record:
    """The settings of the run that saved a model; `partial`: only those SB3 keeps, the others unknown."""

    settings: dict[str, Any]
    partial: bool = False


def config_record(config: RunConfig) -> dict[str, Any]:
    """The record of `config`: its resolved configuration with every option, as `config.yaml` holds it."""
    return plain(with_every_option(config.to_dict()))


def add_record(path: Path, settings: dict[str, Any]) -> None:
    """Add `settings` to the saved model at `path` (a zip SB3 wrote) as `RECORD_ENTRY`."""
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(RECORD_ENTRY, json.dumps(settings))


def read_record(path: Path) -> Record | None:
    """The record of the saved model at `path` (what SB3 keeps, `partial`, when it has none); `None` for a
    file that is no model SB3 wrote, or is damaged (loading it says how)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if RECORD_ENTRY in names:
                return Record(json.loads(archive.read(RECORD_ENTRY)))
            if "data" in names:
                return _sb3_record(json.loads(archive.read("data")))
    except (OSError, zipfile.BadZipFile, ValueError, KeyError, EOFError):
        return None
    return None


def _is_plain(value: Any) -> bool:
    return isinstance(value, bool | int | float | str)


def _sb3_record(data: dict[str, Any]) -> Record | None:
    """The settings that SB3's `data` of a saved model holds as plain values (others are pickled: skipped)."""
    learners = {cls.__name__: name for name, cls in algos().items()}
    algo = learners.get(data.get("learner_class"))
    policy = data.get("policy_kwargs")
    if algo is None or not isinstance(policy, dict) or not isinstance(policy.get("backbone"), str):
        return None
    settings: dict[str, Any] = {"algo": algo, "backbone": policy["backbone"],
                                algo: {key: data[key] for key in algo_defaults(algo) if _is_plain(data.get(key))},
                                policy["backbone"]: dict(policy.get("backbone_kwargs") or {})}
    settings.update({key: data[key] for key in ("n_envs", "seed") if _is_plain(data.get(key))})
    return Record(settings, partial=True)


def refuse_differences(config: RunConfig, saved: Record, source: str) -> None:
    """Refuse (`ConfigError` naming the keys) `config` where it differs from the run's `saved` settings, read
    from `source`.

    Compared: every setting but `NOT_COMPARED`, and the options of the run's learner and backbone one by one
    (the sections of other learners and backbones are not). A partial record compares only the settings it holds.
    """
    if saved.partial:
        previous = _compared(plain(saved.settings), config)
    else:
        previous = _compared(plain(with_every_option({**RunConfig().to_dict(), **saved.settings}, saved=True)),
                             config)
    current = _compared(plain(with_every_option(config.to_dict())), config)
    if "hyperparams" not in saved.settings:
        previous.pop("hyperparams", None)
        current.pop("hyperparams", None)
    keys = {key for key in previous if current.get(key) is not None} if saved.partial else set(previous) | set(current)
    changed = [f"{key} ({short(repr(previous.get(key)))} in the run, {short(repr(current.get(key)))} now)"
               for key in sorted(keys) if previous.get(key) != current.get(key)]
    if changed:
        raise ConfigError(f"--resume with a configuration that differs from {source} in: {', '.join(changed)}")


def _compared(data: dict[str, Any], config: RunConfig) -> dict[str, Any]:
    """The settings `refuse_differences` compares, the run's learner and backbone options as dotted keys."""
    flat = {key: value for key, value in data.items() if key not in NOT_COMPARED | set(algos()) | set(backbones())}
    for section in (config.algo, config.backbone):
        flat.update({f"{section}.{key}": value for key, value in (data.get(section) or {}).items()})
    return dict(item for key, value in flat.items() for item in _dotted(key, value))


def _dotted(key: str, value: Any) -> list[tuple[str, Any]]:
    """A setting as dotted keys down to its values that are no mapping (`env_kwargs.size`), so that a refusal
    names the one that differs."""
    if isinstance(value, dict) and value:
        return [item for name, inner in value.items() for item in _dotted(f"{key}.{name}", inner)]
    return [(key, value)]
